"""What every nsqpy server's ``main`` shares: run on uvloop when present, stop on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from typing import Any, Coroutine


async def wait_for_stop_signal() -> None:
    """Return on the first SIGINT or SIGTERM (NSQ's programs exit gracefully on both)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def run(coro: Coroutine[Any, Any, int]) -> int:
    """Run a server's coroutine on uvloop (cheaper callbacks, smaller connections) or asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: int = uvloop.run(coro)
    return result
