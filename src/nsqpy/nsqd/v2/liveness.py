"""Liveness of a V2 connection: heartbeats, the read and write deadlines, and the log lines of
its end, as upstream writes them.

Every ``heartbeat_interval`` the client gets a ``_heartbeat_`` frame; no read for two intervals
closes it (upstream's read deadline), and writes backed up for one interval abort it (the write
deadline: a slow consumer). When the connection is gone, :meth:`Liveness._log_end` says why in
upstream's words: what the read that ended it was for (the protocol magic, a command line, a
command's body) and how it failed. A mixin of :class:`~nsqpy.nsqd.v2.connection.V2Connection`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Callable

from ...protocol.frames import HEARTBEAT_FRAME

if TYPE_CHECKING:
    from ...protocol.commands import CommandParser
    from .client import ClientV2
    from ..nsqd import NSQD

_monotonic = time.monotonic


class Liveness:
    """Heartbeats, deadlines and end-of-connection logging for a V2 connection."""

    # provided by the connection
    nsqd: "NSQD"
    client: "ClientV2"
    parser: "CommandParser"
    transport: asyncio.Transport | None
    magic: bytearray | None
    close_requested: bool
    end_error: str | None
    out: list[bytes]
    _closed: bool
    _last_read: float
    _paused_since: float
    _raw_transport: asyncio.Transport | None
    _heartbeat_handle: asyncio.TimerHandle | None
    _holding: Callable[[], bool]
    _flush: Callable[[], None]
    close_connection: Callable[[], None]

    def _arm_heartbeat(self) -> None:
        if self._heartbeat_handle is not None:
            self._heartbeat_handle.cancel()
            self._heartbeat_handle = None
        interval = self.client.heartbeat_interval
        if interval > 0 and not self._closed:
            self._heartbeat_handle = self.nsqd.loop.call_later(interval, self._on_heartbeat)

    def _on_heartbeat(self) -> None:
        self._heartbeat_handle = None
        if self._closed:
            return
        if self.transport is None:  # TLS handshake under way (it has its own deadline)
            self._arm_heartbeat()
            return
        now = _monotonic()
        hb = self.client.heartbeat_interval
        if self._holding():
            self._last_read = now  # waiting on the auth server, not on the client
        if not self.client.writable and now - self._paused_since > hb:
            self.nsqd.logger.error("client(%s) - write timeout: slow consumer",
                                   self.client.remote_address)
            self.close_requested = True
            self.transport.abort()
            return
        if now - self._last_read > 2 * hb:
            self.end_error = (f"failed to read command - read tcp {self._local_address()}"
                              f"->{self.client.remote_address}: i/o timeout")
            if not self.client.writable:  # nothing more would reach it: don't wait for a drain
                self._closed = self.close_requested = True
                self.transport.abort()
            else:
                self.close_connection()
            return
        self.out.append(HEARTBEAT_FRAME)
        self._flush()
        self._arm_heartbeat()

    def _log_end(self, exc: Exception | None) -> None:
        """Upstream's log lines for a connection's end: what the read that ended it was for
        (the protocol magic, a command line, a command's body) and how it failed."""
        log = self.nsqd.logger
        addr = self.client.remote_address
        if self.close_requested:  # we closed it, for the reason in _end_error if any
            if self.magic is None:
                log.info("PROTOCOL(V2): [%s] exiting ioloop", addr)
                if self.end_error is not None:
                    log.error("client(%s) - %s", addr, self.end_error)
                log.info("PROTOCOL(V2): [%s] exiting messagePump", addr)
            return
        if isinstance(exc, ConnectionResetError):
            cause = f"read tcp {self._local_address()}->{addr}: read: connection reset by peer"
        elif exc is not None:
            cause = str(exc) or type(exc).__name__
        else:
            cause = "EOF"
        if self.magic is not None:
            if cause == "EOF" and self.magic:
                cause = "unexpected EOF"
            log.error("failed to read protocol version - %s", cause)
            return
        if self.client.deflate and exc is None:
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
        log.info("PROTOCOL(V2): [%s] exiting messagePump", addr)

    def _local_address(self) -> str:
        transport = self.transport or self._raw_transport
        sockname = transport.get_extra_info("sockname") if transport is not None else None
        if isinstance(sockname, tuple):
            host, port = sockname[0], sockname[1]
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return str(sockname or "")
