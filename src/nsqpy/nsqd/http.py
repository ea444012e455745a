"""nsqd's HTTP API (placeholder: /ping only, the full API is being written)."""
from __future__ import annotations

from aiohttp import web

from ..common.addr import split_host_port


async def start_http(nsqd, address: str):
    app = web.Application()

    async def ping(request):
        return web.Response(text="OK")

    app.router.add_get("/ping", ping)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = split_host_port(address)
    site = web.TCPSite(runner, host or None, port, reuse_address=True)
    await site.start()
    actual = site._server.sockets[0].getsockname()[1]
    nsqd.logger.info("HTTP: listening on %s:%d", host, actual)
    return runner, actual
