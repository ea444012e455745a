"""``nsqd`` console script: the whole command line, then the daemon until SIGINT/SIGTERM, exit 0.

The command line is upstream's flags (``options.py``) plus each feature's own, marked as nsqpy
additions: the lifecycle controls, replication, leases and Prometheus ``/metrics``.

Only what the flags ask for is loaded: without a flag that can need TLS (``--tls-cert``,
``--tls-key``, ``--tls-required``, ``--auth-http-address``, ``--replication-tls``) the event
loop is loaded without OpenSSL (:mod:`nsqpy.common.notls`), as nsqlookupd's is; the flags are
parsed before asyncio is imported so that this can be chosen.
"""

from __future__ import annotations

import gc
import sys

from ..common import daemon
from ..common.flags import FlagError, FlagSet, reject_unimplemented
from ..common.log import make_logger
from .auth.options import auth_flags, validate_auth
from .history.options import history_flags, validate_history
from .leases.options import lease_flags, validate_leases
from .lifecycle.options import lifecycle_flags, validate_lifecycle
from .options import Options, check_options, normalize_argv, start_up_errors, upstream_flagset
from .replication.options import replication_flags, validate_replication
from .stats.prometheus import metrics_flags


def build_flagset() -> FlagSet:
    fs = upstream_flagset()
    fs.add(*replication_flags(), *metrics_flags(), *lifecycle_flags(), *lease_flags(),
           *history_flags(), *auth_flags())
    return fs


def parse_options(argv: list[str]) -> Options:
    """Parse and validate nsqd's command line; FlagError describes any problem."""
    fs = build_flagset()
    values, explicit, positional = fs.parse(normalize_argv(argv))
    if positional:
        raise FlagError(f"unexpected arguments: {' '.join(positional)}")
    if values["version"]:
        return Options(values, explicit)
    reject_unimplemented(fs, explicit, values)
    check_options(values, explicit)
    validate_lifecycle(values, explicit)
    validate_leases(values)
    validate_history(values)
    validate_auth(values)
    validate_replication(values, explicit)
    return Options(values, explicit)


def tune_gc() -> None:
    """Young collections every 5,000 new containers, not CPython's 700, nor more.

    A queued message is a tuple of atomic values: tracked when made, untracked by the first
    young collection that sees it, never looked at again. That first look costs a few cache
    misses per message (the tuple, its id and body) unless it comes while they are still in the
    cache: at 50,000 a young pass over a burst of publishes took 20 ms (70-120 ms pauses with
    1M queued, issue #32); at 5,000 the passes are short and cheaper per message, and still
    rare next to the 700 that costs a pass per few requests."""
    gc.set_threshold(5_000, 50, 100)


def may_need_tls(opts: Options) -> bool:
    """Whether a flag can make this nsqd speak TLS (serve it, or reach a server over it)."""
    return bool(opts.tls_cert or opts.tls_key or opts.tls_required != "false"
                or any(opts.auth_http_address) or opts.values.get("replication_tls"))


def before_run(opts: Options) -> None:
    tune_gc()
    if not may_need_tls(opts):
        from ..common.notls import load_event_loop_without_tls

        load_event_loop_without_tls()


def release_startup_memory() -> None:
    """After imports and start-up: freeze what lives forever and give freed heap back to the OS.

    The full collection here (8-11 ms over start-up's objects) is start-up's, not a pause of the
    running daemon: the collector's callbacks are set aside for it, so the pauses ``/stats``
    reports (``gc_pause_usec_*``) are those of the daemon at work."""
    callbacks = gc.callbacks[:]
    gc.callbacks.clear()
    try:
        gc.collect()
        gc.freeze()
    finally:
        gc.callbacks.extend(callbacks)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


async def _serve(opts: Options) -> int:
    from .nsqd import NSQD
    from .server import Server

    logger = make_logger("nsqd", opts.log_prefix, opts.log_level)
    servers: list[Server] = []

    async def start() -> None:
        problem = start_up_errors(opts.values)  # before NSQD, which cannot take them
        if problem:
            raise RuntimeError(problem)
        servers.append(Server(NSQD(opts, logger)))
        await servers[0].start()

    async def shutdown() -> None:
        if servers:
            await servers[0].shutdown()

    # a port in use, a bad or locked data dir, an option out of range
    return await daemon.serve("nsqd", logger, start, shutdown,
                              start_errors=(OSError, RuntimeError, ValueError),
                              after_start=release_startup_memory)


def main(argv: list[str] | None = None) -> int:
    return daemon.main("nsqd", parse_options, _serve, argv, before_run=before_run)


if __name__ == "__main__":
    sys.exit(main())
