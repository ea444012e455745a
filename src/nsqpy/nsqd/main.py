"""``nsqd`` console script: parse flags, run the daemon until SIGINT/SIGTERM, exit 0."""

from __future__ import annotations

import gc
import sys

from .. import version_string
from ..common.daemon import run, wait_for_stop_signal
from ..common.flags import FlagError
from ..common.log import make_logger
from .options import parse_options


def tune_gc() -> None:
    """Queued messages are GC-untracked tuples; raise thresholds so young-gen sweeps stay rare."""
    gc.set_threshold(50_000, 50, 100)


def release_startup_memory() -> None:
    """After imports and start-up: freeze what lives forever and give freed heap back to the OS."""
    gc.collect()
    gc.freeze()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


async def _serve(opts) -> int:
    from .nsqd import NSQD

    logger = make_logger("nsqd", opts.log_prefix, opts.log_level)
    nsqd = NSQD(opts, logger)
    try:
        await nsqd.start()
    except (OSError, RuntimeError, ValueError) as err:  # a port in use, a bad or locked data dir
        logger.critical("failed to start - %s", err)
        await nsqd.shutdown()
        return 1
    release_startup_memory()
    await wait_for_stop_signal()
    await nsqd.shutdown()
    return 0


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_options(args)
    except FlagError as err:
        print(str(err), file=sys.stderr)
        raise SystemExit(err.exit_code)
    if opts.version:
        print(version_string("nsqd"))
        return
    tune_gc()
    raise SystemExit(run(_serve(opts)))


if __name__ == "__main__":
    main()
