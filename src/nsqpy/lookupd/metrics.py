"""nsqlookupd's Prometheus ``/metrics`` (an nsqpy addition; ``--metrics=false`` leaves it
unrouted): the nsqd peers it knows, the topics and channels they registered, how many producers
each topic has as ``/lookup`` would answer, and the registration churn since start.
Names, labels and example queries: docs/metrics.md.
"""

from __future__ import annotations

import time

from .. import NSQ_COMPAT_VERSION
from ..common.prometheus import Exposition, labels, process_metrics
from .registration_db import filter_active
from .state import LookupdState


def render(lookupd: LookupdState) -> bytes:
    db = lookupd.db
    now = time.time_ns()
    exp = Exposition()
    http_port = lookupd.http_address.rpartition(":")[2]
    tcp_port = lookupd.tcp_address.rpartition(":")[2]
    exp.single("nsqlookupd_info", "gauge", "Constant 1, labelled with the lookupd's identity.", 1,
               labels(version=NSQ_COMPAT_VERSION, broadcast_address=lookupd.opts.broadcast_address,
                      tcp_port=tcp_port, http_port=http_port))
    exp.single("nsqlookupd_tcp_connections", "gauge", "Open TCP connections from nsqd nodes.",
               lookupd.tcp_clients)

    topics = sorted(k for k in db.find_registrations("topic", "*", ""))
    channels = sorted(k for k in db.find_registrations("channel", "*", "*"))
    exp.single("nsqlookupd_topics", "gauge", "Topics registered.", len(topics))
    exp.single("nsqlookupd_channels", "gauge", "Channels registered.", len(channels))

    peers = filter_active(db.find_producers("client", "", ""), lookupd.inactive_timeout_ns, 0,
                          now)
    exp.single("nsqlookupd_producers", "gauge",
               "nsqd nodes identified and active (what /nodes lists).", len(peers))
    seen = exp.gauge("nsqlookupd_producer_last_update_seconds",
                     "When the node last sent IDENTIFY or PING (unix time).")
    for p in peers:
        peer = p.peer
        seen.add(labels(broadcast_address=peer.broadcast_address, hostname=peer.hostname,
                        tcp_port=str(peer.tcp_port), http_port=str(peer.http_port),
                        version=peer.version), peer.last_update / 1e9)

    active = exp.gauge("nsqlookupd_topic_producers",
                       "Producers of the topic that /lookup returns (active, not tombstoned).")
    tomb = exp.gauge("nsqlookupd_topic_tombstoned_producers",
                     "Producers of the topic tombstoned within --tombstone-lifetime.")
    lifetime = lookupd.tombstone_lifetime_ns
    for reg in topics:
        producers = list(db.producers_of(reg).values())
        lt = f'{{topic="{reg[1]}"}}'
        active.add(lt, len(filter_active(producers, lookupd.inactive_timeout_ns, lifetime, now)))
        tomb.add(lt, sum(1 for p in producers if p.is_tombstoned(lifetime, now)))
    chan = exp.gauge("nsqlookupd_channel_producers", "Producers that registered the channel.")
    for reg in channels:
        chan.add(f'{{topic="{reg[1]}",channel="{reg[2]}"}}', len(db.producers_of(reg)))

    churn = exp.counter("nsqlookupd_registrations_total",
                        "Producer registrations added (REGISTER, IDENTIFY) and removed "
                        "(UNREGISTER, disconnect), by category (client, topic, channel).")
    for (category, action), count in sorted(db.churn.items()):
        churn.add(labels(category=category, action=action), count)
    exp.extra.append(process_metrics())
    return exp.render()
