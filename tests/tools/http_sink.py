"""A real aiohttp server on its own thread that records every request nsq_to_http makes."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Callable

from aiohttp import web


@dataclass
class Seen:
    method: str
    path: str  # path and raw query string, as sent
    query: dict[str, str]
    body: bytes
    headers: dict[str, str]
    status: int = 0


class HTTPSink:
    """``responder(seen) -> status`` decides each answer (default 200), after ``delay`` s."""

    def __init__(self, responder: Callable[[Seen], int] | None = None, delay: float = 0.0) -> None:
        self.responder = responder or (lambda _seen: 200)
        self.delay = delay  # seconds each answer takes
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._serve, name="http-sink", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("http sink did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self._runner.cleanup())
        self.loop.close()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _handle(self, request: web.Request) -> web.Response:
        seen = Seen(request.method, request.path_qs, dict(request.query), await request.read(),
                    dict(request.headers))
        if self.delay:
            await asyncio.sleep(self.delay)
        with self.lock:
            seen.status = self.responder(seen)
            self.seen.append(seen)
        return web.Response(status=seen.status, text="ok")

    def requests(self) -> list[Seen]:
        with self.lock:
            return list(self.seen)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
