"""Replication installed into an nsqd whose flags ask for it (``--replicate-to``,
``--accept-replicas``); with neither flag nothing of this package is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .failover import Failover, adopt_routes
from .origin import Replicator
from .peer import ReplicaHost

if TYPE_CHECKING:
    from ..nsqd import NSQD


def setup_replication(nsqd: "NSQD") -> None:
    """Before nsqd loads its metadata: the origin side with ``--replicate-to``, and always the
    peer side (which loads the replicas it holds) with its failover and HTTP route."""
    if nsqd.options.replicate_to:
        nsqd.replicator = Replicator(nsqd)
    host = ReplicaHost(nsqd)
    host.load()
    host.failover = Failover(host, nsqd.options.replication_failover_timeout)
    nsqd.replicas = host
    nsqd.http_routes.append(adopt_routes)
