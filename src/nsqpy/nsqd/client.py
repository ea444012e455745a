"""One client connection speaking TCP protocol V2: an asyncio Protocol around the sans-I/O parser.

Commands are handled synchronously inside ``data_received`` (no Task per command or message).
Everything written in one event-loop turn — OK responses to pipelined PUBs, message frames pushed
by channels — is joined into a single ``transport.write`` (write coalescing).

The few moments where a connection must *not* run its next command at once go through one
"gate" (``_gate``), so the fast path pays a single ``is not None`` test for all of them:

* before the 4-byte magic;
* while a TLS handshake runs after IDENTIFY (``loop.start_tls``, 5 s deadline), and while an
  AUTH answer, or the re-query of an expired one before a PUB/SUB, is awaited from the auth
  server: the commands already parsed wait in ``_held`` and later bytes in ``_held_raw``, in
  order, and reading is paused; one Task per handshake or query, none per command;
* while a subscribed connection's writes are backed up: reading goes on (FIN/REQ must still
  flow) until the transport buffer passes ``READ_PAUSE_BYTES``, so a consumer that floods
  commands without reading the answers cannot grow our memory (non-subscribed connections stop
  being read as soon as writes back up).

Which commands exist in which mode is a per-connection handler table (class-level dicts):
with ``--auth-http-address`` PUB/MPUB/DPUB check authorizations first; with TLS required and
not negotiated everything but IDENTIFY fails (``E_INVALID cannot X in current state (TLS
required)``), body commands before their body is read.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import TYPE_CHECKING, Any, Callable, NoReturn

import orjson

from .. import NSQ_COMPAT_VERSION
from ..protocol.commands import (
    BAD_PROTOCOL_PAYLOAD, MAGIC_V2, MS, CommandParser, Limits, LineTooLong, arg_text, as_int64,
    byte_to_base10, check_topic, go_quote, ms_to_duration_ns, pre_body_checks,
)
from ..protocol.compression import CompressionError, DeflateCodec, SnappyCodec
from ..protocol.errors import (
    E_AUTH_DISABLED, E_AUTH_ERROR, E_AUTH_FAILED, E_AUTH_FIRST, E_BAD_BODY, E_BAD_CHANNEL,
    E_DPUB_FAILED, E_IDENTIFY_FAILED, E_INVALID, E_MPUB_FAILED, E_PUB_FAILED, E_SUB_FAILED,
    E_UNAUTHORIZED,
    ClientError, FatalError, ProtocolError,
)
from ..protocol.frames import CLOSE_WAIT_FRAME, HEARTBEAT_FRAME, OK_FRAME, encode_error, encode_response
from ..protocol.names import is_valid_name
from .stats import go_json
from .tls import TLS_REQUIRED_FALSE, TLSInfo

if TYPE_CHECKING:
    from .auth import AuthState
    from .channel import Channel
    from .nsqd import NSQD

STATE_INIT = 0
STATE_DISCONNECTED = 1
STATE_CONNECTED = 2
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

DEFAULT_OUTPUT_BUFFER_SIZE = 16 * 1024
TLS_HANDSHAKE_TIMEOUT = 5.0  # upstream's deadline for the in-band upgrade
# a subscribed connection whose peer does not read stops being read past this much unsent data
READ_PAUSE_BYTES = 1 << 20
# deflate output handled per event-loop turn: a small "deflate bomb" is inflated step by step
INFLATE_STEP = 256 * 1024
# a closed connection whose peer never reads what we still had to send is aborted after this
CLOSE_GRACE = 5.0

# gate states (``ClientV2._gate``); None = commands run as they arrive
_G_MAGIC = 1     # the 4-byte protocol magic has not arrived yet
_G_HOLD = 2      # waiting for a TLS handshake or an auth answer (or draining after IDENTIFY)
_G_THROTTLE = 3  # subscribed, writes backed up: check the buffer before reading more
_monotonic = time.monotonic
_time_ns = time.time_ns

_INT_FIELDS = ("heartbeat_interval", "output_buffer_size", "output_buffer_timeout",
               "deflate_level", "sample_rate", "msg_timeout")
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1  # Go's int on 64-bit platforms
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_BOOL_FIELDS = ("feature_negotiation", "tls_v1", "deflate", "snappy")
_STR_FIELDS = ("client_id", "hostname", "user_agent", "short_id", "long_id",
               "topology_region", "topology_zone")


def _decode_id(raw: bytes) -> bytes:
    if len(raw) != 16:
        raise FatalError(E_INVALID, "invalid message ID")
    return raw


class _Suspend(Exception):
    """A handler started I/O the connection must wait for; ``retry``: run this command again."""

    def __init__(self, retry: bool) -> None:
        super().__init__()
        self.retry = retry


def _tls_required_pre_body(name: bytes, params: list[bytes], limits: Limits) -> int:
    """Before TLS is negotiated on a TLS-required nsqd only IDENTIFY may send a body."""
    if name != b"IDENTIFY":
        raise FatalError(E_INVALID, f"cannot {name.decode('utf-8', 'replace')} in current state "
                                    "(TLS required)")
    return pre_body_checks(name, params, limits)


class ClientV2(asyncio.Protocol):
    """Server side of one V2 connection."""

    def __init__(self, nsqd: "NSQD") -> None:
        self.nsqd = nsqd
        opts = nsqd.options
        self.id = nsqd.next_client_id()
        self.transport: asyncio.Transport | None = None
        self.parser = CommandParser(nsqd.limits)
        self.parser.stop_after_identify = True
        self._magic: bytearray | None = bytearray()  # None once the V2 magic arrived
        self._gate: int | None = _G_MAGIC
        self._held: list | None = None  # parsed commands waiting for the gate to open
        self._held_raw: bytearray | None = None  # bytes received while the gate was shut
        self._hold_reads = False  # the gate wants reading paused
        self._io_paused = False  # reading is actually paused on the transport
        self._task: asyncio.Task | None = None  # the TLS handshake or auth query under way
        self._close_requested = False  # close_connection() was called (vs. the peer leaving)
        self._end_error: str | None = None  # why we closed it, logged when it is gone
        self._raw_transport: asyncio.Transport | None = None  # the TCP transport during a handshake
        self._lost = False
        self.state = STATE_INIT
        self.remote_address = ""
        self.remote_ip = ""
        self.tls = False
        self.tls_info: TLSInfo | None = None
        self.auth_secret = b""
        self.auth_state: AuthState | None = None
        self._auth_recheck = False  # the command being retried follows a fresh re-query
        self.client_id = ""
        self.hostname = ""
        self.user_agent = ""
        self.connect_ts = int(time.time())
        self.heartbeat_interval = 30.0  # ClientTimeout / 2
        self.msg_timeout: float = opts.msg_timeout
        self.output_buffer_size = DEFAULT_OUTPUT_BUFFER_SIZE
        self.output_buffer_timeout: float = opts.output_buffer_timeout
        self.sample_rate = 0
        self.snappy = False
        self.deflate = False
        self.channel: Channel | None = None
        self.ready_count = 0
        self.in_flight: dict[bytes, tuple] = {}
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.pub_counts: dict[str, int] = {}
        self.out: list[bytes] = []
        self.writable = True
        self._paused_since = 0.0
        self._reading_paused = False
        self._flush_pending = False
        self._compress: Callable[[bytes], bytes] | None = None
        self._decompress: Callable[[bytes], bytes] | None = None
        self._inflater: DeflateCodec | None = None  # set with deflate: its output is bounded
        self._last_read = _monotonic()
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._closed = False
        self._acked = False  # a FIN/REQ freed room under RDY during this data_received
        self._handlers: dict[bytes, Callable[..., None]] = (
            _AUTH_HANDLERS if nsqd.auth is not None else _HANDLERS)
        if opts.tls_required != TLS_REQUIRED_FALSE:
            self._handlers = _TLS_REQUIRED_HANDLERS
            self.parser.pre_body_check = _tls_required_pre_body
        elif nsqd.auth is None:
            self.parser.pre_body_check = self._pre_body

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if isinstance(peer, tuple):
            host, port = peer[0], peer[1]
            self.remote_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self.client_id = self.hostname = self.remote_ip = host
        else:
            self.remote_address = str(peer or "@")
        self.nsqd.logger.info("TCP: new client(%s)", self.remote_address)
        self.nsqd.add_client(self)
        self._arm_heartbeat()

    def data_received(self, data: bytes) -> None:
        self._last_read = _monotonic()
        if self._gate is not None:
            self._gated_data(data)
            return
        if self._decompress is not None:
            self._feed_compressed(data)
            return
        self._process(self.parser.feed(data))

    def _feed_compressed(self, data: bytes) -> None:
        try:
            data = self._decompress(data)  # type: ignore[misc]
        except CompressionError as err:
            self._end_error = f"failed to read command - {err}"
            self.close_connection()
            return
        self._process(self.parser.feed(data))
        inflater = self._inflater
        if inflater is not None and inflater.pending and not self._closed and self._gate != _G_HOLD:
            # more output waits inside the inflater: take it on the next turn, reading paused
            self._gate = _G_HOLD
            self._hold_reads = True
            self._update_reading()
            self.nsqd.loop.call_soon(self._release)

    def _gated_data(self, data: bytes) -> None:
        gate = self._gate
        if gate == _G_HOLD:
            if self._held_raw is None:
                self._held_raw = bytearray(data)
            else:
                self._held_raw += data
            return
        if gate == _G_MAGIC:
            need = 4 - len(self._magic)
            self._magic += data[:need]
            data = data[need:]
            if len(self._magic) < 4:
                return
            magic = self._magic.decode("utf-8", "replace")
            self.nsqd.logger.info("CLIENT(%s): desired protocol magic '%s'", self.remote_address, magic)
            if self._magic != MAGIC_V2:
                self._send_now(encode_error(BAD_PROTOCOL_PAYLOAD))
                self.close_connection()
                self.nsqd.logger.error("client(%s) bad protocol magic '%s'", self.remote_address, magic)
                return
            self._magic = None  # the V2 command loop runs from here
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
        handlers = self._handlers
        for item in items:
            if self._closed:
                return
            if isinstance(item, FatalError):
                if isinstance(item, LineTooLong):
                    self._end_error = "failed to read command - bufio: buffer full"  # upstream's
                    self.close_connection()
                else:
                    self._fatal(item)
                return
            name, params, body = item
            handler = handlers.get(name)
            try:
                if handler is None:
                    self._unknown_command(name)
                handler(self, params, body)
            except ClientError as err:
                self.out.append(encode_error(err.payload))
            except FatalError as err:
                self._fatal(err)
                return
            except _Suspend as suspend:
                self._hold(items, item, suspend.retry)
                break
        if self._acked:
            self._acked = False
            channel = self.channel
            if channel is not None:
                channel.dispatch()
        if self.out:
            self._flush()

    def pause_writing(self) -> None:
        self.writable = False
        self._paused_since = _monotonic()
        if self.state < STATE_SUBSCRIBED:
            self._reading_paused = True  # a publisher that doesn't read its OKs waits
            self._update_reading()
        elif self._gate is None:
            self._gate = _G_THROTTLE  # a consumer keeps being read (FIN/REQ), within a bound

    def resume_writing(self) -> None:
        self.writable = True
        if self._gate == _G_THROTTLE:
            self._gate = None
        if self._reading_paused:
            self._reading_paused = False
            self._update_reading()
        if self.channel is not None:
            self.channel.dispatch()

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
        self.nsqd.remove_client(self)
        channel = self.channel
        if channel is not None:
            self.channel = None
            channel.remove_client(self)
        self.transport = None
        self._raw_transport = None
        self._held = self._held_raw = None
        self.out.clear()

    def _log_end(self, exc: Exception | None) -> None:
        """Upstream's log lines for a connection's end: what the read that ended it was for
        (the protocol magic, a command line, a command's body) and how it failed."""
        log = self.nsqd.logger
        addr = self.remote_address
        if self._close_requested:  # we closed it, for the reason in _end_error if any
            if self._magic is None:
                log.info("PROTOCOL(V2): [%s] exiting ioloop", addr)
                if self._end_error is not None:
                    log.error("client(%s) - %s", addr, self._end_error)
            return
        if isinstance(exc, ConnectionResetError):
            cause = f"read tcp {self._local_address()}->{addr}: read: connection reset by peer"
        elif exc is not None:
            cause = str(exc) or type(exc).__name__
        else:
            cause = "EOF"
        if self._magic is not None:
            if cause == "EOF" and self._magic:
                cause = "unexpected EOF"
            log.error("failed to read protocol version - %s", cause)
            return
        if self.deflate and exc is None:
            cause = "unexpected EOF"  # a raw DEFLATE stream never ends cleanly (no final block)
        error = None
        cut = None if self.parser.dead else self.parser.eof_error()
        if cut is not None:
            fatal, eof_cause = cut
            if cause == "EOF":
                cause = eof_cause
            log.error("[%s] - %s - %s", addr, fatal, cause)
            error = str(fatal)
        elif cause != "EOF":
            error = f"failed to read command - {cause}"
        log.info("PROTOCOL(V2): [%s] exiting ioloop", addr)
        if error is not None:
            log.error("client(%s) - %s", addr, error)

    def _local_address(self) -> str:
        transport = self.transport or self._raw_transport
        sockname = transport.get_extra_info("sockname") if transport is not None else None
        if isinstance(sockname, tuple):
            host, port = sockname[0], sockname[1]
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return str(sockname or "")

    # --- the gate: holding commands back while the connection waits ----------------------------

    def _base_gate(self) -> int | None:
        return _G_THROTTLE if not self.writable and self.state >= STATE_SUBSCRIBED else None

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
        self._gate = _G_HOLD
        self._hold_reads = True
        self._update_reading()

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

    def _abort_unsent(self) -> None:
        if not self._lost and self.transport is not None:
            self.transport.abort()

    def _unknown_command(self, name: bytes) -> NoReturn:
        text = name.decode("utf-8", "replace")
        if self._handlers is _TLS_REQUIRED_HANDLERS:
            raise FatalError(E_INVALID, f"cannot {text} in current state (TLS required)")
        raise FatalError(E_INVALID, f"invalid command {text}")

    # --- output --------------------------------------------------------------------------------

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
        self.nsqd.logger.error("[%s] - %s", self.remote_address, err)
        self._end_error = str(err)  # logged again as the connection ends, as upstream does
        self._send_now(encode_error(err.payload))
        self.close_connection()

    def close_connection(self) -> None:
        """Close after writing what is buffered (nsqd closes the socket on fatal errors)."""
        if self._closed:
            return
        self._closed = True
        self._close_requested = True
        if self.transport is not None:
            self._flush()
            self.transport.close()
            if self.transport is not None and self.transport.get_write_buffer_size():
                # close() waits until everything is sent: a peer that never reads would pin
                # the connection (and its buffer) forever
                self.nsqd.loop.call_later(CLOSE_GRACE, self._abort_unsent)
        elif self._raw_transport is not None:  # mid-handshake: nothing can be said in clear text
            self._raw_transport.abort()

    # --- heartbeats and timeouts ---------------------------------------------------------------

    def _arm_heartbeat(self) -> None:
        if self._heartbeat_handle is not None:
            self._heartbeat_handle.cancel()
            self._heartbeat_handle = None
        if self.heartbeat_interval > 0 and not self._closed:
            self._heartbeat_handle = self.nsqd.loop.call_later(self.heartbeat_interval, self._on_heartbeat)

    def _on_heartbeat(self) -> None:
        self._heartbeat_handle = None
        if self._closed:
            return
        if self.transport is None:  # TLS handshake under way (it has its own deadline)
            self._arm_heartbeat()
            return
        now = _monotonic()
        hb = self.heartbeat_interval
        if self._gate == _G_HOLD:
            self._last_read = now  # waiting on the auth server, not on the client
        if not self.writable and now - self._paused_since > hb:
            self.nsqd.logger.error("client(%s) - write timeout: slow consumer", self.remote_address)
            self._close_requested = True
            self.transport.abort()
            return
        if now - self._last_read > 2 * hb:
            self._end_error = (f"failed to read command - read tcp {self._local_address()}->"
                               f"{self.remote_address}: i/o timeout")
            if not self.writable:  # nothing more would reach it: don't wait for a drain
                self._closed = self._close_requested = True
                self.transport.abort()
            else:
                self.close_connection()
            return
        self.out.append(HEARTBEAT_FRAME)
        self._flush()
        self._arm_heartbeat()

    # --- commands ------------------------------------------------------------------------------

    def _nop(self, params: list[bytes], body: None) -> None:
        return None

    def _identify(self, params: list[bytes], body: bytes) -> None:
        if self.state != STATE_INIT:
            raise FatalError(E_INVALID, "cannot IDENTIFY in current state")
        try:
            data = orjson.loads(body)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            for key in _INT_FIELDS:
                v = data.get(key, 0)
                if v is None:
                    data[key] = 0
                elif isinstance(v, bool) or not isinstance(v, int) or not _INT_MIN <= v <= _INT_MAX:
                    raise ValueError(key)  # Go's json: not a number that fits an int
            if not _INT32_MIN <= data.get("sample_rate", 0) <= _INT32_MAX:
                raise ValueError("sample_rate")  # an int32 upstream
            for key in _BOOL_FIELDS:
                v = data.get(key, False)
                if v is None:
                    data[key] = False
                elif not isinstance(v, bool):
                    raise ValueError(key)
            for key in _STR_FIELDS:
                v = data.get(key, "")
                if v is None:
                    data[key] = ""
                elif not isinstance(v, str):
                    raise ValueError(key)
        except (orjson.JSONDecodeError, ValueError):
            raise FatalError(E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
        opts = self.nsqd.options
        self.client_id = data.get("client_id") or data.get("short_id") or ""
        self.hostname = data.get("hostname") or data.get("long_id") or ""
        self.user_agent = data.get("user_agent") or ""

        hb = data.get("heartbeat_interval", 0)
        if hb == -1:
            heartbeat = 0.0
        elif hb == 0:
            heartbeat = self.heartbeat_interval
        elif 1000 <= hb <= opts.max_heartbeat_interval * 1000:
            heartbeat = hb / 1000.0
        else:
            raise FatalError(E_BAD_BODY, f"IDENTIFY heartbeat interval ({hb}) is invalid")
        obs = data.get("output_buffer_size", 0)
        if obs == -1:
            out_size = 1
        elif obs == 0:
            out_size = self.output_buffer_size
        elif 64 <= obs <= opts.max_output_buffer_size:
            out_size = obs
        else:
            raise FatalError(E_BAD_BODY, f"IDENTIFY output buffer size ({obs}) is invalid")
        obt = data.get("output_buffer_timeout", 0)
        if obt == -1:
            out_timeout = 0.0
        elif obt == 0:
            out_timeout = self.output_buffer_timeout
        elif opts.min_output_buffer_timeout * 1000 <= obt <= opts.max_output_buffer_timeout * 1000:
            out_timeout = obt / 1000.0
        else:
            raise FatalError(E_BAD_BODY, f"IDENTIFY output buffer timeout ({obt}) is invalid")
        rate = data.get("sample_rate", 0)
        if not 0 <= rate <= 99:
            raise FatalError(E_BAD_BODY, f"IDENTIFY sample rate ({rate}) is invalid")
        mt = data.get("msg_timeout", 0)
        if mt == 0:
            msg_timeout = self.msg_timeout
        elif 1000 <= mt <= opts.max_msg_timeout * 1000:
            msg_timeout = mt / 1000.0
        else:
            raise FatalError(E_BAD_BODY, f"IDENTIFY msg timeout ({mt}) is invalid")
        self.heartbeat_interval = heartbeat
        self.output_buffer_size = out_size
        self.output_buffer_timeout = out_timeout
        self.sample_rate = rate
        self.msg_timeout = msg_timeout
        self._arm_heartbeat()

        if not data.get("feature_negotiation"):
            self.out.append(OK_FRAME)
            self._after_identify()
            return
        # a stream is upgraded once: a repeated IDENTIFY cannot stack a second TLS or codec layer
        compressed = self._compress is not None
        tls = bool(self.nsqd.tls_context is not None and data.get("tls_v1") and not self.tls)
        deflate = bool(opts.deflate and data.get("deflate") and not compressed)
        level = 6
        if deflate and data.get("deflate_level", 0) > 0:
            level = data["deflate_level"]
        level = min(level, opts.max_deflate_level)
        snappy = bool(opts.snappy and data.get("snappy") and not compressed)
        if deflate and snappy:
            raise FatalError(E_IDENTIFY_FAILED, "cannot enable both deflate and snappy compression")
        resp = {
            "max_rdy_count": opts.max_rdy_count,
            "version": NSQ_COMPAT_VERSION,
            "max_msg_timeout": int(opts.max_msg_timeout * 1000),
            "msg_timeout": int(self.msg_timeout * 1000),
            "tls_v1": tls,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": self.sample_rate,
            "auth_required": self.nsqd.auth is not None,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": int(self.output_buffer_timeout * 1000),
        }
        self._send_now(encode_response(orjson.dumps(resp)))
        codec: SnappyCodec | DeflateCodec | None = None
        if snappy:
            codec = SnappyCodec()
        elif deflate:
            codec = DeflateCodec(level, max_output=INFLATE_STEP)
        if tls:
            if self.parser.take_buffer():
                # the handshake must start after our answer; bytes sent before it are lost
                # (upstream's buffered reader drops them too, and then times out)
                raise FatalError(E_IDENTIFY_FAILED,
                                 "IDENTIFY failed data received before the TLS handshake")
            self._start_tls(codec)
            return
        if codec is not None:
            leftover = self.parser.take_buffer()  # already compressed: it goes through the codec
            self._enable_codec(codec)
            if leftover:
                self._held_raw = bytearray(leftover)
        self._after_identify()

    def _after_identify(self) -> None:
        """The parser stopped after IDENTIFY: run what followed it on the next loop turn."""
        if self.parser.buffered or self._held_raw:
            self._gate = _G_HOLD  # bytes arriving meanwhile queue up behind those
            self.nsqd.loop.call_soon(self._release)

    def _enable_codec(self, codec: "SnappyCodec | DeflateCodec") -> None:
        if isinstance(codec, SnappyCodec):
            self.snappy = True
        else:
            self.deflate = True
            self._inflater = codec
        self._compress = codec.compress
        self._decompress = codec.decompress
        self.out.append(OK_FRAME)  # the first compressed frame

    def _pre_body(self, name: bytes, params: list[bytes], limits: Limits) -> int:
        """Upstream's MPUB creates its topic before reading the body (a bad body leaves it)."""
        limit = pre_body_checks(name, params, limits)
        if name == b"MPUB":
            try:
                self.nsqd.get_topic(params[1].decode("ascii"))
            except OSError:
                pass  # the MPUB handler reports it once the body is read
        return limit

    # --- TLS ------------------------------------------------------------------------------------

    def _start_tls(self, codec: "SnappyCodec | DeflateCodec | None") -> None:
        """Upgrade after the IDENTIFY answer went out; nothing else runs until it is done."""
        self._gate = _G_HOLD
        self._hold_reads = True
        self._update_reading()  # no byte of the ClientHello may reach the V2 parser
        self._raw_transport = self.transport
        self.transport = None  # and no clear-text frame (a heartbeat) may interleave
        self._task = self.nsqd.loop.create_task(self._tls_handshake(codec))

    async def _tls_handshake(self, codec: "SnappyCodec | DeflateCodec | None") -> None:
        raw = self._raw_transport
        nsqd = self.nsqd
        if raw is None or self._closed:
            self._task = None
            return
        try:
            transport = await nsqd.loop.start_tls(
                raw, self, nsqd.tls_context, server_side=True,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - any handshake failure ends the connection
            self._task = None
            if not self._close_requested:
                nsqd.logger.error("client(%s) - %s IDENTIFY failed %s", self.remote_address,
                                  E_IDENTIFY_FAILED, err or type(err).__name__)
            self._close_requested = True
            raw.abort()
            self.connection_lost(err)  # the transport's protocol was no longer this one
            return
        self._task = None
        self._raw_transport = None
        if transport is None or self._closed:  # closed while the handshake finished
            if transport is not None:
                transport.abort()
            self.connection_lost(None)
            return
        self.transport = transport  # type: ignore[assignment]
        self._io_paused = False
        self.tls = True
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.tls_info = TLSInfo(ssl_object, nsqd.tls_context)
        self._handlers = _AUTH_HANDLERS if nsqd.auth is not None else _HANDLERS
        self.parser.pre_body_check = pre_body_checks if nsqd.auth is not None else self._pre_body
        self._send_now(OK_FRAME)  # the first frame over TLS
        if codec is not None:
            self._enable_codec(codec)
            self._flush()
        self._release()

    # --- AUTH -----------------------------------------------------------------------------------

    def _auth(self, params: list[bytes], body: bytes) -> None:
        if self.state != STATE_INIT:
            raise FatalError(E_INVALID, "cannot AUTH in current state")
        if self.auth_state is not None and self.auth_state.authorizations:
            raise FatalError(E_INVALID, "AUTH already set")
        if self.nsqd.auth is None:
            raise FatalError(E_AUTH_DISABLED, "AUTH disabled")
        self.auth_secret = body
        self._query_auth(first=True)
        raise _Suspend(retry=False)

    def _query_auth(self, first: bool) -> None:
        self._task = self.nsqd.loop.create_task(self._auth_query(first))

    async def _auth_query(self, first: bool) -> None:
        auth = self.nsqd.auth
        assert auth is not None
        common_name = self.tls_info.common_name if self.tls_info is not None else ""
        try:
            state = await auth.query(self.remote_ip, self.tls, self.auth_secret, common_name)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - details go to the log, never to the client
            self._task = None
            if not self._closed:
                # we don't leak the auth server's errors to untrusted clients (upstream)
                self.nsqd.logger.warning("PROTOCOL(V2): [%s] AUTH failed %s", self.remote_address, err)
                self._fatal(FatalError(E_AUTH_FAILED, "AUTH failed"))
            return
        self._task = None
        if self._closed:
            return
        self.auth_state = state
        if first:
            if not state.authorizations:
                self._fatal(FatalError(E_UNAUTHORIZED, "AUTH no authorizations found"))
                return
            try:
                answer = go_json({"identity": state.identity, "identity_url": state.identity_url,
                                  "permission_count": len(state.authorizations)})
            except (TypeError, ValueError) as err:  # upstream's json.Marshal failure path
                self._fatal(FatalError(E_AUTH_ERROR, f"AUTH error {err}"))
                return
            self._send_now(encode_response(answer))
        else:
            self._auth_recheck = True
        self._release()

    def _check_auth(self, cmd: str, topic: str, channel: str) -> None:
        """Upstream's CheckAuth; an expired answer is re-queried first (the command waits)."""
        state = self.auth_state
        if self._auth_recheck:
            self._auth_recheck = False
        elif state is None or not state.authorizations:
            raise FatalError(E_AUTH_FIRST, f"AUTH required before {cmd}")
        elif state.expired():
            self._query_auth(first=False)
            raise _Suspend(retry=True)
        if state is None or not state.allows(topic, channel):
            raise FatalError(E_UNAUTHORIZED,
                             f"AUTH failed for {cmd} on {go_quote(topic)} {go_quote(channel)}")

    def _tls_required(self, params: list[bytes], body: Any) -> None:
        raise FatalError(E_INVALID, f"cannot {params[0].decode('utf-8', 'replace')} in current "
                                    "state (TLS required)")

    def _sub(self, params: list[bytes], body: None) -> None:
        if self.state != STATE_INIT:
            raise FatalError(E_INVALID, "cannot SUB in current state")
        if self.heartbeat_interval <= 0:
            raise FatalError(E_INVALID, "cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise FatalError(E_INVALID, "SUB insufficient number of parameters")
        topic_name = check_topic("SUB", params)
        raw_channel = params[2]
        try:
            channel_name = raw_channel.decode("ascii")
        except UnicodeDecodeError:
            channel_name = ""
        if not is_valid_name(channel_name):
            raise FatalError(E_BAD_CHANNEL, f"SUB channel name {go_quote(raw_channel)} is not valid")
        nsqd = self.nsqd
        if nsqd.auth is not None:
            self._check_auth("SUB", topic_name, channel_name)
        if nsqd.exiting:
            raise FatalError(E_SUB_FAILED, "SUB failed exiting")
        topic = nsqd.get_topic(topic_name)
        channel = topic.get_channel(channel_name)
        limit = nsqd.options.max_channel_consumers
        if limit and len(channel.clients) >= limit:
            raise FatalError(E_SUB_FAILED,
                             f"SUB failed consumers for {topic_name}:{channel_name} exceeds limit of {limit}")
        channel.add_client(self)
        self.channel = channel
        self.state = STATE_SUBSCRIBED
        self.out.append(OK_FRAME)

    def _rdy(self, params: list[bytes], body: None) -> None:
        if self.state == STATE_CLOSING:
            return
        if self.state != STATE_SUBSCRIBED:
            raise FatalError(E_INVALID, "cannot RDY in current state")
        count = 1
        if len(params) > 1:
            try:
                count = as_int64(byte_to_base10(params[1]))
            except ValueError:
                raise FatalError(E_INVALID, f"RDY could not parse count {arg_text(params[1])}") from None
        max_rdy = self.nsqd.options.max_rdy_count
        if count < 0 or count > max_rdy:
            raise FatalError(E_INVALID, f"RDY count {count} out of range 0-{max_rdy}")
        self.ready_count = count
        self._acked = True

    def _require_subscribed(self, cmd: str) -> "Channel":
        if self.state not in (STATE_SUBSCRIBED, STATE_CLOSING) or self.channel is None:
            raise FatalError(E_INVALID, f"cannot {cmd} in current state")
        return self.channel

    def _fin(self, params: list[bytes], body: None) -> None:
        channel = self.channel
        if channel is None or self.state < STATE_SUBSCRIBED:
            raise FatalError(E_INVALID, "cannot FIN in current state")
        if len(params) < 2:
            raise FatalError(E_INVALID, "FIN insufficient number of params")
        mid = params[1]
        if len(mid) != 16:
            raise FatalError(E_INVALID, "invalid message ID")
        channel.finish(self, mid)
        self._acked = True

    def _req(self, params: list[bytes], body: None) -> None:
        channel = self._require_subscribed("REQ")
        if len(params) < 3:
            raise FatalError(E_INVALID, "REQ insufficient number of params")
        mid = _decode_id(params[1])
        try:
            timeout_ns = ms_to_duration_ns(byte_to_base10(params[2]))
        except ValueError:
            raise FatalError(E_INVALID, f"REQ could not parse timeout {arg_text(params[2])}") from None
        max_ns = self.nsqd.limits.max_req_timeout_ms * MS
        clamped = 0 if timeout_ns < 0 else min(timeout_ns, max_ns)
        if clamped != timeout_ns:
            self.nsqd.logger.info("PROTOCOL(V2): [%s] REQ timeout %d out of range 0-%d. Setting to %d",
                                  self.remote_address, timeout_ns, max_ns, clamped)
        channel.requeue_in_flight(self, mid, clamped / 1e9)
        self._acked = True

    def _touch(self, params: list[bytes], body: None) -> None:
        channel = self._require_subscribed("TOUCH")
        if len(params) < 2:
            raise FatalError(E_INVALID, "TOUCH insufficient number of params")
        channel.touch(self, _decode_id(params[1]))

    def _cls(self, params: list[bytes], body: None) -> None:
        if self.state != STATE_SUBSCRIBED:
            raise FatalError(E_INVALID, "cannot CLS in current state")
        self.ready_count = 0
        self.state = STATE_CLOSING
        self.out.append(CLOSE_WAIT_FRAME)

    def _published(self, topic: str, count: int) -> None:
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count

    def _pub(self, params: list[bytes], body: bytes) -> None:
        topic_name = params[1].decode("ascii")  # validated by the parser
        try:
            topic = self.nsqd.get_topic(topic_name)
            mid = self.nsqd.id_factory.next_id()
            topic.put_many([(mid, body, _time_ns(), 0)], len(body))
        except OSError as err:
            raise FatalError(E_PUB_FAILED, f"PUB failed {err}") from None
        self._published(topic_name, 1)
        self.out.append(OK_FRAME)

    def _mpub(self, params: list[bytes], bodies: list[bytes]) -> None:
        topic_name = params[1].decode("ascii")
        try:
            topic = self.nsqd.get_topic(topic_name)
            ids = self.nsqd.id_factory.next_ids(len(bodies))
            ts = _time_ns()
            topic.put_many([(mid, b, ts, 0) for mid, b in zip(ids, bodies)],
                           sum(map(len, bodies)))
        except OSError as err:
            raise FatalError(E_MPUB_FAILED, f"MPUB failed {err}") from None
        self._published(topic_name, len(bodies))
        self.out.append(OK_FRAME)

    def _dpub(self, params: list[bytes], body: bytes) -> None:
        topic_name = params[1].decode("ascii")
        delay_ns = ms_to_duration_ns(byte_to_base10(params[2]))  # checked by the parser
        try:
            topic = self.nsqd.get_topic(topic_name)
            mid = self.nsqd.id_factory.next_id()
            topic.put_deferred((mid, body, _time_ns(), 0), delay_ns / 1e9)
        except OSError as err:
            raise FatalError(E_DPUB_FAILED, f"DPUB failed {err}") from None
        self._published(topic_name, 1)
        self.out.append(OK_FRAME)

    # with --auth-http-address: the publish commands check authorizations first

    def _pub_authed(self, params: list[bytes], body: bytes) -> None:
        self._check_auth("PUB", params[1].decode("ascii"), "")
        self._pub(params, body)

    def _mpub_authed(self, params: list[bytes], bodies: list[bytes]) -> None:
        self._check_auth("MPUB", params[1].decode("ascii"), "")
        self._mpub(params, bodies)

    def _dpub_authed(self, params: list[bytes], body: bytes) -> None:
        self._check_auth("DPUB", params[1].decode("ascii"), "")
        self._dpub(params, body)


# Command tables, shared by every connection (a connection points at the one for its mode).
_HANDLERS: dict[bytes, Callable[..., None]] = {
    b"FIN": ClientV2._fin, b"RDY": ClientV2._rdy, b"REQ": ClientV2._req, b"PUB": ClientV2._pub,
    b"MPUB": ClientV2._mpub, b"DPUB": ClientV2._dpub, b"NOP": ClientV2._nop,
    b"TOUCH": ClientV2._touch, b"SUB": ClientV2._sub, b"CLS": ClientV2._cls,
    b"AUTH": ClientV2._auth, b"IDENTIFY": ClientV2._identify,
}
_AUTH_HANDLERS: dict[bytes, Callable[..., None]] = {
    **_HANDLERS, b"PUB": ClientV2._pub_authed, b"MPUB": ClientV2._mpub_authed,
    b"DPUB": ClientV2._dpub_authed}
_TLS_REQUIRED_HANDLERS: dict[bytes, Callable[..., None]] = {
    name: ClientV2._tls_required for name in _HANDLERS}
_TLS_REQUIRED_HANDLERS[b"IDENTIFY"] = ClientV2._identify
