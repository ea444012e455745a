"""A server on the HTTP layer in its own process (``python ping_server.py``): ``GET /ping`` and
``GET /connections`` (how many are open); prints its port, serves until SIGTERM. For tests that
need more file descriptors than one process may hold for both ends."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys

import uvloop

from nsqpy.httpserver import Endpoint, Head, HTTPServer

OK = Head(200)


class App:
    def __init__(self) -> None:
        self.server: HTTPServer | None = None
        self.ping = Endpoint(lambda request: (OK, b"OK"))
        self.count = Endpoint(lambda request: (OK, b"%d" % len(self.server.connections)))

    def resolve(self, request):
        return self.count if request.path == "/connections" else self.ping


async def main() -> None:
    app = App()
    server = app.server = HTTPServer(app)
    sock = socket.create_server(("127.0.0.1", 0), backlog=4096)
    await server.serve(sock)
    print(sock.getsockname()[1], flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.close()


if __name__ == "__main__":
    uvloop.run(main())
    sys.exit(0)
