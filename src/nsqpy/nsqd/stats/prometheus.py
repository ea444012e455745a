"""nsqd's Prometheus ``/metrics`` (an nsqpy addition; ``--metrics=false`` leaves it unrouted).

Every counter and gauge of ``/stats`` becomes one metric family with ``topic``/``channel``
(and, per consumer, ``client_id``/``hostname``/``remote_address``) labels, rather than one
metric name per topic as statsd keys have it. The values come from the same snapshot functions
``/stats`` uses (:mod:`nsqpy.nsqd.stats.snapshot`), so both endpoints always agree. Names, labels and
example queries: docs/metrics.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ... import NSQ_COMPAT_VERSION
from ...common.flags import Flag, extensions
from ...common.prometheus import CONTENT_TYPE, Exposition, Family, labels, process_metrics
from ..auth.needs import NODE_STRICT
from . import snapshot as nsq_stats

if TYPE_CHECKING:
    from ..nsqd import NSQD


def metrics_flags() -> list[Flag]:
    return extensions(
        Flag("metrics", True, "serve Prometheus metrics at GET /metrics on the HTTP(S) listeners "
             "(nsqpy addition; --metrics=false to turn off)", kind="bool"),
    )


def backend_bytes(backend: Any) -> int:
    """Unread bytes of a disk queue from its read/write positions, O(1) per queue.

    Files between the read and the write file count as ``--max-bytes-per-file`` (a file rolls
    before it would pass that size, so this overstates by less than one message per file).
    Ephemeral queues (``DummyQueue``) keep nothing: 0.
    """
    try:
        rfile, wfile = backend.read_file_num, backend.write_file_num
        rpos, wpos = backend.read_pos, backend.write_pos
    except AttributeError:
        return 0
    if rfile == wfile:
        return max(0, wpos - rpos)
    return max(0, backend.max_bytes_per_file - rpos) \
        + (wfile - rfile - 1) * backend.max_bytes_per_file + wpos


class _Families:
    """The per-topic, per-channel and per-client families of one scrape."""

    def __init__(self, exp: Exposition) -> None:
        g, c = exp.gauge, exp.counter
        self.t_msgs = c("nsqd_topic_messages_total", "Messages published to the topic.")
        self.t_bytes = c("nsqd_topic_message_bytes_total", "Bytes of messages published to the topic.")
        self.t_depth = g("nsqd_topic_depth", "Messages queued in the topic (memory + disk).")
        self.t_backend = g("nsqd_topic_backend_depth", "Messages in the topic's disk queue.")
        self.t_backend_bytes = g("nsqd_topic_backend_bytes",
                                 "Unread bytes in the topic's disk queue (estimate, see docs).")
        self.t_paused = g("nsqd_topic_paused", "1 when the topic is paused.")
        self.t_e2e = exp.family("nsqd_topic_e2e_processing_latency_seconds", "summary",
                                "End-to-end processing latency quantiles over the topic's "
                                "channels (--e2e-processing-latency-percentile; sliding window, "
                                "no _sum/_count).")
        self.h_msgs = g("nsqd_history_messages", "Messages the topic's history retains.")
        self.h_bytes = g("nsqd_history_bytes", "Bytes of the topic's history segments.")
        self.h_segments = g("nsqd_history_segments", "Segment files of the topic's history.")
        self.h_oldest = g("nsqd_history_oldest_timestamp_seconds",
                          "Timestamp of the oldest retained message (unix time; 0: none).")
        self.c_msgs = c("nsqd_channel_messages_total", "Messages the channel received.")
        self.c_requeue = c("nsqd_channel_requeued_total", "Messages requeued (REQ) on the channel.")
        self.c_timeout = c("nsqd_channel_timed_out_total", "In-flight messages that timed out.")
        self.c_depth = g("nsqd_channel_depth", "Messages queued in the channel (memory + disk).")
        self.c_backend = g("nsqd_channel_backend_depth", "Messages in the channel's disk queue.")
        self.c_backend_bytes = g("nsqd_channel_backend_bytes",
                                 "Unread bytes in the channel's disk queue (estimate, see docs).")
        self.c_inflight = g("nsqd_channel_in_flight", "Messages in flight to consumers.")
        self.c_deferred = g("nsqd_channel_deferred", "Deferred messages (DPUB, REQ with delay).")
        self.c_clients = g("nsqd_channel_clients", "Consumers connected to the channel.")
        self.c_paused = g("nsqd_channel_paused", "1 when the channel is paused.")
        self.c_leases = g("nsqd_channel_leases", "Consumption leases on the channel (--leases).")
        self.c_lease_held = g("nsqd_channel_lease_held",
                              "In-flight messages held by the channel's leases (--leases).")
        self.c_e2e = exp.family("nsqd_channel_e2e_processing_latency_seconds", "summary",
                                "End-to-end processing latency quantiles of the channel.")
        self.c_e2e_n = g("nsqd_channel_e2e_processing_latency_samples",
                         "Samples in the channel's latency window.")
        self.k_ready = g("nsqd_client_ready", "The consumer's RDY count.")
        self.k_inflight = g("nsqd_client_in_flight", "Messages in flight to the consumer.")
        self.k_msgs = c("nsqd_client_messages_total", "Messages sent to the consumer.")
        self.k_fin = c("nsqd_client_finished_total", "Messages the consumer finished.")
        self.k_req = c("nsqd_client_requeued_total", "Messages the consumer requeued.")
        self.k_connected = g("nsqd_client_connect_time_seconds",
                             "When the consumer connected (unix time).")
        self.p_pub = c("nsqd_producer_published_total",
                       "Messages a connected producer published to a topic.")

    def topic(self, t: dict, backend: Any) -> str:
        lt = f'{{topic="{t["topic_name"]}"}}'
        self.t_msgs.add(lt, t["message_count"])
        self.t_bytes.add(lt, t["message_bytes"])
        self.t_depth.add(lt, t["depth"])
        self.t_backend.add(lt, t["backend_depth"])
        self.t_backend_bytes.add(lt, backend_bytes(backend))
        self.t_paused.add(lt, t["paused"])
        _quantiles(self.t_e2e, lt, t["e2e_processing_latency"])
        h = t.get("history")
        if h is not None:  # only topics that keep history (docs/history.md)
            self.h_msgs.add(lt, h["messages"])
            self.h_bytes.add(lt, h["bytes"])
            self.h_segments.add(lt, h["segments"])
            self.h_oldest.add(lt, h["oldest_timestamp"] / 1e9)
        return lt

    def channel(self, topic_name: str, ch: dict, backend: Any) -> None:
        lc = f'{{topic="{topic_name}",channel="{ch["channel_name"]}"}}'
        self.c_msgs.add(lc, ch["message_count"])
        self.c_requeue.add(lc, ch["requeue_count"])
        self.c_timeout.add(lc, ch["timeout_count"])
        self.c_depth.add(lc, ch["depth"])
        self.c_backend.add(lc, ch["backend_depth"])
        self.c_backend_bytes.add(lc, backend_bytes(backend))
        self.c_inflight.add(lc, ch["in_flight_count"])
        self.c_deferred.add(lc, ch["deferred_count"])
        self.c_clients.add(lc, ch["client_count"])
        self.c_paused.add(lc, ch["paused"])
        if "lease_count" in ch:
            self.c_leases.add(lc, ch["lease_count"])
            self.c_lease_held.add(lc, ch["lease_held_count"])
        e2e = ch["e2e_processing_latency"]
        if e2e.get("percentiles"):
            self.c_e2e_n.add(lc, e2e["count"])
        _quantiles(self.c_e2e, lc, e2e)
        for k in ch["clients"] or ():
            lk = labels(topic=topic_name, channel=ch["channel_name"], client_id=k["client_id"],
                        hostname=k["hostname"], remote_address=k["remote_address"])
            self.k_ready.add(lk, k["ready_count"])
            self.k_inflight.add(lk, k["in_flight_count"])
            self.k_msgs.add(lk, k["message_count"])
            self.k_fin.add(lk, k["finish_count"])
            self.k_req.add(lk, k["requeue_count"])
            self.k_connected.add(lk, k["connect_ts"])

    def producers(self, nsqd: "NSQD") -> None:
        for client in list(nsqd.clients.values()):
            for topic, count in client.pub_counts.items():
                self.p_pub.add(labels(topic=topic, client_id=client.client_id,
                                      hostname=client.hostname,
                                      remote_address=client.remote_address), count)


def _quantiles(fam: Family, label_text: str, e2e: dict) -> None:
    inner = label_text[1:-1]
    for p in e2e.get("percentiles") or ():
        fam.add(f'{{{inner},quantile="{p["quantile"]}"}}', p["value"] / 1e9)


def _replication(exp: Exposition, nsqd: "NSQD") -> None:
    """Opt-in replication (docs/replication.md): the origin's link and its waiting publishers
    (issue #25), the replicas this node holds; from the same stats as ``/stats``."""
    if nsqd.replicator is not None:
        r = nsqd.replicator.stats()
        lp = labels(peer=r["peer"], degraded=r["degraded_setting"])
        exp.single("nsqd_replication_link_up", "gauge",
                   "1 while the replication link to the peer is up.", r["state"] == "up", lp)
        exp.single("nsqd_replication_waiting_publishes", "gauge",
                   "Sync publishes waiting for the peer's copy now.", r["waiting_publishes"], lp)
        exp.single("nsqd_replication_longest_wait_seconds", "gauge",
                   "How long the oldest waiting sync publish has waited.",
                   r["longest_wait_ms"] / 1000, lp)
        exp.single("nsqd_replication_failed_publishes_total", "counter",
                   "Publishes refused for want of a second copy (--replication-degraded=fail).",
                   r["failed_publishes"], lp)
        exp.single("nsqd_replication_single_copy_publishes_total", "counter",
                   "Publishes answered OK with one copy after the sync timeout (accept).",
                   r["accepted_single_copy"], lp)
        exp.single("nsqd_replication_degraded_messages_total", "counter",
                   "Messages accepted while the link was down (held once until re-shipped).",
                   r["degraded_messages"], lp)
        exp.single("nsqd_replication_shipped_messages_total", "counter",
                   "Messages shipped to the peer.", r["shipped_messages"], lp)
        exp.single("nsqd_replication_unacked_batches", "gauge",
                   "Batches shipped and not yet acknowledged by the peer.", r["unacked_batches"], lp)
    if nsqd.replicas is not None:
        up = exp.gauge("nsqd_replica_link_up", "1 while the origin's replication link is up.")
        held = exp.gauge("nsqd_replica_messages", "Messages held for the origin.")
        for o in nsqd.replicas.stats():
            lo = labels(origin=o["origin"])
            up.add(lo, o["link"] == "up")
            held.add(lo, o.get("messages", 0))


def render(nsqd: "NSQD") -> bytes:
    """One scrape: node-level gauges, then every topic/channel/client family, then process."""
    exp = Exposition()
    opts = nsqd.options
    exp.single("nsqd_info", "gauge", "Constant 1, labelled with the node's identity.", 1,
               labels(version=NSQ_COMPAT_VERSION, broadcast_address=opts.broadcast_address,
                      tcp_port=str(opts.broadcast_tcp_port or nsqd.tcp_port),
                      http_port=str(opts.broadcast_http_port or nsqd.http_port),
                      node_id=str(opts.node_id)))
    exp.single("nsqd_start_time_seconds", "gauge", "When nsqd started (unix time).",
               nsqd.start_time)
    exp.single("nsqd_healthy", "gauge", "1 while /ping answers OK (no disk write failure).",
               nsqd.health_error is None)
    topics = sorted(nsqd.topics.values(), key=lambda t: t.name)
    exp.single("nsqd_topics", "gauge", "Topics on this node.", len(topics))
    exp.single("nsqd_channels", "gauge", "Channels on this node.",
               sum(len(t.channels) for t in topics))
    exp.single("nsqd_clients", "gauge", "Connected TCP clients (producers and consumers).",
               len(nsqd.clients))
    fams = _Families(exp)
    stats_of_channel = nsq_stats.channel_stats
    for topic in topics:
        channels = sorted(topic.channels.values(), key=lambda c: c.name)
        docs = [stats_of_channel(c, True) for c in channels]
        fams.topic(nsq_stats.topic_stats(topic, docs), topic.backend)
        for channel, doc in zip(channels, docs):
            fams.channel(topic.name, doc, channel.backend)
    fams.producers(nsqd)
    if nsqd.replicator is not None or nsqd.replicas is not None:
        _replication(exp, nsqd)
    mem = nsq_stats.memory_stats()
    exp.single("nsqd_gc_pause_seconds_max", "gauge",
               "Longest of the last 256 garbage collections.", mem["gc_pause_usec_100"] / 1e6)
    exp.extra.append(process_metrics())
    return exp.render()


def routes(nsqd: "NSQD", route: Callable[..., Any]) -> list[Any]:
    """``GET /metrics`` for nsqd's router, or nothing with ``--metrics=false``."""
    if not nsqd.options.metrics:
        return []

    # (the HTTP layer is not imported with this module: main.py reads the flags above first)
    from ...httpserver.wire import Head

    # a scrape's answer carries the text format's type (its ``version`` parameter included)
    head = Head(200, (("Content-Type", CONTENT_TYPE),))

    def metrics(request: Any) -> tuple[Head, bytes]:
        return head, render(nsqd)

    return [route("GET", "/metrics", metrics, auth=NODE_STRICT)]  # (docs/security.md)
