"""Drain a channel with a running query, then stop it: AvailableNow for PySpark 4.0 and 4.1.

Before PySpark 4.2, Spark runs ``trigger(availableNow=True)`` on a Python source as one micro-batch
it never commits to the source (see :mod:`nsqpy.spark._compat`). The driver can get the same result
from outside the query: run it with the default (or a processingTime) trigger and stop it once nsqd
shows the channel empty *and* nothing in flight. The source FINs a message only after Spark
committed its batch, and it reads ahead only what it holds in flight, so "nothing queued, nothing
in flight" means every message that was waiting has been written and committed. Works on every
PySpark 4.x (and Spark Connect: it needs nothing but ``query.stop()``).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from .source import SourceConfig, backlog_parts


def stop_when_drained(
    query: Any,
    options: Mapping[str, str],
    timeout: float | None = None,
    poll_interval: float = 0.5,
    settle: int = 2,
) -> bool:
    """Stop ``query`` once its channel has nothing queued and nothing in flight; True if drained.

    ``options`` are the source's options (as given to ``readStream.format("nsq")``); the channel's
    state comes from nsqd's ``/stats`` (nodes from ``lookupd_http_addresses`` or
    ``nsqd_http_addresses``, one of which is needed). The empty state must be seen ``settle`` polls in
    a row. On ``timeout`` the query is left running and False is returned. A query that failed
    raises its exception; one that ended by itself returns whether the channel was drained.
    """
    cfg = SourceConfig.from_options(dict(options))
    if not cfg.lookupd_http and not cfg.nsqd_http:
        raise ValueError("stop_when_drained needs lookupd_http_addresses or nsqd_http_addresses in the options")
    deadline = None if timeout is None else time.monotonic() + timeout
    empty_polls = 0
    while True:
        if not query.isActive:
            err = query.exception()
            if err is not None:
                raise err
            return _drained(cfg)
        empty_polls = empty_polls + 1 if _drained(cfg) else 0
        if empty_polls >= settle:
            query.stop()
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(poll_interval)


def _drained(cfg: SourceConfig) -> bool:
    parts = backlog_parts(cfg, strict=True)
    return parts is not None and parts == (0, 0)


__all__ = ["stop_when_drained"]
