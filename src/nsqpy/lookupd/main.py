"""``nsqlookupd`` console script and the :class:`NSQLookupd` that ties DB, TCP and HTTP together.

Both listeners run on one event loop (uvloop when importable) and share the registration DB
without locks. SIGINT/SIGTERM close the listeners and every client, then the process exits 0.
"""

from __future__ import annotations

import logging
import socket
import sys

from aiohttp import web

from .. import NSQ_COMPAT_VERSION, version_string
from ..common.addr import listen_socket, sock_address
from ..common import daemon
from ..common.log import make_logger
from ..protocol.lookup import encode_response
from ..common.goweb import go_json
from .http import HTTPServer
from .options import Options, parse_options
from .registration_db import RegistrationDB
from .tcp import TCPServer


class NSQLookupd:
    """One nsqlookupd: options, logger, the registration DB and both listeners."""

    def __init__(self, opts: Options, logger: logging.Logger) -> None:
        self.opts = opts
        self.logger = logger
        self.db = RegistrationDB()
        #: level checks hoisted out of the hot paths (the level cannot change at run time)
        self.log_info = logger.isEnabledFor(logging.INFO)
        self.inactive_timeout_ns = round(opts.inactive_producer_timeout * 1e9)
        self.tombstone_lifetime_ns = round(opts.tombstone_lifetime * 1e9)
        self.identify_response = b""
        self.tcp_address = ""
        self.http_address = ""
        self._tcp_sock: socket.socket | None = None
        self._http_sock: socket.socket | None = None
        self._tcp = TCPServer(self)
        self._http_runner: web.AppRunner | None = None

    def bind(self) -> None:
        """Open both listening sockets; OSError/ValueError with upstream's message on failure."""
        for attr, addr in (("_tcp_sock", self.opts.tcp_address),
                           ("_http_sock", self.opts.http_address)):
            setattr(self, attr, listen_socket(addr))  # OSError: upstream's "listen (...) failed"
        assert self._tcp_sock is not None and self._http_sock is not None
        self.tcp_address = sock_address(self._tcp_sock)
        self.http_address = sock_address(self._http_sock)
        # upstream marshals a map, so the keys come out sorted
        self.identify_response = encode_response(go_json({
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
        self.logger.info("TCP: listening on %s", self.tcp_address)
        runner = web.AppRunner(HTTPServer(self).make_app(), access_log=None,
                               handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        self._http_runner = runner
        await web.SockSite(runner, self._http_sock, shutdown_timeout=1.0).start()
        self.logger.info("HTTP: listening on %s", self.http_address)

    async def close(self) -> None:
        if self._tcp_sock is not None:
            await self._tcp.close()
            self.logger.info("TCP: closing %s", self.tcp_address)
        if self._http_runner is not None:
            await self._http_runner.cleanup()
            self.logger.info("HTTP: closing %s", self.http_address)
        for sock in (self._tcp_sock, self._http_sock):
            if sock is not None:
                sock.close()


async def serve(opts: Options) -> int:
    logger = make_logger("nsqlookupd", opts.log_prefix, opts.log_level)
    lookupd = NSQLookupd(opts, logger)
    return await daemon.serve("nsqlookupd", logger, lookupd.start, lookupd.close)


def main(argv: list[str] | None = None) -> int:
    return daemon.main("nsqlookupd", parse_options, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
