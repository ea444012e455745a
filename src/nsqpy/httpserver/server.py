"""The listener: accepts connections on a bound socket (TCP or unix, plain or TLS) for an App.

One tick a second, only while connections are open, refreshes the cached ``Date`` value and the
coarse clock connections stamp their deadlines with, and closes the connections whose deadline
passed: no timer per connection, no clock read per request.

Go's ``net/http`` server, as upstream runs it, has no timeouts at all (dead peers are found by
TCP keep-alive probes every 15 s, which we set the same way); the deadlines here only protect
against clients that stay connected and stall: a request head must be complete within
``header_timeout`` of its first byte, a body must not pause longer than ``body_timeout``, and a
keep-alive connection may sit idle (or leave our answers unread) for ``idle_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, Any, Callable

from .connection import HTTPConnection
from .request import App, Request
from .wire import DateCache

if TYPE_CHECKING:
    import ssl

HEADER_TIMEOUT = 60.0
BODY_TIMEOUT = 60.0
IDLE_TIMEOUT = 180.0
#: Go's listeners turn TCP keep-alive on with this period for accepted connections
KEEPALIVE_PERIOD = 15


class HTTPServer:
    """Serves ``app`` on sockets the daemon bound; :meth:`close` stops listening and closes
    every connection (after the answers already written)."""

    def __init__(self, app: App, *, ssl_context: "ssl.SSLContext | None" = None,
                 logger: logging.Logger | None = None,
                 before_write: Callable[[], None] | None = None,
                 header_timeout: float = HEADER_TIMEOUT, body_timeout: float = BODY_TIMEOUT,
                 idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.app = app
        #: run before answers are written: the daemon's request log flushes there, so a client
        #: never holds an answer whose log line is not written yet (Go logs before its
        #: buffered answer leaves)
        self.before_write = before_write
        self.ssl_context = ssl_context
        self.logger = logger
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.idle_timeout = idle_timeout
        self.connections: set[HTTPConnection] = set()
        self.date = DateCache()
        self.now = 0.0
        self._servers: list[asyncio.AbstractServer] = []
        #: the sockets being served, in the order given
        self.sockets: list[socket.socket] = []
        self._tick: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: connections whose answers go out at the end of this loop iteration, together
        self._to_write: list[HTTPConnection] = []

    async def serve(self, sock: socket.socket, backlog: int = 1024) -> None:
        """Accept connections on a bound socket (``AF_INET``/``AF_INET6``/``AF_UNIX``)."""
        loop = self._loop = asyncio.get_running_loop()
        self.now = loop.time()
        factory = self._make_connection
        if sock.family == socket.AF_UNIX:
            server = await loop.create_unix_server(factory, sock=sock, ssl=self.ssl_context,
                                                   backlog=backlog)
        else:
            server = await loop.create_server(factory, sock=sock, ssl=self.ssl_context,
                                              backlog=backlog)
        self._servers.append(server)
        self.sockets.append(sock)

    def _make_connection(self) -> HTTPConnection:
        return HTTPConnection(self)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for server in self._servers:
            try:
                await asyncio.wait_for(server.wait_closed(), 2.0)
            except (asyncio.TimeoutError, OSError):
                pass
        self._servers.clear()
        self.sockets.clear()
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None

    # --- connections ----------------------------------------------------------------------------

    def connection_made(self, conn: HTTPConnection) -> None:
        self.connections.add(conn)
        transport = conn.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None and sock.family != socket.AF_UNIX:
            _keepalive(sock)
        if self._tick is None:
            self._on_tick()

    def write_soon(self, conn: HTTPConnection) -> None:
        """Write ``conn``'s answers once every connection readable in this loop iteration has
        been read: their request log lines then leave in one write before all their answers
        (one log write per request cost a tenth of a ``/ping``)."""
        to_write = self._to_write
        if not to_write:
            (self._loop or asyncio.get_running_loop()).call_soon(self._write_all)
        to_write.append(conn)

    def _write_all(self) -> None:
        to_write, self._to_write = self._to_write, []
        before = self.before_write
        if before is not None:
            before()
        for conn in to_write:
            conn.write_queued = False
            conn.write_out(logged=True)

    def handler_failed(self, request: Request, err: BaseException) -> None:
        """A handler raised: the connection is dropped, as Go drops it after a panic."""
        if self.logger is not None:
            self.logger.error("http: panic serving %s: %s", request.remote_addr, err,
                              exc_info=err)

    def internal_error(self, conn: HTTPConnection, err: BaseException) -> None:
        """A bug of ours surfaced while parsing: logged, and the connection is dropped."""
        if self.logger is not None:
            self.logger.error("http: error serving %s: %r", conn.remote_addr, err, exc_info=err)

    def _on_tick(self) -> None:
        loop = self._loop or asyncio.get_running_loop()
        self.now = now = loop.time()
        self.date.refresh()
        connections = self.connections
        if not connections:
            self._tick = None
            return
        for conn in [c for c in connections if 0.0 < c.deadline < now]:
            conn.timed_out()
        # wake on the next wall-clock second, so Date turns over with the clock
        self._tick = loop.call_later(1.0 - time.time() % 1.0, self._on_tick)


def _keepalive(sock: Any) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_PERIOD)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_PERIOD)
    except OSError:
        pass
