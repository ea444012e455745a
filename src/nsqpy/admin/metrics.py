"""nsqadmin's Prometheus ``/metrics`` (an nsqpy addition; ``--metrics=false`` leaves it
unrouted): the cluster totals nsqadmin aggregates for its pages, per topic and per channel summed
over every nsqd, with the nodes it found and how many of them failed to answer.

Each scrape asks the lookupds (or the ``--nsqd-http-address`` list) for the nodes and every node
for its ``/stats`` (without clients), exactly as the topics page does, so a Prometheus that
scrapes only nsqadmin sees the whole cluster. Per-node detail is better scraped from each nsqd's
own ``/metrics``. Names, labels and example queries: docs/metrics.md.
"""

from __future__ import annotations

from typing import Any

from .. import NSQ_COMPAT_VERSION
from ..common.prometheus import Exposition, labels, process_metrics
from .clusterinfo import ClusterInfo, UpstreamError

_TOPIC_KEYS = ("message_count", "depth", "backend_depth")
_CHANNEL_KEYS = ("message_count", "requeue_count", "timeout_count", "depth", "backend_depth",
                 "in_flight_count", "deferred_count")


async def render(opts: Any, ci: ClusterInfo) -> bytes:
    """One scrape: the cluster as nsqadmin sees it now, in Prometheus' text format."""
    exp = Exposition()
    exp.single("nsqadmin_info", "gauge", "Constant 1, labelled with nsqadmin's version.", 1,
               labels(version=NSQ_COMPAT_VERSION))
    errors: list[str] = []
    producers: list[Any] = []
    topic_list: list[Any] = []
    channel_map: dict[str, Any] = {}
    try:
        found = await ci.producers(opts.lookupd_http_address, opts.nsqd_http_address)
        producers = found.value
        errors.extend(found.errors)
        if producers:
            stats = await ci.nsqd_stats(producers, "", "", include_clients=False)
            topic_list, channel_map = stats.value
            errors.extend(stats.errors)
    except UpstreamError as err:
        errors.append(str(err))
    exp.single("nsqadmin_upstream_errors", "gauge",
               "Lookupds or nsqd nodes that failed to answer during this scrape.", len(errors))
    exp.single("nsqadmin_nodes", "gauge", "nsqd nodes in the cluster.", len(producers))
    node_info = exp.gauge("nsqadmin_node_info", "Constant 1 per nsqd node, with its identity.")
    node_topics = exp.gauge("nsqadmin_node_topics", "Topics the node has registered.")
    for p in producers:
        lp = labels(node=p.http_address, hostname=p.hostname, version=p.version)
        node_info.add(lp, 1)
        node_topics.add(labels(node=p.http_address), len(p.topics or ()))

    topics: dict[str, dict[str, int]] = {}
    for ts in topic_list:
        agg = topics.setdefault(ts.topic_name, dict.fromkeys(_TOPIC_KEYS + ("nodes",), 0))
        for key in _TOPIC_KEYS:
            agg[key] += ts.counts[key]
        agg["nodes"] += 1
    channels = sorted(channel_map.values(), key=lambda c: (c.topic_name, c.channel_name))
    exp.single("nsqadmin_topics", "gauge", "Topics across the cluster.", len(topics))
    exp.single("nsqadmin_channels", "gauge", "Channels across the cluster.", len(channels))

    cluster = exp.family("nsqadmin_cluster_messages_total", "counter",
                         "Messages published, summed over every node's topics.")
    cluster.add("", sum(t["message_count"] for t in topics.values()))
    for name, key, help_text in (
            ("nsqadmin_cluster_depth", "depth", "Messages queued in all topics and channels."),
            ("nsqadmin_cluster_in_flight", "in_flight_count", "Messages in flight, all channels."),
            ("nsqadmin_cluster_deferred", "deferred_count", "Deferred messages, all channels.")):
        total = sum(c.counts[key] for c in channels)
        if key == "depth":
            total += sum(t["depth"] for t in topics.values())
        exp.single(name, "gauge", help_text, total)
    exp.single("nsqadmin_cluster_clients", "gauge", "Consumers connected, all channels.",
               sum(c.client_count for c in channels))

    t_msgs = exp.counter("nsqadmin_topic_messages_total", "Messages published to the topic, all nodes.")
    t_depth = exp.gauge("nsqadmin_topic_depth", "Messages queued in the topic, all nodes.")
    t_backend = exp.gauge("nsqadmin_topic_backend_depth", "Topic messages on disk, all nodes.")
    t_nodes = exp.gauge("nsqadmin_topic_nodes", "Nodes that have the topic.")
    for name in sorted(topics):
        agg = topics[name]
        lt = f'{{topic="{name}"}}'
        t_msgs.add(lt, agg["message_count"])
        t_depth.add(lt, agg["depth"])
        t_backend.add(lt, agg["backend_depth"])
        t_nodes.add(lt, agg["nodes"])

    fams = {
        "message_count": exp.counter("nsqadmin_channel_messages_total",
                                     "Messages the channel received, all nodes."),
        "requeue_count": exp.counter("nsqadmin_channel_requeued_total",
                                     "Messages requeued on the channel, all nodes."),
        "timeout_count": exp.counter("nsqadmin_channel_timed_out_total",
                                     "Messages that timed out on the channel, all nodes."),
        "depth": exp.gauge("nsqadmin_channel_depth", "Messages queued in the channel, all nodes."),
        "backend_depth": exp.gauge("nsqadmin_channel_backend_depth",
                                   "Channel messages on disk, all nodes."),
        "in_flight_count": exp.gauge("nsqadmin_channel_in_flight",
                                     "Messages in flight on the channel, all nodes."),
        "deferred_count": exp.gauge("nsqadmin_channel_deferred",
                                    "Deferred messages on the channel, all nodes."),
    }
    c_clients = exp.gauge("nsqadmin_channel_clients", "Consumers of the channel, all nodes.")
    for c in channels:
        lc = f'{{topic="{c.topic_name}",channel="{c.channel_name}"}}'
        for key in _CHANNEL_KEYS:
            fams[key].add(lc, c.counts[key])
        c_clients.add(lc, c.client_count)
    exp.extra.append(process_metrics())
    return exp.render()
