"""``/stats``: snapshots of live topics, channels and clients in upstream nsqd's shapes.

Everything here reads the live objects on the event loop thread, so a snapshot is consistent
without locks. Dict keys are inserted in the order of the Go structs' fields (``TopicStats``,
``ChannelStats``, ``ClientV2Stats``) because tools diff and grep these documents; the text format
reproduces upstream's ``printStats`` line formats column for column.

Memory figures keep upstream's key names; Python has no Go heap, so each is the nearest cheap
equivalent (see :func:`memory_stats`).
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from collections import deque
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable


from ... import NSQ_COMPAT_VERSION
from ...common.flags import format_duration
from ...protocol.gojson import RawJSON
from ...protocol.gojson import dumps as go_json
from ..options import topology_set

if TYPE_CHECKING:
    from ..channel import Channel
    from ..v2.client import ClientV2
    from ..nsqd import NSQD
    from ..topic import Topic

_NO_LATENCY = {"count": 0, "percentiles": None}


# --- snapshots ---------------------------------------------------------------------------------

def _go_number(value: float | int) -> float | int:
    """Go prints an integral float64 without a fraction (``1``, not ``1.0``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _latency(result: dict | None, tracked: list[float] | None = None) -> dict:
    """Upstream's ``quantile.Result``. ``tracked``: the configured percentiles when a stream
    exists; upstream then lists every one even before any sample (value 0, as an empty perks
    stream answers), and ``null`` only when there is no stream at all."""
    if not result:
        result = dict(_NO_LATENCY)
    pcts = result.get("percentiles")
    if pcts is None:
        if tracked:
            return {"count": result.get("count", 0),
                    "percentiles": [{"quantile": _go_number(q), "value": 0} for q in tracked]}
        return {"count": result.get("count", 0), "percentiles": None}
    return {"count": result["count"],
            "percentiles": [{"quantile": _go_number(p["quantile"]), "value": _go_number(p["value"])}
                            for p in pcts]}


def client_stats(client: "ClientV2", topic_filter: str = "", topology: bool = False) -> dict:
    """One connection as upstream's ``ClientV2Stats`` (also used for producers); ``topology``:
    the operator set a topology label, so the post-1.3.0 fields are shown.

    Built as one dict display in the struct's field order: at 5,000 connections this is most
    of a ``/stats`` (issue #32). The optional fields (auth, topology, ``pub_counts``, TLS) are
    spliced in only for a client that has them."""
    auth_state = client.auth_state
    info = client.tls_info
    if auth_state is None and info is None and not topology and not client.pub_counts:
        return {
            "client_id": client.client_id, "hostname": client.hostname, "version": "V2",
            "remote_address": client.remote_address, "state": client.state,
            "ready_count": client.ready_count, "in_flight_count": len(client.in_flight),
            "message_count": client.message_count, "finish_count": client.finish_count,
            "requeue_count": client.requeue_count, "connect_ts": client.connect_ts,
            "sample_rate": client.sample_rate, "deflate": client.deflate,
            "snappy": client.snappy, "user_agent": client.user_agent, "tls": False,
            "tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
            "tls_negotiated_protocol_is_mutual": False,
        }
    stats: dict[str, Any] = {
        "client_id": client.client_id, "hostname": client.hostname, "version": "V2",
        "remote_address": client.remote_address, "state": client.state,
        "ready_count": client.ready_count, "in_flight_count": len(client.in_flight),
        "message_count": client.message_count, "finish_count": client.finish_count,
        "requeue_count": client.requeue_count, "connect_ts": client.connect_ts,
        "sample_rate": client.sample_rate, "deflate": client.deflate, "snappy": client.snappy,
        "user_agent": client.user_agent,
    }
    # authed / auth_identity / auth_identity_url are omitempty in upstream's struct
    if auth_state is not None:
        if auth_state.authorizations:
            stats["authed"] = True
        if auth_state.identity:
            stats["auth_identity"] = auth_state.identity
        if auth_state.identity_url:
            stats["auth_identity_url"] = auth_state.identity_url
    if topology:  # post-1.3.0 fields: only on opt-in
        stats["topology_zone"] = getattr(client, "topology_zone", "")
        stats["topology_region"] = getattr(client, "topology_region", "")
    for topic, count in client.pub_counts.items():
        if topic_filter and topic != topic_filter:
            continue
        stats["pub_counts"] = [{"topic": topic, "count": count}]
        break  # upstream quirk: the loop stops after the first entry it reports
    stats["tls"] = info is not None
    stats["tls_cipher_suite"] = info.cipher_suite if info is not None else ""
    stats["tls_version"] = info.version if info is not None else ""
    stats["tls_negotiated_protocol"] = info.negotiated_protocol if info is not None else ""
    # Go's NegotiatedProtocolIsMutual is deprecated and always true on a TLS connection
    stats["tls_negotiated_protocol_is_mutual"] = info is not None
    return stats


#: a plain client's entry around its fixed fields (written once per client, see _client_json)
_CLIENT_JSON = (b'%b,"state":%d,"ready_count":%d,"in_flight_count":%d,"message_count":%d,'
                b'"finish_count":%d,"requeue_count":%d,%b')


def _client_json(client: "ClientV2") -> RawJSON:
    """A plain client's entry (no auth, TLS, topology or publishes: :func:`client_stats`'s
    first case) as JSON text, the same bytes ``go_json`` writes for that dict. Its fixed
    fields are encoded once per client and kept on it with the values they came from
    (IDENTIFY and the stream's upgrades change a few of them, once); each ``/stats`` only
    formats the six counters: at 2,000 connections a third of the dicts' cost, and orjson
    copies the text instead of encoding 20 keys per client (issue #42)."""
    key = (client.client_id, client.hostname, client.remote_address, client.connect_ts,
           client.sample_rate, client.deflate, client.snappy, client.user_agent)
    fixed = client.stats_json
    if fixed is None or fixed[0] != key:
        head = go_json({"client_id": key[0], "hostname": key[1], "version": "V2",
                        "remote_address": key[2]})
        tail = go_json({"connect_ts": key[3], "sample_rate": key[4], "deflate": key[5],
                        "snappy": key[6], "user_agent": key[7], "tls": False,
                        "tls_cipher_suite": "", "tls_version": "",
                        "tls_negotiated_protocol": "", "tls_negotiated_protocol_is_mutual": False})
        fixed = client.stats_json = (key, head[:-1], tail[1:])
    return RawJSON(_CLIENT_JSON % (fixed[1], client.state, client.ready_count,
                                   len(client.in_flight), client.message_count,
                                   client.finish_count, client.requeue_count, fixed[2]))


class _Snapshot:
    """What every channel's and topic's stats need, looked up once per ``/stats``."""

    __slots__ = ("include_clients", "topic_filter", "topology", "lifecycle", "leases",
                 "no_latency", "no_clients", "as_json", "built", "floats")

    def __init__(self, nsqd: "NSQD", include_clients: bool, topic_filter: str,
                 topology: bool, as_json: bool = False) -> None:
        self.include_clients = include_clients
        self.topic_filter = topic_filter
        self.topology = topology
        self.lifecycle = nsqd.lifecycle
        self.leases = getattr(nsqd, "leases", None)
        # shared by every channel and topic of this snapshot that has none of its own (most,
        # at 20,000 topics): fewer objects to make, and to free (the snapshot is read only)
        self.no_latency = {"count": 0, "percentiles": None}
        self.no_clients: list[dict] = []
        #: plain clients' entries as JSON text (the document is encoded, not read)
        self.as_json = as_json
        #: each client's entry, built once per snapshot (a client that publishes and
        #: consumes is listed under its channel and among the producers)
        self.built: dict[int, Any] = {}
        #: whether the document may hold a float: latency percentiles, a topic's history,
        #: replication's figures (the lifecycle's and leases' additions are counts); without
        #: one its JSON needs no check of Go's float spelling (``go_json(floats=)``)
        self.floats = (getattr(nsqd, "replicator", None) is not None
                       or getattr(nsqd, "replicas", None) is not None)

    def client(self, client: "ClientV2") -> Any:
        entry = self.built.get(id(client))  # (the snapshot holds every client it lists)
        if entry is None:
            if (self.as_json and client.auth_state is None and client.tls_info is None
                    and not self.topology and not client.pub_counts):
                entry = _client_json(client)
            else:
                entry = client_stats(client, self.topic_filter, self.topology)
            self.built[id(client)] = entry
        return entry

    def channel(self, channel: "Channel") -> dict:
        clients = channel.clients
        if self.include_clients:
            entry = self.client
            client_list: list | None = [entry(c) for c in clients] if clients else self.no_clients
        else:
            client_list = None
        e2e = channel.e2e
        if e2e is not None:
            self.floats = True
            latency = _latency(e2e.result(), e2e.percentiles)
        else:
            latency = self.no_latency
        orphans = channel.orphans
        in_flight = sum([len(c.in_flight) for c in clients]) if clients else 0
        if orphans:
            in_flight += sum(map(len, orphans))
        stats = self.lifecycle.channel_stats(channel, {
            "channel_name": channel.name,
            "depth": channel.depth,
            "backend_depth": channel.backend.depth,
            "in_flight_count": in_flight,
            "deferred_count": len(channel.deferred),
            "message_count": channel.message_count,
            "requeue_count": channel.requeue_count,
            "timeout_count": channel.timeout_count,
            "client_count": len(clients),
            "clients": client_list,
            "paused": channel.paused,
            "e2e_processing_latency": latency,
        })
        if self.leases is not None:  # lease_count, lease_held_count, lease_oldest_ms
            self.leases.channel_stats(channel, stats)
        return stats

    def topic(self, topic: "Topic", channels: list[dict]) -> dict:
        for c in topic.channels.values():
            if c.e2e is not None:  # a topic's aggregate stream exists once a channel tracks
                latency = _latency(topic.e2e_result(), c.e2e.percentiles)
                break
        else:
            latency = self.no_latency
        stats = self.lifecycle.topic_stats(topic, {
            "topic_name": topic.name,
            "channels": channels,
            "depth": topic.depth,
            "backend_depth": topic.backend.depth,
            "message_count": topic.message_count,
            "message_bytes": topic.message_bytes,
            "paused": topic.paused,
            "e2e_processing_latency": latency,
        })
        if topic.history is not None:  # a topic that keeps history (docs/history.md); else upstream's
            stats["history"] = topic.history.stats()
            self.floats = True
        return stats


def channel_stats(channel: "Channel", include_clients: bool, topic_filter: str = "",
                  topology: bool = False) -> dict:
    """One channel as upstream's ``ChannelStats``."""
    return _Snapshot(channel.nsqd, include_clients, topic_filter, topology).channel(channel)


def topic_stats(topic: "Topic", channels: list[dict]) -> dict:
    """One topic as upstream's ``TopicStats``, around its channels' stats."""
    return _Snapshot(topic.nsqd, False, "", False).topic(topic, channels)


def collect(nsqd: "NSQD", topic_filter: str = "", channel_filter: str = "",
            include_clients: bool = True) -> tuple[list[dict] | None, list[dict] | None]:
    """``(topics, producers)`` like upstream's ``GetStats``, as dicts (the text format,
    statsd).

    Upstream's quirks are kept: an unknown ``topic_filter`` yields ``(None, None)`` (JSON
    ``null``s, producers not even gathered); a topic without the filtered channel is skipped;
    ``producers`` is ``None`` without clients or when nobody has published.
    """
    return _collect(_snapshot(nsqd, include_clients, topic_filter, False), nsqd,
                    topic_filter, channel_filter)


def collect_json(nsqd: "NSQD", topic_filter: str = "", channel_filter: str = "",
                 include_clients: bool = True) -> tuple[list | None, list | None, bool]:
    """:func:`collect` for ``format=json``: plain clients' entries are JSON text
    (:class:`RawJSON`); the third item says whether the document :func:`stats_document`
    makes of them may hold a float (``go_json(floats=)``)."""
    snap = _snapshot(nsqd, include_clients, topic_filter, True)
    topics, producers = _collect(snap, nsqd, topic_filter, channel_filter)
    return topics, producers, snap.floats


def _snapshot(nsqd: "NSQD", include_clients: bool, topic_filter: str,
              as_json: bool) -> _Snapshot:
    options = getattr(nsqd, "options", None)
    topology = options is not None and topology_set(options)  # post-1.3.0 fields: opt-in only
    return _Snapshot(nsqd, include_clients, topic_filter, topology, as_json)


def _collect(snap: _Snapshot, nsqd: "NSQD", topic_filter: str,
             channel_filter: str) -> tuple[list[dict] | None, list | None]:
    all_topics = nsqd.topics
    if topic_filter:
        topic = all_topics.get(topic_filter)
        if topic is None:
            return None, None
        topics: Iterable["Topic"] = [topic]
    else:
        topics = [all_topics[name] for name in sorted(all_topics)]
    channel, topic_stats_of = snap.channel, snap.topic
    out = []
    for topic in topics:
        channels = topic.channels
        if channel_filter:
            one = channels.get(channel_filter)
            if one is None:
                continue
            chans = [one]
        else:
            chans = [channels[name] for name in sorted(channels)]
        out.append(topic_stats_of(topic, [channel(c) for c in chans]))
    producers = None
    if snap.include_clients:
        entry = snap.client
        producers = [entry(c) for c in list(nsqd.clients.values()) if c.pub_counts] or None
    return out, producers


# --- memory ------------------------------------------------------------------------------------

_GC_PAUSES: deque[int] = deque(maxlen=256)  # like Go's MemStats.PauseNs ring, in ns
_gc_started = 0


def _gc_callback(phase: str, info: dict) -> None:
    global _gc_started
    if phase == "start":
        _gc_started = time.perf_counter_ns()
    elif _gc_started:
        _GC_PAUSES.append(time.perf_counter_ns() - _gc_started)
        _gc_started = 0


def install_gc_pause_tracker() -> None:
    """Time every collection (two clock reads per GC run) so /stats can report pauses."""
    if _gc_callback not in gc.callbacks:
        gc.callbacks.append(_gc_callback)


def _percentile(perc: float, ordered: list[int]) -> int:
    """Upstream's nearest-rank pick: ``floor(perc/100 * n + 0.5)``, clamped to the last."""
    n = len(ordered)
    if n == 0:
        return 0
    return ordered[min(int(perc / 100.0 * n + 0.5), n - 1)]


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # peak, not current


def memory_stats() -> dict:
    """Upstream's ``memStats`` keys with Python's nearest equivalents, all O(1) to compute.

    * ``heap_objects``: ``sys.getallocatedblocks()`` (live pymalloc blocks; counting
      ``gc.get_objects()`` would walk the whole heap on every request).
    * ``heap_in_use_bytes``: resident set size from ``/proc/self/statm``.
    * ``heap_idle_bytes``, ``heap_released_bytes``, ``next_gc_bytes``: 0; CPython has no such
      byte figures (its collector is triggered by allocation counts, not heap size).
    * ``gc_pause_usec_*``: percentiles of the last 256 collections' durations, timed by a
      ``gc.callbacks`` hook (see :func:`install_gc_pause_tracker`).
    * ``gc_total_runs``: collections summed over all generations.
    """
    pauses = sorted(_GC_PAUSES)
    return {
        "heap_objects": sys.getallocatedblocks(),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": _rss_bytes(),
        "heap_released_bytes": 0,
        "gc_pause_usec_100": _percentile(100.0, pauses) // 1000,
        "gc_pause_usec_99": _percentile(99.0, pauses) // 1000,
        "gc_pause_usec_95": _percentile(95.0, pauses) // 1000,
        "next_gc_bytes": 0,
        "gc_total_runs": sum(g["collections"] for g in gc.get_stats()),
    }


# --- output ------------------------------------------------------------------------------------

def stats_document(nsqd: "NSQD", topics: list[dict] | None, producers: list[dict] | None,
                   memory: dict | None) -> dict:
    doc: dict[str, Any] = {
        "version": NSQ_COMPAT_VERSION,
        "health": nsqd.health,
        "start_time": nsqd.start_time,
        "topics": topics,
    }
    if memory is not None:
        doc["memory"] = memory
    doc["producers"] = producers
    if nsqd.replicator is not None:  # nsqpy replication (opt-in): absent otherwise
        doc["replication"] = nsqd.replicator.stats()
    if nsqd.replicas is not None:
        doc["replicas"] = nsqd.replicas.stats()
    return doc


def _nanos_to_human(v: float) -> str:
    """Upstream's ``stringy.NanoSecondToHuman``."""
    if v > 1e9:
        return f"{v / 1e9:.1f}s"
    if v > 1e6:
        return f"{v / 1e6:.1f}ms"
    if v > 1e3:
        return f"{v / 1e3:.1f}us"
    return f"{v:.1f}ns"


def _e2e_text(e2e: dict) -> str:
    return ", ".join(_nanos_to_human(p["value"]) for p in e2e.get("percentiles") or ())


def _rfc3339(ts: int) -> str:
    dt = datetime.fromtimestamp(ts).astimezone()
    offset = dt.utcoffset()
    secs = int(offset.total_seconds()) if offset is not None else 0
    if secs == 0:
        zone = "Z"
    else:
        sign = "+" if secs > 0 else "-"
        hh, mm = divmod(abs(secs) // 60, 60)
        zone = f"{sign}{hh:02d}:{mm:02d}"
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + zone


def client_line(c: dict, now: float | None = None) -> str:
    """Upstream's ``ClientV2Stats.String``: a producer line if it has pub_counts, else a consumer line."""
    connected = format_duration(max(0, int((now or time.time()) - c["connect_ts"])))
    addr = c["remote_address"]
    port = addr.rpartition(":")[2] if ":" in addr else ""
    ident = f"{c['hostname']}:{port} {c['user_agent']}"
    pubs = c.get("pub_counts")
    if pubs:
        total = sum(p["count"] for p in pubs)
        topics = ",".join(f"{p['topic']}={p['count']}" for p in pubs)
        return (f"[{c['version']} {ident:<21}] msgs: {total:<8} topics: {topics} "
                f"connected: {connected}")
    return (f"[{c['version']} {ident:<21}] state: {c['state']} inflt: {c['in_flight_count']:<4} "
            f"rdy: {c['ready_count']:<4} fin: {c['finish_count']:<8} re-q: {c['requeue_count']:<8} "
            f"msgs: {c['message_count']:<8} connected: {connected}")


def stats_text(header: str, nsqd: "NSQD", topics: list[dict] | None,
               producers: list[dict] | None, memory: dict | None) -> str:
    """Upstream's ``printStats`` (the default ``/stats`` format)."""
    now = time.time()
    lines = [f"{header}\n",
             f"start_time {_rfc3339(nsqd.start_time)}\n",
             f"uptime {format_duration(max(0.0, now - nsqd.start_time))}\n",
             f"\nHealth: {nsqd.health}\n"]
    if memory is not None:
        lines.append("\nMemory:\n")
        lines.extend(f"   {key:<25}\t{value}\n" for key, value in memory.items())
    lines.append("\nTopics:" if topics else "\nTopics: None\n")
    for t in topics or ():
        prefix = "*P " if t["paused"] else "   "
        lines.append(f"\n{prefix}[{t['topic_name']:<15}] depth: {t['depth']:<5} "
                     f"be-depth: {t['backend_depth']:<5} msgs: {t['message_count']:<8} "
                     f"e2e%: {_e2e_text(t['e2e_processing_latency'])}\n")
        for ch in t["channels"]:
            prefix = "   *P " if ch["paused"] else "      "
            lines.append(
                f"{prefix}[{ch['channel_name']:<25}] depth: {ch['depth']:<5} "
                f"be-depth: {ch['backend_depth']:<5} inflt: {ch['in_flight_count']:<4} "
                f"def: {ch['deferred_count']:<4} re-q: {ch['requeue_count']:<5} "
                f"timeout: {ch['timeout_count']:<5} msgs: {ch['message_count']:<8} "
                f"e2e%: {_e2e_text(ch['e2e_processing_latency'])}\n")
            if "lease_count" in ch:  # nsqpy leases (docs/leases.md), only where there are some
                lines.append(f"        [leases] count: {ch['lease_count']} "
                             f"held: {ch['lease_held_count']} "
                             f"oldest: {format_duration(ch['lease_oldest_ms'] / 1000)}\n")
            for c in ch["clients"] or ():
                lines.append(f"        {client_line(c, now)}\n")
    if not producers:
        lines.append("\nProducers: None\n")
    else:
        lines.append("\nProducers:\n")
        lines.extend(f"   {client_line(c, now)}\n" for c in producers)
    return "".join(lines)
