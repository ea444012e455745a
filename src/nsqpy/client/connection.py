"""One NSQ TCP protocol V2 connection, as an ``asyncio.Protocol``.

This is also the low-level API (e.g. for the Spark connector, which drives its own loop thread)::

    conn = NSQConnection("127.0.0.1", 4150, on_message=handle)
    await conn.connect()                 # magic, IDENTIFY, upgrades, AUTH
    await conn.subscribe("topic", "channel")
    conn.ready(100)                      # nsqd may now have 100 messages in flight with us
    ...  handle(msg) is called on the loop; answer with msg.finish() / msg.touch(), or from
    ...  another thread with msg.finish_threadsafe()
    await conn.start_close()             # CLS -> CLOSE_WAIT; then answer what is in flight
    conn.close(); await conn.wait_closed()

Why the pieces look the way they do:

* Commands that nsqd answers (IDENTIFY, SUB, PUB, MPUB, DPUB, CLS, AUTH) are matched to their
  answers **in order** (nsqd handles one connection's commands sequentially), so publishes can
  be pipelined without ids; heartbeats and the non-fatal ``E_FIN_FAILED``-style errors (answers to
  commands that otherwise get no reply) are routed aside and never consume a waiter.
* Frames are parsed here rather than with ``protocol.frames.FrameDecoder``: after IDENTIFY
  negotiates snappy/deflate, the bytes right after the JSON answer — often in the same read — are
  already compressed, so the parser must switch codecs between two frames of one buffer, and it
  decodes message frames in the same pass instead of building an intermediate frame tuple.
* Writes are queued and sent as one ``transport.write`` per event-loop turn, compressing the
  batch once: hundreds of FINs or PUBs cost one syscall.
"""

from __future__ import annotations

import asyncio
import logging
import re
import struct
from collections import deque
from typing import Any, Callable

import orjson

from nsqpy.protocol.commands import MAGIC_V2
from nsqpy.protocol.frames import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    OK,
)
from .addr import format_address
from .backoff import Signal
from .compression import DeflateCodec, SnappyCodec, StreamCodec
from .errors import ConnectionClosedError, IdentifyError, NSQError, NSQErrorResponse
from .message import Message, MessageBatch
from .options import ConnectionOptions

log = logging.getLogger("nsqpy.client")

_HEADER = struct.Struct(">ii")
_MSG_HEADER = struct.Struct(">qH")
_I32 = struct.Struct(">i")
_unpack_header = _HEADER.unpack_from
_unpack_msg = _MSG_HEADER.unpack_from
# a message frame's head: size, frame type, timestamp, attempts (the id and body follow)
_unpack_message_head = struct.Struct(">iiqH").unpack_from
_pack_i32 = _I32.pack

NOP = b"NOP\n"
_WRITE_THROUGH = 16384  # bytes; smaller commands are coalesced per loop turn
DEFAULT_MAX_RDY = 2500  # nsqd's --max-rdy-count default, if IDENTIFY did not tell us

MessageCallback = Callable[[Message], None]
DoneCallback = Callable[["NSQConnection", Message, Signal], None]


def name_bytes(name: str) -> bytes:
    """A topic/channel name as a command parameter.

    Only what would corrupt the command line (spaces, newlines, control bytes) is refused here;
    whether the name is *valid* is nsqd's call (``E_BAD_TOPIC``/``E_BAD_CHANNEL``), so the client
    follows the server it talks to.
    """
    raw = _name_cache.get(name)
    if raw is not None:
        return raw
    raw = name.encode("utf-8")
    if not raw or _UNSENDABLE.search(raw):
        raise ValueError(f"name {name!r} cannot be sent: empty, or has spaces/control bytes")
    if len(_name_cache) > 1024:  # publishers use few topics; bound it against many
        _name_cache.clear()
    _name_cache[name] = raw
    return raw


_UNSENDABLE = re.compile(rb"[\x00-\x20\x7f]")
_name_cache: dict[str, bytes] = {}


def _as_bytes(body: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(body, str):
        return body.encode("utf-8")
    return bytes(body)


def encode_pub(topic: bytes, body: bytes) -> bytes:
    return b"PUB %s\n%s%s" % (topic, _pack_i32(len(body)), body)


def encode_mpub_b(topic: bytes, bodies: list[bytes]) -> bytes:
    """MPUB with ``[n]([size][body])*``; like ``protocol.commands.encode_mpub`` for a bytes topic."""
    chunks = [_pack_i32(len(bodies))]
    for body in bodies:
        chunks.append(_pack_i32(len(body)))
        chunks.append(body)
    payload = b"".join(chunks)
    return b"MPUB %s\n%s%s" % (topic, _pack_i32(len(payload)), payload)


def encode_dpub(topic: bytes, delay_ms: int, body: bytes) -> bytes:
    return b"DPUB %s %d\n%s%s" % (topic, delay_ms, _pack_i32(len(body)), body)


def _take_messages(data: bytes, pos: int, end: int, batch: MessageBatch, max_size: int) -> int:
    """The run of complete message frames from ``pos`` into ``batch``'s columns; returns where
    the run ends (at a frame of another type, a bad or incomplete one: the caller's loop takes
    it from there). One unpack per message and one copy per field, with the appends bound once:
    the column consumers (the Spark source) receive hundreds of thousands of messages a second."""
    unpack = _unpack_message_head
    ids, bodies = batch.ids.append, batch.bodies.append
    timestamps, attempts = batch.timestamps.append, batch.attempts.append
    while end - pos >= 18:
        size, frame_type, timestamp, attempt = unpack(data, pos)
        stop = pos + 4 + size
        if frame_type != FRAME_TYPE_MESSAGE or size < 30 or stop > end or (max_size and size > max_size):
            break
        ids(data[pos + 18 : pos + 34])
        bodies(data[pos + 34 : stop])
        timestamps(timestamp)
        attempts(attempt)
        pos = stop
    return pos


class NSQConnection(asyncio.Protocol):
    """A connection to one nsqd. See the module docstring for the life cycle."""

    def __init__(
        self,
        host: str,
        port: int,
        options: ConnectionOptions | None = None,
        *,
        on_message: MessageCallback | None = None,
        on_messages: Callable[[MessageBatch], None] | None = None,
        on_close: Callable[[NSQConnection, BaseException | None], None] | None = None,
        on_response: Callable[[NSQConnection, bytes], None] | None = None,
        on_error: Callable[[NSQConnection, NSQErrorResponse], None] | None = None,
        on_done: DoneCallback | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.address = format_address(host, port)
        self.options = options or ConnectionOptions()
        self.on_message = on_message
        #: when set, messages come as one :class:`MessageBatch` per read instead of
        #: ``on_message`` per message
        self.on_messages = on_messages
        self.on_close = on_close
        self.on_response = on_response
        self.on_error = on_error
        self.on_done = on_done
        self.loop = asyncio.get_running_loop()

        self.identify_response: dict[str, Any] = {}
        self.max_rdy_count = DEFAULT_MAX_RDY
        self.rdy = 0  # last RDY sent
        self.in_flight = 0  # messages received and not yet answered with FIN/REQ
        self.subscribed = False
        self.closing = False  # CLS sent, or close() called

        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._codec: StreamCodec | None = None
        self._codec_after_ok: StreamCodec | None = None  # installed on the next OK (after TLS)
        self._handshaking = False
        self._identify_pending = False
        self._tls_pending = False
        self._upgrade_futs: list[asyncio.Future[bytes]] = []
        self._waiters: deque[asyncio.Future[bytes]] = deque()
        self._wbuf: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._fatal: NSQErrorResponse | None = None
        self._close_reason: BaseException | None = None
        #: why the connection ended: nsqd's fatal error frame, a local failure, or a socket error
        self.close_reason: BaseException | None = None
        self._closed = self.loop.create_future()
        self._last_read = 0.0
        self._read_timer: asyncio.TimerHandle | None = None
        self._raw_sink: Callable[[bytes], None] | None = None  # see take_raw

    def __repr__(self) -> str:
        return f"<NSQConnection {self.address} rdy={self.rdy} in_flight={self.in_flight}>"

    # --- life cycle -----------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self._closed.done()

    @property
    def is_usable(self) -> bool:
        """Connected, handshake done, not closing: commands sent now will be executed."""
        return (
            self._transport is not None
            and not self._handshaking
            and not self.closing
            and self._fatal is None
            and not self._closed.done()
        )

    async def connect(self) -> dict[str, Any]:
        """Dial, send the magic, IDENTIFY and perform the negotiated upgrades (and AUTH).

        Returns nsqd's IDENTIFY answer (``max_rdy_count``, ``msg_timeout``, ...).
        """
        try:
            async with asyncio.timeout(self.options.connect_timeout):
                await self._handshake()
        except BaseException as err:
            self.abort()
            if isinstance(err, TimeoutError):
                raise ConnectionError(f"{self.address}: connect/IDENTIFY timed out") from None
            raise
        return self.identify_response

    async def _handshake(self) -> None:
        opts = self.options
        await self.loop.create_connection(lambda: self, self.host, self.port)
        self._handshaking = True
        self.send(MAGIC_V2)
        self._identify_pending = True
        body = orjson.dumps(opts.identify_body())
        answer = self.request(b"IDENTIFY\n" + _pack_i32(len(body)) + body)
        await answer  # parsed synchronously by _identify_answer when it arrived
        if self._tls_pending:
            await self._upgrade_tls()
        for fut in self._upgrade_futs:
            if await fut != OK:
                raise IdentifyError(f"{self.address}: upgrade not acknowledged with OK")
        self._upgrade_futs = []
        if self.identify_response.get("auth_required"):
            if not opts.auth_secret:
                raise IdentifyError(f"{self.address}: nsqd requires AUTH but no auth_secret set")
            secret = opts.auth_secret.encode()
            resp = await self.request(b"AUTH\n" + _pack_i32(len(secret)) + secret)
            log.debug("%s: AUTH %s", self.address, resp)
        self._handshaking = False
        self._arm_read_timer()

    async def _upgrade_tls(self) -> None:
        opts = self.options
        assert opts.tls is not None and self._transport is not None
        self._tls_pending = False
        transport = await self.loop.start_tls(
            self._transport, self, opts.tls, server_hostname=opts.tls_server_hostname or self.host
        )
        if transport is None:
            raise IdentifyError(f"{self.address}: TLS upgrade failed")
        self._transport = transport

    async def subscribe(self, topic: str, channel: str) -> None:
        """SUB; nsqd starts us at RDY 0, so nothing arrives before :meth:`ready`."""
        resp = await self.request(b"SUB %s %s\n" % (name_bytes(topic), name_bytes(channel)))
        if resp != OK:
            raise NSQError(f"{self.address}: unexpected answer to SUB: {resp!r}")
        self.subscribed = True

    def ready(self, count: int) -> None:
        """RDY: the most messages nsqd may have in flight with us on this connection.

        A decrease is written at once: the budget it frees may be granted to another
        connection in the same loop turn, and that grant must not reach its nsqd first.
        """
        lower = count < self.rdy
        self.rdy = count
        if not self.closing:
            self.send(b"RDY %d\n" % count)
            if lower:
                if self._flush_handle is not None:
                    self._flush_handle.cancel()
                self._flush()

    def start_close(self) -> asyncio.Future[bytes]:
        """CLS: nsqd stops delivering and answers CLOSE_WAIT; in-flight answers still count."""
        self.closing = True
        if not self.subscribed or self._closed.done():
            fut: asyncio.Future[bytes] = self.loop.create_future()
            fut.set_result(CLOSE_WAIT)
            return fut
        return self.request(b"CLS\n")

    def close(self) -> None:
        """Send what is queued, then close. Pending commands fail with ConnectionClosedError."""
        self.closing = True
        self._flush()
        if self._transport is not None:
            self._transport.close()
        elif not self._closed.done():
            self._finish_close(None)

    def abort(self) -> None:
        self.closing = True
        if self._transport is not None:
            self._transport.abort()
        elif not self._closed.done():
            self._finish_close(None)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    # --- commands with an answer (FIFO) ---------------------------------------------------

    def request(self, data: bytes) -> asyncio.Future[bytes]:
        """Send a command nsqd answers; the future gets the answer (or its error)."""
        fut: asyncio.Future[bytes] = self.loop.create_future()
        if self._transport is None or self._closed.done() or self._fatal is not None:
            fut.set_exception(ConnectionClosedError(f"{self.address}: not connected", unprocessed=True))
            return fut
        self._waiters.append(fut)
        self.send(data)
        return fut

    @property
    def pending(self) -> int:
        """Commands sent and not yet answered."""
        return len(self._waiters)

    async def publish(self, topic: str, body: bytes | str) -> None:
        await self._expect_ok(self.request(encode_pub(name_bytes(topic), _as_bytes(body))))

    async def mpublish(self, topic: str, bodies: list[bytes] | list[str]) -> None:
        if not bodies:
            raise ValueError("mpublish needs at least one message")
        await self._expect_ok(self.request(encode_mpub_b(name_bytes(topic), [_as_bytes(b) for b in bodies])))

    async def dpublish(self, topic: str, delay: float, body: bytes | str) -> None:
        data = encode_dpub(name_bytes(topic), int(round(delay * 1000)), _as_bytes(body))
        await self._expect_ok(self.request(data))

    async def _expect_ok(self, fut: asyncio.Future[bytes]) -> None:
        resp = await fut
        if resp != OK:
            raise NSQError(f"{self.address}: unexpected answer {resp!r}")

    # --- answers to messages (no reply from nsqd unless they fail) ------------------------

    def finish(self, msg: Message) -> None:
        self.in_flight -= 1
        if not self._closed.done():
            self.send(b"FIN %s\n" % msg.id)
        if self.on_done is not None:
            self.on_done(self, msg, Signal.SUCCESS)

    def requeue(self, msg: Message, delay: float | None, backoff: bool) -> None:
        self.in_flight -= 1
        if delay is None:
            delay = self.options.requeue_delay(msg.attempts)
        if not self._closed.done():
            self.send(b"REQ %s %d\n" % (msg.id, max(0, int(round(delay * 1000)))))
        if self.on_done is not None:
            self.on_done(self, msg, Signal.FAILURE if backoff else Signal.CONTINUE)

    def touch(self, msg: Message) -> None:
        if not self._closed.done():
            self.send(b"TOUCH %s\n" % msg.id)

    def finish_ids(self, ids: list[bytes]) -> None:
        """FIN many messages of a :class:`MessageBatch` in one write."""
        self.in_flight -= len(ids)
        if ids and not self._closed.done():
            self.send(b"FIN " + b"\nFIN ".join(ids) + b"\n")

    def requeue_ids(self, ids: list[bytes], delay_ms: int = 0) -> None:
        """REQ many messages of a :class:`MessageBatch` (no consumer backoff)."""
        self.in_flight -= len(ids)
        if ids and not self._closed.done():
            tail = b" %d\n" % delay_ms
            self.send(b"REQ " + (tail + b"REQ ").join(ids) + tail)

    def touch_ids(self, ids: list[bytes]) -> None:
        """TOUCH many messages of a :class:`MessageBatch` in one write."""
        if ids and not self._closed.done():
            self.send(b"TOUCH " + b"\nTOUCH ".join(ids) + b"\n")

    def detach(self) -> asyncio.Transport:
        """After :meth:`connect` (IDENTIFY, TLS, AUTH), hand the socket to another protocol:
        nsqd-to-nsqd replication goes on with its own framing on the same (TLS) stream.
        This connection is then closed without closing the socket."""
        transport = self._transport
        if transport is None or self._closed.done() or self._buf or self._waiters:
            raise NSQError(f"{self.address}: cannot detach now")
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush()
        self._transport = None
        self.closing = True
        self._closed.set_result(None)
        return transport

    def take_raw(self, sink: Callable[[bytes], None]) -> None:
        """From now on hand every byte nsqd sends (TLS and compression undone) to ``sink``
        instead of parsing frames here: for a reader that parses a whole stream of messages at
        once (the Spark source's lease reads, which build Arrow columns from the raw frames).
        The sink then answers heartbeats (:meth:`nop`) and sees CLOSE_WAIT and error frames."""
        self._raw_sink = sink
        if self._buf:
            rest, self._buf = bytes(self._buf), bytearray()
            sink(rest)

    def nop(self) -> None:
        self.send(NOP)

    # --- from other threads (the loop runs elsewhere, e.g. a Spark reader's I/O thread) ---

    def ready_threadsafe(self, count: int) -> None:
        self.loop.call_soon_threadsafe(self.ready, count)

    def close_threadsafe(self) -> None:
        self.loop.call_soon_threadsafe(self.close)

    # --- writing ----------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue bytes; everything queued in one loop turn leaves in one write.

        A large command (an MPUB batch) goes out at once with whatever is queued before it:
        batching saves nothing there, and waiting a loop turn would only add latency.
        """
        self._wbuf.append(data)
        if len(data) >= _WRITE_THROUGH:
            if self._flush_handle is not None:
                self._flush_handle.cancel()
            self._flush()
        elif self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        wbuf = self._wbuf
        transport = self._transport
        if not wbuf or transport is None or transport.is_closing():
            wbuf.clear()
            return
        data = wbuf[0] if len(wbuf) == 1 else b"".join(wbuf)
        wbuf.clear()
        if self._codec is not None:
            data = self._codec.encode(data)
        transport.write(data)

    @property
    def write_paused(self) -> bool:
        return self._write_paused

    async def drain(self) -> None:
        """Wait while the socket's send buffer is over its high-water mark (backpressure)."""
        if not self._write_paused:
            return
        fut: asyncio.Future[None] = self.loop.create_future()
        self._drain_waiters.append(fut)
        await fut

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # --- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._transport is None:  # start_tls calls this again with the TLS transport
            self._transport = transport  # type: ignore[assignment]
        self._last_read = self.loop.time()

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish_close(exc)

    def _finish_close(self, exc: BaseException | None) -> None:
        if self._closed.done():
            return
        self.closing = True
        if self._read_timer is not None:
            self._read_timer.cancel()
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        reason = self._fatal or self._close_reason or exc
        self.close_reason = reason
        unprocessed = self._fatal is not None
        waiters, self._waiters = self._waiters, deque()
        for fut in waiters:
            if not fut.done():
                msg = f"{self.address}: connection closed"
                if unprocessed:
                    msg += f" after {self._fatal}; command not executed"
                elif reason is not None:
                    msg += f" ({reason})"
                fut.set_exception(ConnectionClosedError(msg, unprocessed=unprocessed))
        self.resume_writing()
        self._closed.set_result(None)
        if self.on_close is not None:
            self.on_close(self, reason)

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        if self._codec is not None:
            try:
                data = self._codec.decode(data)
            except ValueError as err:
                self._protocol_failure(err)
                return
        if self._raw_sink is not None:
            self._raw_sink(data)
            return
        buf = self._buf
        if buf:  # the frames are sliced from bytes: one copy per slice, not two
            buf += data
            data = bytes(buf)
            buf.clear()
        elif type(data) is not bytes:
            data = bytes(data)
        end = len(data)
        pos = 0
        max_size = self.options.max_frame_size
        on_message = self.on_message
        batch = None if self.on_messages is None else MessageBatch(self)
        while end - pos >= 8:
            size, frame_type = _unpack_header(data, pos)
            if size < 4 or (max_size and size > max_size):
                self._protocol_failure(NSQError(f"{self.address}: bad frame size {size}"))
                return
            stop = pos + 4 + size
            if stop > end:
                break
            if frame_type == FRAME_TYPE_MESSAGE:
                if size < 30:
                    self._protocol_failure(NSQError(f"{self.address}: short message frame"))
                    return
                if batch is not None:
                    pos = _take_messages(data, pos, end, batch, max_size)
                    continue
                timestamp, attempts = _unpack_msg(data, pos + 8)
                msg = Message(
                    bytes(data[pos + 18 : pos + 34]), bytes(data[pos + 34 : stop]),
                    timestamp, attempts, self,
                )
                pos = stop
                self.in_flight += 1
                if on_message is not None:
                    try:
                        on_message(msg)
                    except Exception:  # a callback bug must not desynchronise the stream
                        log.exception("%s: on_message callback failed", self.address)
                continue
            payload = bytes(data[pos + 8 : stop])
            pos = stop
            if frame_type == FRAME_TYPE_RESPONSE:
                if payload == HEARTBEAT:
                    self.send(NOP)
                    continue
                switched = self._on_response_frame(payload)
                if switched:  # the rest of this read is in the new (compressed) stream
                    rest = bytes(data[pos:end])
                    self._buf = bytearray()
                    if rest:
                        self.data_received(rest)
                    return
            elif frame_type == FRAME_TYPE_ERROR:
                self._on_error_frame(payload)
            else:
                self._protocol_failure(NSQError(f"{self.address}: unknown frame type {frame_type}"))
                return
            if self._closed.done():
                return
        if batch:
            self.in_flight += len(batch.ids)
            try:
                self.on_messages(batch)  # type: ignore[misc]
            except Exception:
                log.exception("%s: on_messages callback failed", self.address)
        if pos < end:
            buf += memoryview(data)[pos:]

    def _on_response_frame(self, payload: bytes) -> bool:
        """Match an answer to the oldest waiting command; True when a codec was installed."""
        if self._handshaking:
            if self._identify_pending:
                return self._identify_answer(payload)
            if self._codec_after_ok is not None and payload == OK:
                self._resolve(payload)
                self._codec, self._codec_after_ok = self._codec_after_ok, None
                return True
        if self._waiters:
            self._resolve(payload)
        elif payload == CLOSE_WAIT and self.on_response is None:
            log.debug("%s: CLOSE_WAIT", self.address)
        elif self.on_response is not None:
            self.on_response(self, payload)
        else:
            log.warning("%s: unexpected response %r", self.address, payload[:100])
        return False

    def _resolve(self, payload: bytes) -> None:
        fut = self._waiters.popleft()
        if not fut.done():
            fut.set_result(payload)

    def _identify_answer(self, payload: bytes) -> bool:
        """IDENTIFY's answer, handled synchronously: an upgrade starts with the very next byte."""
        self._identify_pending = False
        if payload == OK:  # an nsqd too old for feature negotiation
            resp: dict[str, Any] = {}
        else:
            try:
                resp = orjson.loads(payload)
                if not isinstance(resp, dict):
                    raise orjson.JSONDecodeError("not an object", "", 0)
            except orjson.JSONDecodeError:
                self._fail_waiter(IdentifyError(f"{self.address}: bad IDENTIFY answer {payload[:100]!r}"))
                self._protocol_failure(None)
                return False
        if resp.get("tls_v1") and self.options.tls is None:
            self._fail_waiter(IdentifyError(f"{self.address}: nsqd started TLS unasked"))
            self._protocol_failure(None)
            return False
        if self.options.tls is not None and not resp.get("tls_v1"):
            # never fall back to clear text when TLS was asked for (go-nsq and pynsq silently do)
            self._fail_waiter(IdentifyError(f"{self.address}: TLS requested but nsqd did not "
                                            "negotiate tls_v1"))
            self._protocol_failure(None)
            return False
        self.identify_response = resp
        self.max_rdy_count = int(resp.get("max_rdy_count", DEFAULT_MAX_RDY))
        self._resolve(payload)
        codec: StreamCodec | None = None
        if resp.get("snappy"):
            codec = SnappyCodec()
        elif resp.get("deflate"):
            codec = DeflateCodec(int(resp.get("deflate_level") or 6))
        if resp.get("tls_v1"):
            self._tls_pending = True
            self._upgrade_futs.append(self._expect_answer())
        if codec is not None:
            self._upgrade_futs.append(self._expect_answer())
            if self._tls_pending:
                self._codec_after_ok = codec
            else:
                self._codec = codec
                return True
        return False

    def _expect_answer(self) -> asyncio.Future[bytes]:
        fut: asyncio.Future[bytes] = self.loop.create_future()
        self._waiters.append(fut)
        return fut

    def _fail_waiter(self, err: BaseException) -> None:
        if self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(err)

    def _on_error_frame(self, payload: bytes) -> None:
        err = NSQErrorResponse.from_frame(payload)
        if not err.fatal:
            # E_FIN_FAILED / E_REQ_FAILED / E_TOUCH_FAILED answer commands that get no reply
            # when they succeed, so they never match a waiting command
            if self.on_error is not None:
                self.on_error(self, err)
            else:
                log.warning("%s: %s", self.address, err)
            return
        self._fatal = err
        if self._waiters:
            self._fail_waiter(err)
        elif self.on_error is not None:
            self.on_error(self, err)
        else:
            log.error("%s: %s", self.address, err)
        # nsqd closes the connection after a fatal error and executes nothing queued behind it
        self.close()

    def _protocol_failure(self, err: BaseException | None) -> None:
        if err is not None:
            log.error("%s: %s", self.address, err)
            self._close_reason = err
        self.abort()

    # --- idle detection ---------------------------------------------------------------------

    def _arm_read_timer(self) -> None:
        timeout = self.options.effective_read_timeout()
        if timeout is None or self._closed.done():
            return
        self._read_timer = self.loop.call_at(self._last_read + timeout, self._check_read, timeout)

    def _check_read(self, timeout: float) -> None:
        if self._closed.done():
            return
        idle = self.loop.time() - self._last_read
        if idle >= timeout:
            self._protocol_failure(NSQError(f"{self.address}: nothing read for {idle:.1f}s"))
            return
        self._read_timer = self.loop.call_at(self._last_read + timeout, self._check_read, timeout)
