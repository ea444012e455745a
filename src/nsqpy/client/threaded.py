"""An event loop on its own thread, for callers that are not asyncio code (Spark readers,
WSGI apps, scripts) but want the client's connections.

The connection lives on the loop thread; the caller's thread receives messages through a
callback (typically ``queue.Queue.put``) and answers with the ``*_threadsafe`` methods::

    io = LoopThread()
    inbox: queue.Queue = queue.Queue()
    conn = io.run(subscribe("127.0.0.1", 4150, "topic", "channel", on_message=inbox.put))
    conn.ready_threadsafe(100)
    msg = inbox.get(); ...; msg.finish_threadsafe()
    io.run(conn.start_close); conn.close_threadsafe(); io.stop()
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Callable, Coroutine, TypeVar

from .connection import NSQConnection
from .message import Message, MessageBatch
from .options import ConnectionOptions

T = TypeVar("T")


class LoopThread:
    """A daemon thread running one event loop until :meth:`stop`."""

    def __init__(self, name: str = "nsqpy-io") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def run(self, work: Coroutine[Any, Any, T] | Callable[[], Any], timeout: float | None = None) -> Any:
        """Run a coroutine, or call a function (awaiting what it returns), on the loop thread,
        and wait here for the result.

        Pass methods that touch the connection as functions (``io.run(conn.start_close)``):
        they must run on the loop thread, not merely be awaited there.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run() would deadlock on its own thread")
        coro: Coroutine[Any, Any, Any] = work if inspect.iscoroutine(work) else _call(work)  # type: ignore[arg-type]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule a plain function on the loop thread (fire and forget)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self, timeout: float = 5.0) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)


async def _call(fn: Callable[[], Any]) -> Any:
    result = fn()
    if inspect.isawaitable(result):
        result = await result
    return result


async def subscribe(
    host: str,
    port: int,
    topic: str,
    channel: str,
    *,
    on_message: Callable[[Message], None] | None = None,
    on_messages: Callable[[MessageBatch], None] | None = None,
    on_close: Callable[[NSQConnection, BaseException | None], None] | None = None,
    options: ConnectionOptions | None = None,
) -> NSQConnection:
    """Connect, IDENTIFY and SUB; the connection starts at RDY 0 (nothing arrives yet).
    Messages come one by one to ``on_message`` or one read's worth at a time to ``on_messages``."""
    conn = NSQConnection(host, port, options, on_message=on_message, on_messages=on_messages,
                         on_close=on_close)
    try:
        await conn.connect()
        await conn.subscribe(topic, channel)
    except BaseException:
        conn.abort()
        raise
    return conn
