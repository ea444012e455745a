"""The transport of one TCP client: an asyncio Protocol around the V2 parser and state machine.

It owns the socket and the stream stack (the in-band TLS upgrade, snappy/deflate), reads bytes
into the :class:`~nsqpy.protocol.commands.CommandParser`, feeds the parsed commands to the
:class:`~nsqpy.nsqd.v2.protocol_v2.ProtocolV2` state machine and writes what that put in the
client's outbox. The client's record (``client.py``) is what the rest of nsqd holds.

Commands run synchronously inside ``data_received`` (no Task per command or message), and
everything written in one event-loop turn (OKs to pipelined PUBs, message frames pushed by
channels) is joined into one ``transport.write`` (write coalescing).

The few moments where a connection must *not* run its next command at once go through one
"gate" (``_gate``), so the fast path pays a single ``is not None`` test for all of them:

* before the 4-byte magic;
* while a TLS handshake runs after IDENTIFY (``loop.start_tls``, 5 s deadline), and while the
  auth server is asked (AUTH, or the re-query of an expired answer before a PUB/SUB): parsed
  commands wait in ``_held`` and later bytes in ``_held_raw``, in order, and reading is paused;
  one Task per handshake or query, none per command;
* while publishes' answers wait for the group commit's flush (``--sync-every=1``): further
  publishes run and join the next batch, any other command waits until those answers are
  given, so every answer keeps its place;
* while a subscribed connection's writes are backed up: reading goes on (FIN/REQ must still
  flow) until the transport buffer passes ``READ_PAUSE_BYTES``, so a consumer that floods
  commands without reading the answers cannot grow our memory (other connections stop being
  read as soon as writes back up).
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import TYPE_CHECKING, Any

from ...protocol.commands import (
    BAD_PROTOCOL_PAYLOAD, MAGIC_V2, MPUB_HEAD, CommandParser, LineTooLong,
)
from ...protocol.errors import ClientError, FatalError, ProtocolError
from ...protocol.frames import OK_FRAME, encode_error
from .client import STATE_SUBSCRIBED, ClientV2
from .liveness import Liveness
from .protocol_v2 import Handover, NeedAuth, NeedTopic, ProtocolV2
from .stream_stack import StreamStack

if TYPE_CHECKING:
    from ..nsqd import NSQD

# a subscribed connection whose peer does not read stops being read past this much unsent data
READ_PAUSE_BYTES = 1 << 20
# a closed connection whose peer never reads what we still had to send is aborted after this
CLOSE_GRACE = 5.0

# gate states (``V2Connection._gate``); None = commands run as they arrive
_G_MAGIC = 1     # the 4-byte protocol magic has not arrived yet
_G_HOLD = 2      # waiting for a TLS handshake or an auth answer (or draining after IDENTIFY)
_G_THROTTLE = 3  # subscribed, writes backed up: check the buffer before reading more
_monotonic = time.monotonic
#: what may run while publishes' answers wait for the group commit: they answer in order anyway
_JOIN_THE_COMMIT = frozenset((b"PUB", b"MPUB", MPUB_HEAD, b"DPUB", b"NOP"))


class V2Connection(StreamStack, Liveness, asyncio.Protocol):
    """Server side of one TCP connection speaking protocol V2."""

    def __init__(self, nsqd: "NSQD") -> None:
        self.nsqd = nsqd
        self.client = client = ClientV2(nsqd.next_client_id(), nsqd.options)
        client.schedule_flush = self.schedule_flush
        client.close_connection = self.close_connection
        self.out = client.out  # the outbox the protocol and the channels append frames to
        self.protocol = ProtocolV2(nsqd, client)
        self.protocol.on_settled = self._owed_settled
        self.parser = CommandParser(nsqd.limits)
        self.parser.stop_after_identify = True  # the stream may change under the next bytes
        self.parser.stop_after_sub = True  # and what the next commands may be
        self.parser.fin_runs = True  # back-to-back FINs parsed and handled as one run
        # with AUTH, MPUB's line is checked before its body is read, as upstream's
        self.parser.mpub_head = nsqd.auth is not None
        self.parser.pre_body_check = self.protocol.pre_body
        self.transport: asyncio.Transport | None = None
        self.magic: bytearray | None = bytearray()  # None once the V2 magic arrived
        self._gate: int | None = _G_MAGIC
        self._held: list | None = None  # parsed commands waiting for the gate to open
        self._held_raw: bytearray | None = None  # bytes received while the gate was shut
        self._hold_reads = False  # the gate wants reading paused
        self._io_paused = False  # reading is actually paused on the transport
        self._reading_paused = False  # write backpressure wants reading paused
        self._paused_since = 0.0
        self._task: asyncio.Task | None = None  # the TLS handshake or auth query under way
        self.close_requested = False  # we closed it (vs. the peer leaving)
        self.end_error: str | None = None  # why we closed it, logged when it is gone
        self._raw_transport: asyncio.Transport | None = None  # the TCP transport during a handshake
        self._lost = False
        self._closed = False
        self._flush_pending = False
        self._owed_hold = False  # commands held until the group commit's answers are given
        self._owed_fatal: FatalError | None = None  # a publish's error, sent after those
        self._init_stream()
        self._last_read = _monotonic()
        self._heartbeat_handle: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        client = self.client
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if isinstance(peer, tuple):
            client.set_peer(peer[0], peer[1])
        else:
            client.remote_address = str(peer or "@")
        self.nsqd.logger.info("TCP: new client(%s)", client.remote_address)
        self.nsqd.add_client(client)
        self._arm_heartbeat()

    def data_received(self, data: bytes) -> None:
        self._last_read = _monotonic()
        if self._gate is not None:
            self._gated_data(data)
        elif self._decompress is not None:
            self._feed_compressed(data)
        else:
            self._process(self.parser.feed(data))

    def pause_writing(self) -> None:
        self.client.writable = False
        self._paused_since = _monotonic()
        if self.client.state < STATE_SUBSCRIBED:
            self._reading_paused = True  # a publisher that doesn't read its OKs waits
            self._update_reading()
        elif self._gate is None:
            self._gate = _G_THROTTLE  # a consumer keeps being read (FIN/REQ), within a bound

    def resume_writing(self) -> None:
        client = self.client
        client.writable = True
        if self._gate == _G_THROTTLE:
            self._gate = None
        if self._reading_paused:
            self._reading_paused = False
            self._update_reading()
        if client.channel is not None:
            client.channel.dispatch()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._lost:
            return
        self._lost = True
        self._log_end(exc)
        if self._heartbeat_handle is not None:
            self._heartbeat_handle.cancel()
        task, self._task = self._task, None
        if task is not None and self._raw_transport is None and task is not asyncio.current_task():
            task.cancel()  # an auth query nobody waits for (a handshake ends by itself)
        client = self.client
        self.nsqd.remove_client(client)
        channel = client.channel
        if channel is not None:
            client.channel = None
            channel.remove_client(client)
        if client.lease is not None:
            self.nsqd.leases.closed(client)  # its messages stay in flight under the lease
        self.transport = None
        self._raw_transport = None
        self._held = self._held_raw = None
        self.out.clear()

    # --- reading: the gate, then the parser, then the state machine ----------------------------

    def _gated_data(self, data: bytes) -> None:
        gate = self._gate
        if gate == _G_HOLD:
            if self._held_raw is None:
                self._held_raw = bytearray(data)
            else:
                self._held_raw += data
            return
        if gate == _G_MAGIC:
            magic = self.magic
            assert magic is not None
            need = 4 - len(magic)
            magic += data[:need]
            data = data[need:]
            if len(magic) < 4:
                return
            text = magic.decode("utf-8", "replace")
            addr = self.client.remote_address
            self.nsqd.logger.info("CLIENT(%s): desired protocol magic '%s'", addr, text)
            if magic != MAGIC_V2:
                self._send_now(encode_error(BAD_PROTOCOL_PAYLOAD))
                self.close_connection()
                self.nsqd.logger.error("client(%s) bad protocol magic '%s'", addr, text)
                return
            self.magic = None  # the V2 command loop runs from here
            self._gate = self._base_gate()
        elif gate == _G_THROTTLE:
            transport = self.transport
            if transport is not None and transport.get_write_buffer_size() > READ_PAUSE_BYTES:
                self._reading_paused = True
                self._update_reading()
        if data:
            if self._decompress is not None:
                self._feed_compressed(data)
            else:
                self._process(self.parser.feed(data))

    def _process(self, items: list) -> None:
        protocol = self.protocol
        moved = False  # the state changed: the lines after it are parsed for the new one
        for item in items:
            if self._closed:
                return
            if protocol.owed and (isinstance(item, FatalError) or item[0] not in _JOIN_THE_COMMIT):
                self._hold(items, item, True)
                self._owed_hold = True
                break
            if isinstance(item, FatalError):
                if isinstance(item, LineTooLong):
                    self.end_error = "failed to read command - bufio: buffer full"  # upstream's
                    self.close_connection()
                else:
                    self._fatal(item)
                return
            name, params, body = item
            try:
                # ProtocolV2.receive, inlined: one call less per command on the hot path
                entry = protocol.commands.get(name)
                if entry is None:
                    protocol.refuse(name)
                upgrade = entry[0](protocol, params, body)
                if entry[1] is not None:
                    protocol.enter(entry[1])
                    moved = True
            except ClientError as err:
                self.out.append(encode_error(err.payload))
                continue
            except FatalError as err:
                if protocol.owed:  # after the answers the group commit still owes
                    self._owed_fatal = err
                    self._hold(items, item, False)
                    self._owed_hold = True
                    break
                self._fatal(err)
                return
            except NeedAuth as need:
                self._hold(items, item, need.retry)
                self._task = self.nsqd.loop.create_task(self._auth_query(need.first))
                break
            except NeedTopic as need:
                self._hold(items, item, False)
                self._task = self.nsqd.loop.create_task(self._topic_ready(need))
                break
            if upgrade is not None:
                if type(upgrade) is Handover:
                    try:
                        self.nsqd.replicas.hand_over(self, upgrade.params)
                    except FatalError as err:
                        self._fatal(err)
                    return
                try:
                    self._upgrade(upgrade)
                except FatalError as err:
                    self._fatal(err)
                    return
        if moved and not self._closed and self._gate != _G_HOLD:
            self.parser.stop_after_sub = False  # SUB happens once
            self._process(self.parser.feed(b""))
            return
        if protocol.acked:
            protocol.acked = False
            channel = self.client.channel
            if channel is not None:
                channel.dispatch()
        if self.out:
            self._flush()

    # --- the gate: holding commands back while the connection waits ----------------------------

    def _owed_settled(self, fatal: FatalError | None) -> None:
        """An answer the group commit owed was given (or, ``fatal``, its publish refused)."""
        if self._closed:
            return
        if fatal is not None:
            self._fatal(fatal)
            return
        if self.protocol.owed or not self._owed_hold:
            return
        self._owed_hold = False
        fatal, self._owed_fatal = self._owed_fatal, None
        if fatal is not None:
            self._fatal(fatal)
        else:
            self._release()

    async def _topic_ready(self, need: NeedTopic) -> None:
        """The owed answer of a publish that created its topic (:class:`NeedTopic`), then the
        commands held after it."""
        await need.topic.wait_ready()
        acked = need.acked
        if need.settled is not None:  # the group commit's flush, then the replication wait
            err, acked = await need.settled
            if err is not None:
                self._task = None
                if not self._closed:
                    self._fatal(FatalError(need.failed[0], f"{need.failed[1]} failed {err}"))
                return
        copied = True if acked is None else await acked
        self._task = None
        if self._closed:
            return
        if copied is False:  # strict sync replication: no second copy in time
            self.client.out.append(need.no_copy)
            self.client.close_connection()
            return
        self.client.out.append(OK_FRAME)
        self._flush()
        self._release()

    def _base_gate(self) -> int | None:
        return _G_THROTTLE if not self.client.writable and self.client.state >= STATE_SUBSCRIBED else None

    def _update_reading(self) -> None:
        """Pause or resume the transport for write backpressure and for the gate."""
        want = self._reading_paused or self._hold_reads
        transport = self.transport
        if transport is None or want == self._io_paused or self._closed:
            return
        self._io_paused = want
        if want:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def _hold(self, items: list, item: Any, retry: bool) -> None:
        """Keep the commands after ``item`` (and ``item`` itself if ``retry``) for later."""
        index = 0
        for index, other in enumerate(items):
            if other is item:
                break
        rest = items[index:] if retry else items[index + 1:]
        self._held = rest or None
        self._hold_reading()

    def _hold_reading(self, pause: bool = True) -> None:
        """Shut the gate: what arrives waits (and with ``pause``, reading stops) until _release."""
        self._gate = _G_HOLD
        if pause:
            self._hold_reads = True
            self._update_reading()

    def _holding(self) -> bool:
        return self._gate == _G_HOLD

    def _release(self) -> None:
        """What the gate held back runs now, in arrival order; then reading goes on."""
        if self._closed:
            return
        self._gate = None
        self._hold_reads = False
        self._last_read = _monotonic()  # nothing was read while held: no read timeout for that
        held, self._held = self._held, None
        if held:
            self._process(held)
            if self._gate is not None or self._closed:
                return
        if self.parser.buffered and not self.parser.dead:
            self._process(self.parser.feed(b""))
            if self._gate is not None or self._closed:
                return
        raw, self._held_raw = self._held_raw, None
        inflater = self._inflater
        if raw or (inflater is not None and inflater.pending):
            self.data_received(bytes(raw) if raw else b"")
            if self._gate is not None or self._closed:
                return
        self._gate = self._base_gate()
        self._update_reading()
        if self.out:
            self._flush()

    # --- writing -------------------------------------------------------------------------------

    def schedule_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self.nsqd.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        out = self.out
        if not out or self.transport is None:
            out.clear()
            return
        data = b"".join(out)
        out.clear()
        if self._compress is not None:
            data = self._compress(data)
        self.transport.write(data)

    def _send_now(self, frame: bytes) -> None:
        self.out.append(frame)
        self._flush()

    def _fatal(self, err: ProtocolError) -> None:
        cause = f" - {err.cause}" if err.cause else ""
        self.nsqd.logger.error("[%s] - %s%s", self.client.remote_address, err, cause)
        self.end_error = str(err)  # logged again as the connection ends, as upstream does
        self._send_now(encode_error(err.payload))
        self.close_connection()

    def close_connection(self) -> None:
        """Close after writing what is buffered (nsqd closes the socket on fatal errors)."""
        if self._closed:
            return
        self._closed = True
        self.close_requested = True
        if self.transport is not None:
            self._flush()
            self.transport.close()
            if self.transport is not None and self.transport.get_write_buffer_size():
                # close() waits until everything is sent: a peer that never reads would pin
                # the connection (and its buffer) forever
                self.nsqd.loop.call_later(CLOSE_GRACE, self._abort_unsent)
        elif self._raw_transport is not None:  # mid-handshake: nothing can be said in clear text
            self._raw_transport.abort()

    def _abort_unsent(self) -> None:
        if not self._lost and self.transport is not None:
            self.transport.abort()
