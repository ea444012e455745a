"""Shared pieces of the interop suite: third-party NSQ clients against our nsqd subprocess.

pynsq runs on tornado's IOLoop, which (tornado 6.0) wraps an asyncio loop. Every pynsq test gets a
fresh asyncio loop, so connections, periodic callbacks and reconnect timers left behind by one test
die with its loop instead of firing in the next one.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import pytest


@pytest.fixture
def tornado_run():
    """Run a coroutine function on a fresh asyncio loop that tornado's IOLoop wraps.

    ``tornado_run(main, timeout)`` returns ``main()``'s result or fails the test when the hard
    deadline passes. pynsq objects must be created inside ``main`` (they bind ``IOLoop.current()``).
    """
    import tornado.ioloop

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    io_loop = tornado.ioloop.IOLoop.current()  # AsyncIOMainLoop bound to ``loop``

    def run(main: Callable[[], Awaitable], timeout: float):
        try:
            return loop.run_until_complete(asyncio.wait_for(main(), timeout))
        except asyncio.TimeoutError:
            raise AssertionError(f"pynsq scenario exceeded its {timeout}s deadline") from None

    try:
        yield run
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        io_loop.close(all_fds=True)  # closes every socket pynsq left open, and the asyncio loop
        asyncio.set_event_loop(None)
