"""``nsqadmin`` console script: a web UI and JSON API over a cluster's nsqlookupd and nsqd.

nsqadmin keeps no state of its own: every request asks the configured nsqlookupd (or nsqd)
over HTTP. SIGINT/SIGTERM close the listener, send any queued notifications and exit 0.
"""

from __future__ import annotations

import logging
import socket
import ssl
import sys

import aiohttp
from aiohttp import web

from .. import version_string
from ..common.addr import join_host_port, listen_socket
from ..common import daemon
from ..common.gotls import shared_context
from ..common.log import make_logger
from .clusterinfo import ClusterInfo
from .graphite import Graphite
from .http import HTTPServer
from .live import LiveSampler, QuietLog
from .notify import Notifier
from .options import Options, parse_options, validate
from .v1client import V1Client


class NSQAdmin:
    """The daemon: builds the HTTP client, the cluster client, the notifier, the live sampler
    and the HTTP server, hands each what it needs, and closes them in order."""

    def __init__(self, opts: Options, logger: logging.Logger,
                 tls: ssl.SSLContext | None = None) -> None:
        self.opts = opts
        self.logger = logger
        self.tls = tls
        self.http_address = ""
        self._sock: socket.socket | None = None
        self._runner: web.AppRunner | None = None
        self.session: aiohttp.ClientSession | None = None
        self.notifier: Notifier | None = None
        self.live: LiveSampler | None = None

    async def start(self) -> None:
        opts = self.opts
        self.logger.info("%s", version_string("nsqadmin"))
        self._sock = listen_socket(opts.http_address)  # OSError: upstream's "listen (...) failed"
        name = self._sock.getsockname()
        self.http_address = join_host_port(name[0], name[1])
        timeout = aiohttp.ClientTimeout(total=opts.http_client_request_timeout,
                                        sock_connect=opts.http_client_connect_timeout)
        # the notifications' POSTs: verified as Go's default client verifies (https endpoints)
        self.session = aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(ssl=shared_context()))
        client = V1Client(self.session, self.tls, opts.nsqd_auth_secret)
        self.notifier = Notifier(lambda: opts.notification_http_endpoint, self.session,
                                 self.logger)
        self.notifier.start()
        if opts.live_interval > 0:
            quiet = ClusterInfo(client, QuietLog(self.logger, {}))
            self.live = LiveSampler(opts, self.logger, quiet)
            self.live.start()
        server = HTTPServer(opts, self.logger, ClusterInfo(client, self.logger),
                            Graphite(opts, self.logger, V1Client(self.session, self.tls)),
                            self.notifier, self.live)  # (graphite never gets the secret)
        runner = web.AppRunner(server.make_app(), access_log=None,
                               handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        self._runner = runner
        await web.SockSite(runner, self._sock, shutdown_timeout=1.0).start()
        self.logger.info("HTTP: listening on %s", self.http_address)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self.logger.info("HTTP: closing %s", self.http_address)
        if self.live is not None:
            await self.live.close()
        if self.notifier is not None:
            await self.notifier.close(self.opts.http_client_request_timeout)
        if self.session is not None:
            await self.session.close()
        if self._sock is not None:
            self._sock.close()


async def serve(opts: Options) -> int:
    logger = make_logger("nsqadmin", opts.log_prefix, opts.log_level)
    try:
        tls = validate(opts)
    except ValueError as err:
        logger.critical("failed to instantiate nsqadmin - %s", err)
        return 1
    admin = NSQAdmin(opts, logger, tls)
    return await daemon.serve("nsqadmin", logger, admin.start, admin.close)


def main(argv: list[str] | None = None) -> int:
    return daemon.main("nsqadmin", parse_options, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
