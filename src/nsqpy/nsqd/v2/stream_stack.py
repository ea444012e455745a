"""What a V2 connection waits on: the stream stack IDENTIFY negotiated, and the auth server.

After IDENTIFY the protocol state machine asks for an :class:`~nsqpy.nsqd.protocol_v2.Upgrade`;
this part of the connection carries it out, in upstream's order: the answer goes out in clear,
then the in-band TLS handshake (``loop.start_tls``, 5 s deadline) and its ``OK`` over TLS, then
snappy or deflate and the first compressed ``OK``. Incoming deflate output is inflated in
``INFLATE_STEP`` slices, one per event-loop turn, so a small "deflate bomb" cannot stall the
loop or fill memory. The auth server is asked the same way, in a Task while the connection's
gate holds the commands back (:class:`~nsqpy.nsqd.protocol_v2.NeedAuth`). A mixin of :class:`~nsqpy.nsqd.v2.connection.V2Connection` (which owns
the gate, the parser and the transport it uses); it only exists to keep each module short.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable

from ...protocol.compression import CompressionError, DeflateCodec, SnappyCodec
from ...protocol.errors import E_AUTH_FAILED, E_IDENTIFY_FAILED, FatalError
from ...protocol.frames import OK_FRAME

if TYPE_CHECKING:
    from ...protocol.commands import CommandParser
    from .client import ClientV2
    from ..nsqd import NSQD
    from .protocol_v2 import ProtocolV2, Upgrade

TLS_HANDSHAKE_TIMEOUT = 5.0  # upstream's deadline for the in-band upgrade
# deflate output handled per event-loop turn: a small "deflate bomb" is inflated step by step
INFLATE_STEP = 256 * 1024


class StreamStack:
    """TLS, compression and auth queries for :class:`~nsqpy.nsqd.v2.connection.V2Connection`."""

    # provided by the connection
    nsqd: "NSQD"
    client: "ClientV2"
    protocol: "ProtocolV2"
    parser: "CommandParser"
    transport: asyncio.Transport | None
    close_requested: bool
    end_error: str | None
    _closed: bool
    _io_paused: bool
    _held_raw: bytearray | None
    _task: asyncio.Task | None
    _raw_transport: asyncio.Transport | None
    _process: Callable[[list], None]
    _flush: Callable[[], None]
    out: list[bytes]
    _send_now: Callable[[bytes], None]
    _fatal: Callable[[FatalError], None]
    _release: Callable[[], None]
    _hold_reading: Callable[..., None]
    _holding: Callable[[], bool]
    _arm_heartbeat: Callable[[], None]
    close_connection: Callable[[], None]
    connection_lost: Callable[[Exception | None], None]

    def _init_stream(self) -> None:
        self._compress: Callable[[bytes], bytes] | None = None
        self._decompress: Callable[[bytes], bytes] | None = None
        self._inflater: DeflateCodec | None = None  # set with deflate: its output is bounded

    def _feed_compressed(self, data: bytes) -> None:
        try:
            data = self._decompress(data)  # type: ignore[misc]
        except CompressionError as err:
            self.end_error = f"failed to read command - {err}"
            self.close_connection()
            return
        self._process(self.parser.feed(data))
        inflater = self._inflater
        if inflater is not None and inflater.pending and not self._closed and not self._holding():
            # more output waits inside the inflater: take it on the next turn, reading paused
            self._hold_reading()
            self.nsqd.loop.call_soon(self._release)

    def _upgrade(self, upgrade: Upgrade) -> None:
        """After IDENTIFY: its answer goes out as it is, then TLS and/or a codec take over."""
        self._arm_heartbeat()  # IDENTIFY may have changed the interval
        codec: SnappyCodec | DeflateCodec | None = None
        if upgrade.snappy:
            codec = SnappyCodec()
        elif upgrade.deflate_level:
            codec = DeflateCodec(upgrade.deflate_level, max_output=INFLATE_STEP)
        codec_name = "snappy" if upgrade.snappy else f"deflate (level {upgrade.deflate_level})"
        if upgrade.tls or codec is not None:
            self._flush()
        if upgrade.tls:
            self._log_upgrade("TLS")
            if self.parser.take_buffer():
                # the handshake must start after our answer; bytes sent before it are lost
                # (upstream's buffered reader drops them too, and then times out)
                raise FatalError(E_IDENTIFY_FAILED,
                                 "IDENTIFY failed data received before the TLS handshake")
            self._start_tls(codec, codec_name)
            return
        if codec is not None:
            leftover = self.parser.take_buffer()  # already compressed: it goes through the codec
            self._log_upgrade(codec_name)
            self._enable_codec(codec)
            if leftover:
                self._held_raw = bytearray(leftover)
        # the parser stopped after IDENTIFY: what followed runs on the next loop turn
        if self.parser.buffered or self._held_raw:
            self._hold_reading(pause=False)  # bytes arriving meanwhile queue up behind those
            self.nsqd.loop.call_soon(self._release)

    def _log_upgrade(self, what: str) -> None:
        self.nsqd.logger.info("PROTOCOL(V2): [%s] upgrading connection to %s",
                              self.client.remote_address, what)

    def _enable_codec(self, codec: "SnappyCodec | DeflateCodec") -> None:
        if isinstance(codec, SnappyCodec):
            self.client.snappy = True
        else:
            self.client.deflate = True
            self._inflater = codec
        self._compress = codec.compress
        self._decompress = codec.decompress
        self.out.append(OK_FRAME)  # the first compressed frame

    def _start_tls(self, codec: "SnappyCodec | DeflateCodec | None", codec_name: str) -> None:
        """Upgrade after the IDENTIFY answer went out; nothing else runs until it is done."""
        self._hold_reading()  # no byte of the ClientHello may reach the V2 parser
        self._raw_transport = self.transport
        self.transport = None  # and no clear-text frame (a heartbeat) may interleave
        self._task = self.nsqd.loop.create_task(self._tls_handshake(codec, codec_name))

    async def _tls_handshake(self, codec: "SnappyCodec | DeflateCodec | None",
                             codec_name: str) -> None:
        raw = self._raw_transport
        nsqd = self.nsqd
        if raw is None or self._closed:
            self._task = None
            return
        ssl_protocol: list = []  # start_tls makes it the raw transport's protocol at once

        def found() -> None:  # after start_tls's own first callback made the SSL object
            from .tls import close_after_alert

            ssl_protocol.append(raw.get_protocol())
            close_after_alert(ssl_protocol[0])

        nsqd.loop.call_soon(nsqd.loop.call_soon, found)
        try:
            transport = await nsqd.loop.start_tls(
                raw, self, nsqd.tls_context, server_side=True,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - any handshake failure ends the connection
            self._task = None
            from .tls import handshake_failure

            # the refusal behind an alert, not the client's EOF after it
            err = handshake_failure(ssl_protocol[0] if ssl_protocol else None) or err
            if not self.close_requested:
                nsqd.logger.error("client(%s) - %s IDENTIFY failed %s", self.client.remote_address,
                                  E_IDENTIFY_FAILED, err or type(err).__name__)
            self.close_requested = True
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
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            from .tls import TLSInfo  # (loaded with the first TLS client)

            self.client.tls_info = TLSInfo(ssl_object, nsqd.tls_context)
        self.protocol.tls_established()
        self._send_now(OK_FRAME)  # the first frame over TLS
        if codec is not None:
            self._log_upgrade(codec_name)
            self._enable_codec(codec)
            self._flush()
        self._release()

    # --- the auth server -----------------------------------------------------------------------

    async def _auth_query(self, first: bool) -> None:
        auth = self.nsqd.auth
        client = self.client
        assert auth is not None
        common_name = client.tls_info.common_name if client.tls_info is not None else ""
        try:
            state = await auth.query(client.remote_ip, client.tls, client.auth_secret, common_name)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - details go to the log, never to the client
            self._task = None
            if not self._closed:
                # we don't leak the auth server's errors to untrusted clients (upstream)
                self.nsqd.logger.warning("PROTOCOL(V2): [%s] AUTH failed %s",
                                         client.remote_address, err)
                self._fatal(FatalError(E_AUTH_FAILED, "AUTH failed"))
            return
        self._task = None
        if self._closed:
            return
        try:
            self.protocol.auth_answered(state, first)
        except FatalError as err:
            self._fatal(err)
            return
        self._flush()
        self._release()
