"""The :class:`NSQLookupd` that ties DB, TCP and HTTP together (the program is :mod:`.main`).

Both listeners run on one event loop (uvloop when importable) and share one
:class:`~nsqpy.lookupd.state.LookupdState` (the registration DB among it) without locks.
SIGINT/SIGTERM close the listeners and every client, then the process exits 0.
"""

from __future__ import annotations

import logging
import socket

from .. import NSQ_COMPAT_VERSION, version_string
from ..common import daemon
from ..common.addr import listen_socket, sock_address
from ..common.goweb import go_json
from ..common.log import make_logger
from ..httpserver import HTTPServer
from ..protocol.lookup import encode_response
from .http import LookupdHTTP
from .options import Options
from .state import LookupdState
from .tcp import TCPServer


class NSQLookupd:
    """One nsqlookupd: its shared state and both listeners."""

    def __init__(self, opts: Options, logger: logging.Logger) -> None:
        self.opts = opts
        self.logger = logger
        self.state = LookupdState(opts, logger)
        self.db = self.state.db
        self._tcp_sock: socket.socket | None = None
        self._http_sock: socket.socket | None = None
        self._tcp = TCPServer(self.state)
        api = LookupdHTTP(self.state)
        self._http = HTTPServer(api, logger=logger, before_write=api.request_log.flush)

    def bind(self) -> None:
        """Open both listening sockets; OSError/ValueError with upstream's message on failure."""
        for attr, addr in (("_tcp_sock", self.opts.tcp_address),
                           ("_http_sock", self.opts.http_address)):
            setattr(self, attr, listen_socket(addr))  # OSError: upstream's "listen (...) failed"
        assert self._tcp_sock is not None and self._http_sock is not None
        state = self.state
        state.tcp_address = sock_address(self._tcp_sock)
        state.http_address = sock_address(self._http_sock)
        # upstream marshals a map, so the keys come out sorted
        state.identify_response = encode_response(go_json({
            "broadcast_address": self.opts.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": self._http_sock.getsockname()[1],
            "tcp_port": self._tcp_sock.getsockname()[1],
            "version": NSQ_COMPAT_VERSION,
        }, sort_keys=True))

    async def start(self) -> None:
        self.logger.info("%s", version_string("nsqlookupd"))
        self.bind()
        await self._tcp.start(self._tcp_sock)
        self.logger.info("TCP: listening on %s", self.state.tcp_address)
        assert self._http_sock is not None
        await self._http.serve(self._http_sock)
        self.logger.info("HTTP: listening on %s", self.state.http_address)

    async def close(self) -> None:
        if self._tcp_sock is not None:
            await self._tcp.close()
            self.logger.info("TCP: closing %s", self.state.tcp_address)
        if self._http_sock is not None:
            await self._http.close()
            self.logger.info("HTTP: closing %s", self.state.http_address)
        for sock in (self._tcp_sock, self._http_sock):
            if sock is not None:
                sock.close()


async def serve(opts: Options) -> int:
    logger = make_logger("nsqlookupd", opts.log_prefix, opts.log_level)
    lookupd = NSQLookupd(opts, logger)
    # upstream's nsqlookupd passes the error without a verb for it; Go's fmt says so
    return await daemon.serve("nsqlookupd", logger, lookupd.start, lookupd.close,
                              fatal="failed to instantiate {program}%!(EXTRA *errors.errorString={err})")
