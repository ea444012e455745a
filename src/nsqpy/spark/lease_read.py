"""One partition of the executor-side source: read one lease on one nsqd, on an executor.

The partition names the nsqd, the lease (``<query-run>/<batch>/<partition>``), how many
messages to take and whether this is a replay (docs/leases.md §8):

* a first read IDENTIFYs under the lease (state ``new``), SUBs, sets RDY to its share and takes
  messages until it has the share or the channel has been quiet for ``pollTimeoutMs``;
* a replay (a retried task, a re-run batch) IDENTIFYs with ``lease_replay``: nsqd takes the lease
  over from any connection of a lost attempt and sends everything the lease holds, nothing new;
* either way it ends with CLS and reads up to nsqd's ``CLOSE_WAIT``, which nsqd queues after every
  message it sent: whatever the lease holds from this connection is in the partition. A
  connection that ends any other way (taken over, nsqd gone) fails the task, and Spark's retry
  replays the lease.

The frames are kept as nsqd sent them and become Arrow columns at the end, with no Python object
per message (:func:`~nsqpy.spark.arrow.record_batch_from_frames`). Nothing is FINished here: the
driver finishes the batch's leases at Spark's commit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from nsqpy.client import NSQConnection, NSQError
from nsqpy.client.addr import parse_address
from nsqpy.protocol.frames import CLOSE_WAIT, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, HEARTBEAT

from .arrow import record_batch_from_frames
from .options import connection_options

log = logging.getLogger("nsqpy.spark")
_unpack_frame_head = struct.Struct(">ii").unpack_from


@dataclass(frozen=True)
class LeaseSpec:
    """What one partition reads (picklable: it travels inside Spark's InputPartition)."""

    tcp: str
    lease: str
    limit: int
    replay: bool


class LeaseReadError(NSQError):
    """The lease could not be read completely; the task fails and Spark retries it (a replay)."""


def _client_id() -> str:
    return f"{socket.gethostname().split('.')[0]}:{os.getpid()}"


class FrameStream:
    """Everything nsqd sends on a lease read after SUB, kept raw: where the message frames are,
    and the responses that matter (heartbeats are answered, ``CLOSE_WAIT`` ends the read, an
    error frame fails it). Parsing is one size unpack per frame; the columns are built from the
    bytes at the end (:func:`~nsqpy.spark.arrow.record_batch_from_frames`)."""

    def __init__(self, nop: Any, progress: asyncio.Event) -> None:
        self.buf = bytearray()
        self.pos = 0
        self.starts: list[int] = []
        self.sizes: list[int] = []
        self.close_wait = False
        self.error: str | None = None
        self._nop = nop
        self._progress = progress

    def feed(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = self.pos, len(buf)
        starts, sizes = self.starts.append, self.sizes.append
        while end - pos >= 8:
            size, frame_type = _unpack_frame_head(buf, pos)
            stop = pos + 4 + size
            if size < 4 or stop > end:
                if size < 4:
                    self.error = f"bad frame size {size}"
                break
            if frame_type == FRAME_TYPE_MESSAGE:
                if size < 30:
                    self.error = "short message frame"
                    break
                starts(pos)
                sizes(size)
            elif frame_type == FRAME_TYPE_RESPONSE:
                payload = bytes(buf[pos + 8 : stop])
                if payload == HEARTBEAT:
                    self._nop()
                elif payload == CLOSE_WAIT:
                    self.close_wait = True
            else:
                self.error = bytes(buf[pos + 8 : stop]).decode("utf-8", "replace")
            pos = stop
        self.pos = pos
        self._progress.set()

    @property
    def count(self) -> int:
        return len(self.starts)


async def read_lease(spec: LeaseSpec, cfg: Any, replay: bool) -> tuple[FrameStream, str]:
    """The lease's messages as raw frames (see the module docstring), and the state nsqd
    answered (``new``, ``joined`` or ``replay``)."""
    host, port = parse_address(spec.tcp)
    settings = cfg.connection
    extra: dict[str, Any] = {"lease": spec.lease}
    if replay:
        extra["lease_replay"] = True
    opts = connection_options(
        settings, identify_extra=extra, msg_timeout=cfg.lease_timeout,
        output_buffer_size=cfg.output_buffer_size, output_buffer_timeout=cfg.output_buffer_timeout,
        user_agent=f"{settings['user_agent']} executor",
        **({} if settings.get("client_id") else {"client_id": _client_id()}),
    )
    progress = asyncio.Event()
    conn = NSQConnection(host, port, opts)
    stream = FrameStream(conn.nop, progress)
    loop = asyncio.get_running_loop()

    async def until(done: Any, timeout: float) -> bool:
        """Wait for ``done()`` (checked on every arrival) at most ``timeout`` of silence."""
        while not done():
            if stream.error is not None or conn.is_closed:
                return False
            progress.clear()
            try:
                async with asyncio.timeout(timeout):
                    await progress.wait()
            except TimeoutError:
                return False
        return True

    try:
        answer = await conn.connect()
        lease = answer.get("lease")
        if not isinstance(lease, dict) or lease.get("name") != spec.lease:
            raise LeaseReadError(f"{spec.tcp} does not announce leases any more")
        await conn.subscribe(cfg.topic, cfg.channel)
        conn.take_raw(stream.feed)
        if lease.get("state") == "replay":
            conn.ready(1)  # the first RDY > 0 sends every held message; never a new one
        else:
            limit = min(spec.limit, int(lease.get("max_rdy_count", spec.limit)))
            conn.ready(limit)
            deadline = loop.time() + max(1.0, 10 * cfg.poll_timeout)
            while stream.count < limit and loop.time() < deadline:
                # quiet for pollTimeoutMs: the channel has nothing more for now
                if not await until(lambda: stream.count >= limit, cfg.poll_timeout):
                    break
        if stream.error is None and not conn.is_closed:
            conn.send(b"CLS\n")
            await until(lambda: stream.close_wait, max(5.0, cfg.poll_timeout))
        if not stream.close_wait:  # taken over, nsqd gone: the lease may hold more than we saw
            reason = stream.error or conn.close_reason or "no CLOSE_WAIT"
            raise LeaseReadError(f"{spec.tcp}: the read of lease {spec.lease} ended early: {reason}")
    except (OSError, NSQError, TimeoutError) as err:
        if isinstance(err, LeaseReadError):
            raise
        reason = conn.close_reason or err
        raise LeaseReadError(f"reading lease {spec.lease} at {spec.tcp} failed: {reason}") from err
    finally:
        conn.close()
    return stream, str(lease.get("state"))


def read_partition(spec: LeaseSpec, cfg: Any, replay: bool, schema: Any) -> Any:
    """The partition as one Arrow record batch (or None when the lease read nothing)."""
    started = time.monotonic()
    peak_before = _peak_rss_mib()
    stream, state = asyncio.run(read_lease(spec, cfg, replay))
    rows = None
    if stream.count:
        rows = record_batch_from_frames(stream.buf, stream.starts, stream.sizes, spec.tcp, cfg.topic,
                                        cfg.channel, schema)
    log.info("nsq source: lease %s at %s (%s): %d rows in %.3fs (pid %d, peak RSS %.0f -> %.0f MiB)",
             spec.lease, spec.tcp, state, stream.count, time.monotonic() - started, os.getpid(),
             peak_before, _peak_rss_mib())
    return rows


def _peak_rss_mib() -> float:
    """This process's peak resident set so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
