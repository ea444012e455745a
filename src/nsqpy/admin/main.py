"""``nsqadmin`` console script: a web UI and JSON API over a cluster's nsqlookupd and nsqd.

nsqadmin keeps no state of its own: every request asks the configured nsqlookupd (or nsqd)
over HTTP. SIGINT/SIGTERM close the listener, send any queued notifications and exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from typing import Any

import aiohttp
from aiohttp import web

from .. import version_string
from ..common.addr import join_host_port, listen_socket
from ..common import daemon
from ..common.log import make_logger
from ..common.goweb import go_json
from .clusterinfo import ClusterInfo
from .http import HTTPServer
from .live import LiveSampler, QuietLog
from .options import Options, parse_options, validate

#: notifications waiting to be sent; beyond this an admin action's notification is dropped
NOTIFY_BACKLOG = 1000


class Notifier:
    """POSTs admin-action documents to ``--notification-http-endpoint``, one at a time, in the
    background: an admin action never waits for (or fails because of) its notification."""

    def __init__(self, admin: "NSQAdmin") -> None:
        self.admin = admin
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(NOTIFY_BACKLOG)
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    def send(self, doc: dict[str, Any]) -> None:
        try:
            self.queue.put_nowait(doc)
        except asyncio.QueueFull:
            self.admin.logger.error("notification queue full, dropping %s", doc.get("action"))

    async def _run(self) -> None:
        while True:
            doc = await self.queue.get()
            if doc is None:
                return
            endpoint = self.admin.opts.notification_http_endpoint
            session = self.admin.session
            assert session is not None  # created before the notifier starts
            self.admin.logger.info("POSTing notification to %s", endpoint)
            try:
                async with session.post(
                        endpoint, data=go_json(doc),
                        headers={"Content-Type": "application/json"}) as resp:
                    await resp.read()
            except Exception as err:
                self.admin.logger.error("failed to POST notification - %s", err)

    async def close(self, timeout: float) -> None:
        if self.task is None:
            return
        try:
            self.queue.put_nowait(None)
        except asyncio.QueueFull:
            self.task.cancel()
        try:
            await asyncio.wait_for(self.task, timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self.admin.logger.error("notifications still queued at exit were not sent")


class NSQAdmin:
    def __init__(self, opts: Options, logger: logging.Logger) -> None:
        self.opts = opts
        self.logger = logger
        self.http_address = ""
        self.notifier = Notifier(self)
        self._sock: socket.socket | None = None
        self._runner: web.AppRunner | None = None
        self.session: aiohttp.ClientSession | None = None
        self.live: LiveSampler | None = None

    async def start(self) -> None:
        opts = self.opts
        self.logger.info("%s", version_string("nsqadmin"))
        self._sock = listen_socket(opts.http_address)  # OSError: upstream's "listen (...) failed"
        name = self._sock.getsockname()
        self.http_address = join_host_port(name[0], name[1])
        timeout = aiohttp.ClientTimeout(total=opts.http_client_request_timeout,
                                        sock_connect=opts.http_client_connect_timeout)
        self.session = aiohttp.ClientSession(timeout=timeout)
        self.notifier.start()
        ci = ClusterInfo(self.session, self.logger)
        if opts.live_interval > 0:
            self.live = LiveSampler(self, ClusterInfo(self.session, QuietLog(self.logger, {})))
            self.live.start()
        runner = web.AppRunner(HTTPServer(self, ci).make_app(), access_log=None,
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
        await self.notifier.close(self.opts.http_client_request_timeout)
        if self.session is not None:
            await self.session.close()
        if self._sock is not None:
            self._sock.close()


async def serve(opts: Options) -> int:
    logger = make_logger("nsqadmin", opts.log_prefix, opts.log_level)
    try:
        validate(opts)
    except ValueError as err:
        logger.critical("failed to instantiate nsqadmin - %s", err)
        return 1
    admin = NSQAdmin(opts, logger)
    return await daemon.serve("nsqadmin", logger, admin.start, admin.close)


def main(argv: list[str] | None = None) -> int:
    return daemon.main("nsqadmin", parse_options, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
