"""Which reader a query gets (option ``mode``; docs/spark.md, "Two modes").

``auto`` asks every nsqd known when the query is defined (``nsqd_tcp_addresses``, and the
producers lookupd lists for the topic) whether it has leases (docs/leases.md's probe). When at
least one answered and every one that answered does, the executors read (``executor``); otherwise
the driver-side reader runs (``driver``), which works with any NSQ server. The choice is logged
at WARNING, so that it shows on the console of a default setup (Spark's Python workers log
WARNING and above to stderr, which local mode prints with the driver's output; INFO never showed),
made once per query definition (``DataSource.schema``, whose instance Spark then pickles to the
runner and the planner, so both build the same reader).
"""

from __future__ import annotations

import logging
from typing import Any

from .nodes import configured_nodes, lookupd_nodes, probe

log = logging.getLogger("nsqpy.spark")


def choose_mode(cfg: Any) -> str:
    if cfg.mode != "auto":
        log.warning("nsq source: %s-side reads (mode=%s)", cfg.mode, cfg.mode)
        return cfg.mode
    nodes = configured_nodes(cfg.nsqd_tcp, cfg.nsqd_http)
    if cfg.lookupd_http:
        nodes += [n for n in lookupd_nodes(cfg.lookupd_http, cfg.topic) or ()
                  if n.tcp not in {m.tcp for m in nodes}]
    with_leases, without = [], []
    for node in nodes:
        reached, node, answer = probe(node, cfg.connection)
        if reached:
            (with_leases if answer is not None else without).append(node.tcp)
    if with_leases and not without:
        log.warning("nsq source: executor-side reads: every nsqd announces leases (%s)", ", ".join(with_leases))
        return "executor"
    if without:
        reason = f"{', '.join(without)} does not announce leases"
    else:
        reason = "no nsqd could be asked whether it has leases"
    log.warning("nsq source: driver-side reader: %s", reason)
    return "driver"
