"""One client connection speaking TCP protocol V2: an asyncio Protocol around the sans-I/O parser.

Commands are handled synchronously inside ``data_received`` (no Task per command or message).
Everything written in one event-loop turn — OK responses to pipelined PUBs, message frames pushed
by channels — is joined into a single ``transport.write`` (write coalescing).
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import TYPE_CHECKING, Callable

import orjson

from .. import NSQ_COMPAT_VERSION
from ..protocol.commands import (
    BAD_PROTOCOL_PAYLOAD, MAGIC_V2, CommandParser, LineTooLong, check_topic, go_quote, parse_int,
)
from ..protocol.compression import CompressionError, DeflateCodec, SnappyCodec
from ..protocol.errors import (
    E_AUTH_DISABLED, E_BAD_BODY, E_BAD_CHANNEL, E_DPUB_FAILED, E_IDENTIFY_FAILED, E_INVALID,
    E_MPUB_FAILED, E_PUB_FAILED, E_SUB_FAILED, ClientError, FatalError, ProtocolError,
)
from ..protocol.frames import CLOSE_WAIT_FRAME, HEARTBEAT_FRAME, OK_FRAME, encode_error, encode_response
from ..protocol.names import is_valid_name

if TYPE_CHECKING:
    from .channel import Channel
    from .nsqd import NSQD

STATE_INIT = 0
STATE_DISCONNECTED = 1
STATE_CONNECTED = 2
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

DEFAULT_OUTPUT_BUFFER_SIZE = 16 * 1024
_monotonic = time.monotonic
_time_ns = time.time_ns

_INT_FIELDS = ("heartbeat_interval", "output_buffer_size", "output_buffer_timeout",
               "deflate_level", "sample_rate", "msg_timeout")
_BOOL_FIELDS = ("feature_negotiation", "tls_v1", "deflate", "snappy")
_STR_FIELDS = ("client_id", "hostname", "user_agent", "short_id", "long_id",
               "topology_region", "topology_zone")


def _decode_id(raw: bytes) -> bytes:
    if len(raw) != 16:
        raise FatalError(E_INVALID, "invalid message ID")
    return raw


def _base10(raw: bytes) -> int:
    """Upstream's ByteToBase10: unsigned decimal digits only."""
    if not raw.isdigit():
        raise ValueError(raw)
    return int(raw)


class ClientV2(asyncio.Protocol):
    """Server side of one V2 connection."""

    def __init__(self, nsqd: "NSQD") -> None:
        self.nsqd = nsqd
        opts = nsqd.options
        self.id = nsqd.next_client_id()
        self.transport: asyncio.Transport | None = None
        self.parser = CommandParser(nsqd.limits)
        self._magic = bytearray()
        self._magic_done = False
        self.state = STATE_INIT
        self.remote_address = ""
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
        self._last_read = _monotonic()
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._closed = False
        self._acked = False  # a FIN/REQ freed room under RDY during this data_received
        self._handlers = {
            b"FIN": self._fin, b"RDY": self._rdy, b"REQ": self._req, b"PUB": self._pub,
            b"MPUB": self._mpub, b"DPUB": self._dpub, b"NOP": self._nop, b"TOUCH": self._touch,
            b"SUB": self._sub, b"CLS": self._cls, b"AUTH": self._auth, b"IDENTIFY": self._identify,
        }

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
            self.client_id = self.hostname = host
        else:
            self.remote_address = str(peer or "@")
        self.nsqd.add_client(self)
        self._arm_heartbeat()

    def data_received(self, data: bytes) -> None:
        self._last_read = _monotonic()
        if not self._magic_done:
            need = 4 - len(self._magic)
            self._magic += data[:need]
            data = data[need:]
            if len(self._magic) < 4:
                return
            if bytes(self._magic) != MAGIC_V2:
                self.nsqd.logger.error("client(%s) bad protocol magic %s", self.remote_address,
                                       go_quote(bytes(self._magic)))
                self._send_now(encode_error(BAD_PROTOCOL_PAYLOAD))
                self.close_connection()
                return
            self._magic_done = True
            if not data:
                return
        if self._decompress is not None:
            try:
                data = self._decompress(data)
            except CompressionError as err:
                self.nsqd.logger.error("client(%s) %s", self.remote_address, err)
                self.close_connection()
                return
        self._process(self.parser.feed(data))

    def _process(self, items: list) -> None:
        handlers = self._handlers
        for item in items:
            if self._closed:
                return
            if isinstance(item, FatalError):
                if isinstance(item, LineTooLong):
                    self.nsqd.logger.error("client(%s) %s", self.remote_address, item.description)
                    self.close_connection()
                else:
                    self._fatal(item)
                return
            name, params, body = item
            handler = handlers.get(name)
            try:
                if handler is None:
                    raise FatalError(E_INVALID, f"invalid command {name.decode('utf-8', 'replace')}")
                handler(params, body)
            except ClientError as err:
                self.out.append(encode_error(err.payload))
            except FatalError as err:
                self._fatal(err)
                return
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
        if self.state != STATE_SUBSCRIBED and self.transport is not None:
            self.transport.pause_reading()  # a publisher that doesn't read its OKs waits
            self._reading_paused = True

    def resume_writing(self) -> None:
        self.writable = True
        if self._reading_paused and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        if self.channel is not None:
            self.channel.dispatch()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._heartbeat_handle is not None:
            self._heartbeat_handle.cancel()
        self.nsqd.remove_client(self)
        channel = self.channel
        if channel is not None:
            self.channel = None
            channel.remove_client(self)
        self.transport = None
        self.out.clear()

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
        self.nsqd.logger.error("client(%s) - %s", self.remote_address, err)
        self._send_now(encode_error(err.payload))
        self.close_connection()

    def close_connection(self) -> None:
        """Close after writing what is buffered (nsqd closes the socket on fatal errors)."""
        if self._closed:
            return
        self._closed = True
        if self.transport is not None:
            self._flush()
            self.transport.close()

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
        now = _monotonic()
        hb = self.heartbeat_interval
        if now - self._last_read > 2 * hb:
            self.nsqd.logger.error("client(%s) - read timeout: no data for %.1fs", self.remote_address,
                                   now - self._last_read)
            self.close_connection()
            return
        if not self.writable and now - self._paused_since > hb:
            self.nsqd.logger.error("client(%s) - write timeout: slow consumer", self.remote_address)
            self.transport.abort()  # type: ignore[union-attr]
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
                elif isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(key)
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
            return
        deflate = bool(opts.deflate and data.get("deflate"))
        level = 6
        if deflate and data.get("deflate_level", 0) > 0:
            level = data["deflate_level"]
        level = min(level, opts.max_deflate_level)
        snappy = bool(opts.snappy and data.get("snappy"))
        if deflate and snappy:
            raise FatalError(E_IDENTIFY_FAILED, "cannot enable both deflate and snappy compression")
        resp = {
            "max_rdy_count": opts.max_rdy_count,
            "version": NSQ_COMPAT_VERSION,
            "max_msg_timeout": int(opts.max_msg_timeout * 1000),
            "msg_timeout": int(self.msg_timeout * 1000),
            "tls_v1": False,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": self.sample_rate,
            "auth_required": False,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": int(self.output_buffer_timeout * 1000),
        }
        self._send_now(encode_response(orjson.dumps(resp)))
        codec: SnappyCodec | DeflateCodec | None = None
        if snappy:
            codec = SnappyCodec()
            self.snappy = True
        elif deflate:
            codec = DeflateCodec(level)
            self.deflate = True
        if codec is not None:
            leftover = self.parser.take_buffer()
            self._compress = codec.compress
            self._decompress = codec.decompress
            self.out.append(OK_FRAME)
            if leftover:
                self.nsqd.loop.call_soon(self.data_received, bytes(leftover))

    def _auth(self, params: list[bytes], body: bytes) -> None:
        if self.state != STATE_INIT:
            raise FatalError(E_INVALID, "cannot AUTH in current state")
        raise FatalError(E_AUTH_DISABLED, "AUTH disabled")

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
                count = _base10(params[1]) if params[1] else 0
            except ValueError:
                raise FatalError(E_INVALID,
                                 f"RDY could not parse count {params[1].decode('utf-8', 'replace')}") from None
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
            timeout_ms = _base10(params[2])
        except ValueError:
            raise FatalError(E_INVALID,
                             f"REQ could not parse timeout {params[2].decode('utf-8', 'replace')}") from None
        max_ms = int(self.nsqd.options.max_req_timeout * 1000)
        if timeout_ms > max_ms:
            self.nsqd.logger.info("client(%s) REQ timeout %d out of range 0-%d, clamping",
                                  self.remote_address, timeout_ms, max_ms)
            timeout_ms = max_ms
        channel.requeue_in_flight(self, mid, timeout_ms / 1000.0)
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
        delay_ms = parse_int(params[2])  # range-checked by the parser
        try:
            topic = self.nsqd.get_topic(topic_name)
            mid = self.nsqd.id_factory.next_id()
            topic.put_deferred((mid, body, _time_ns(), 0), delay_ms / 1000.0)
        except OSError as err:
            raise FatalError(E_DPUB_FAILED, f"DPUB failed {err}") from None
        self._published(topic_name, 1)
        self.out.append(OK_FRAME)
