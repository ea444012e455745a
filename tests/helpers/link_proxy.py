"""A TCP proxy between a replication origin and its peer, for the chaos tests: the link alone can
be cut while both nsqd (and the peer's probes of the origin's /ping) stay untouched.

Run as ``python link_proxy.py LISTEN_PORT TARGET_HOST:TARGET_PORT``; prints ``ready`` once it
listens. Signals steer it (a test owns the PID it started):

* SIGUSR1 - pause: stop forwarding in both directions (the data waits in the kernel buffers,
  as on a network that drops everything for a while); new connections wait too;
* SIGUSR2 - resume;
* SIGHUP  - drop: abort every connection it carries (both sides see a reset).
"""

from __future__ import annotations

import asyncio
import signal
import sys


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.writers: set[asyncio.StreamWriter] = set()

    async def pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self.flowing.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.writers.update((writer, up_writer))
        try:
            await asyncio.gather(self.pump(reader, up_writer), self.pump(up_reader, writer))
        finally:
            self.writers.difference_update((writer, up_writer))

    def drop(self) -> None:
        for w in list(self.writers):
            transport = w.transport
            if transport is not None:
                transport.abort()
        self.writers.clear()


async def main(listen_port: int, target: str) -> None:
    host, port = target.rsplit(":", 1)
    proxy = Proxy((host, int(port)))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, proxy.flowing.clear)
    loop.add_signal_handler(signal.SIGUSR2, proxy.flowing.set)
    loop.add_signal_handler(signal.SIGHUP, proxy.drop)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", listen_port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
