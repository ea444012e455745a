"""The one shape of nsqd, nsqlookupd and nsqadmin's ``main``: parse flags (Go's exit codes),
``--version``, start, run until SIGINT/SIGTERM, close; on uvloop when present.

asyncio is imported when the program runs, not with this module: a daemon may first choose how
it loads (``before_run``, e.g. without OpenSSL: :mod:`.notls`) once its flags are known."""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any, Awaitable, Callable, Coroutine


class Fatal(RuntimeError):
    """A start-up error whose text is upstream's whole FATAL line (``failed to load metadata -
    ...``), not a reason to put after ``failed to instantiate <program> -``."""


async def wait_for_stop_signal() -> None:
    """Return on the first SIGINT or SIGTERM (NSQ's programs exit gracefully on both)."""
    import asyncio

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def run(coro: Coroutine[Any, Any, int]) -> int:
    """Run a server's coroutine on uvloop (cheaper callbacks, smaller connections) or asyncio."""
    import asyncio

    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: int = uvloop.run(coro)
    return result


async def serve(program: str, logger: logging.Logger, start: Callable[[], Awaitable[None]],
                close: Callable[[], Awaitable[None]],
                start_errors: tuple[type[BaseException], ...] = (OSError,),
                after_start: Callable[[], None] | None = None,
                fatal: str = "failed to instantiate {program} - {err}") -> int:
    """``start()``; on a start-up error log upstream's ``failed to instantiate <program> -
    <why>`` (``fatal``), ``close()`` and exit 1; else run until a stop signal, ``close()``,
    exit 0."""
    try:
        await start()
    except start_errors as err:
        logger.critical("%s", err if isinstance(err, Fatal) else fatal.format(program=program, err=err))
        logger.disabled = True  # upstream exits at its FATAL line: nothing follows it
        await close()
        return 1
    if after_start is not None:
        after_start()
    await wait_for_stop_signal()
    await close()
    return 0


def main(program: str, parse_options: Callable[[list[str]], Any],
         serve_options: Callable[[Any], Awaitable[int]], argv: list[str] | None = None,
         before_run: Callable[[Any], None] | None = None) -> int:
    """Parse flags (a FlagError prints and exits as Go's flag package does), print
    ``--version``, else serve until stopped. Returns the exit status."""
    from .. import version_string
    from .flags import FlagError

    args = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_options(args)
    except FlagError as err:
        print(str(err), file=sys.stderr)
        return err.exit_code
    if opts.version:
        print(version_string(program))
        return 0
    if before_run is not None:
        before_run(opts)
    return run(serve_options(opts))  # type: ignore[arg-type]
