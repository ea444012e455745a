"""``nsqd`` console script: parse flags, run the daemon until SIGINT/SIGTERM, exit 0."""

from __future__ import annotations

import gc
import sys

from ..common import daemon
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
    # a port in use, a bad or locked data dir
    return await daemon.serve("nsqd", logger, nsqd.start, nsqd.shutdown,
                              start_errors=(OSError, RuntimeError, ValueError),
                              after_start=release_startup_memory)


def main(argv: list[str] | None = None) -> int:
    return daemon.main("nsqd", parse_options, _serve, argv, before_run=tune_gc)


if __name__ == "__main__":
    sys.exit(main())
