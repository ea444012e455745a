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

Nothing is FINished here: the driver finishes the batch's leases at Spark's commit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import time
from dataclasses import dataclass
from typing import Any

from nsqpy.client import MessageBatch, NSQConnection, NSQError
from nsqpy.client.addr import parse_address

from .arrow import record_batch
from .options import connection_options

log = logging.getLogger("nsqpy.spark")


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


async def read_lease(spec: LeaseSpec, cfg: Any, replay: bool) -> tuple[list[MessageBatch], str]:
    """The messages of the lease (see the module docstring), as the reads they came in, and the
    state nsqd answered (``new``, ``joined`` or ``replay``)."""
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
    batches: list[MessageBatch] = []
    received = 0
    arrived = asyncio.Event()

    def on_messages(batch: MessageBatch) -> None:
        nonlocal received
        batches.append(batch)
        received += len(batch)
        arrived.set()

    conn = NSQConnection(host, port, opts, on_messages=on_messages)
    try:
        answer = await conn.connect()
        lease = answer.get("lease")
        if not isinstance(lease, dict) or lease.get("name") != spec.lease:
            raise LeaseReadError(f"{spec.tcp} does not announce leases any more")
        await conn.subscribe(cfg.topic, cfg.channel)
        if lease.get("state") == "replay":
            conn.ready(1)  # the first RDY > 0 sends every held message; never a new one
        else:
            limit = min(spec.limit, int(lease.get("max_rdy_count", spec.limit)))
            conn.ready(limit)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + max(1.0, 10 * cfg.poll_timeout)
            while received < limit and not conn.is_closed:
                arrived.clear()
                wait = min(cfg.poll_timeout, deadline - loop.time())
                if wait <= 0:
                    break
                try:
                    async with asyncio.timeout(wait):
                        await arrived.wait()
                except TimeoutError:
                    break  # quiet for pollTimeoutMs: the channel has nothing more for now
        if conn.is_closed:  # taken over, or nsqd went away: the lease may hold more than we saw
            raise LeaseReadError(f"{spec.tcp}: connection ended before the read did")
        answer_cls = await conn.start_close()
        if answer_cls != b"CLOSE_WAIT":
            raise LeaseReadError(f"{spec.tcp}: unexpected answer to CLS: {answer_cls!r}")
    except (OSError, NSQError, TimeoutError) as err:
        reason = conn.close_reason or err
        raise LeaseReadError(f"reading lease {spec.lease} at {spec.tcp} failed: {reason}") from err
    finally:
        conn.close()
    return batches, str(lease.get("state"))


def read_partition(spec: LeaseSpec, cfg: Any, replay: bool, schema: Any) -> Any:
    """The partition as one Arrow record batch (or None when the lease read nothing)."""
    started = time.monotonic()
    peak_before = _peak_rss_mib()
    batches, state = asyncio.run(read_lease(spec, cfg, replay))
    ids: list[bytes] = []
    bodies: list[bytes] = []
    timestamps: list[int] = []
    attempts: list[int] = []
    for b in batches:
        ids += b.ids
        bodies += b.bodies
        timestamps += b.timestamps
        attempts += b.attempts
    rows = None if not ids else record_batch(ids, bodies, timestamps, attempts, spec.tcp, cfg.topic,
                                               cfg.channel, schema)
    log.info("nsq source: lease %s at %s (%s): %d rows in %.3fs (pid %d, peak RSS %.0f -> %.0f MiB)",
             spec.lease, spec.tcp, state, len(ids), time.monotonic() - started, os.getpid(),
             peak_before, _peak_rss_mib())
    return rows


def _peak_rss_mib() -> float:
    """This process's peak resident set so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
