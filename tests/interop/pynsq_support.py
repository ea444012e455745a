"""pynsq helpers for the interop tests: subclasses that *observe* what the client saw (IDENTIFY
responses, heartbeats, error frames) without changing how it talks to nsqd."""

from __future__ import annotations

import asyncio
import time

import nsq
import tornado

from interop.support import wait_until

# pynsq's deflate reader breaks on tornado >= 6.1 (IOStream read buffer changes), whatever the server
assert tornado.version_info[:2] == (6, 0), f"pynsq 0.9.1 interop needs tornado 6.0.x, got {tornado.version}"


class Observed:
    """Mixin: record IDENTIFY responses, heartbeats and error frames a pynsq client receives."""

    def _observe_init(self) -> None:
        self.identify_responses: list[dict] = []
        self.heartbeats: list[float] = []
        self.errors: list[object] = []

    def _on_connection_identify_response(self, conn, data, **kwargs):
        self.identify_responses.append(data)
        return super()._on_connection_identify_response(conn, data, **kwargs)

    def _on_connection_error(self, conn, error, **kwargs):
        self.errors.append(error)
        return super()._on_connection_error(conn, error, **kwargs)

    def heartbeat(self, conn):
        self.heartbeats.append(time.monotonic())


class Reader(Observed, nsq.Reader):
    def __init__(self, *args, **kwargs):
        self._observe_init()
        super().__init__(*args, **kwargs)


class Writer(Observed, nsq.Writer):
    def __init__(self, *args, **kwargs):
        self._observe_init()
        super().__init__(*args, **kwargs)

    def close(self) -> None:
        for conn in list(self.conns.values()):
            conn.close()


class Delivery:
    __slots__ = ("body", "attempts", "id", "at", "message")

    def __init__(self, message) -> None:
        self.body = message.body
        self.attempts = message.attempts
        self.id = message.id
        self.at = time.monotonic()
        self.message = message

    def __repr__(self) -> str:
        return f"Delivery({self.body[:40]!r}, attempts={self.attempts})"


async def connected_writer(address: str, **kwargs) -> Writer:
    writer = Writer([address], **kwargs)
    await wait_until(lambda: any(c.connected() for c in writer.conns.values()), 5,
                     "the pynsq Writer to connect and IDENTIFY")
    return writer


async def publish(writer: Writer, method: str, *args) -> object:
    """Call Writer.pub/mpub/dpub and wait for the response frame nsqd sent back."""
    fut = asyncio.get_running_loop().create_future()

    def callback(conn, data):
        if not fut.done():
            fut.set_result(data)

    getattr(writer, method)(*args, callback=callback)
    return await asyncio.wait_for(fut, 5)
