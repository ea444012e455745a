"""The documents nsqadmin's API serves, as upstream's ``internal/clusterinfo/types.go`` builds
them from nsqlookupd's and nsqd's answers (reference §4.3).

Dicts are written in the field order of upstream's Go structs, so the JSON reads like upstream's
key for key. Aggregation follows upstream's ``Add`` methods, their quirks included, because the
API is upstream's: a topic's total reuses the first node's channel objects as the channel totals
(so ``/api/topics/<t>`` shows that node's ``channels[]`` entries as the totals, listing the
other nodes under ``nodes``), and e2e percentiles combine as upstream combines them.
docs/fidelity.md lists these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..common.addr import join_host_port, split_host_port
from .extras import add_history, add_lifecycle, read_history, read_lifecycle


def _go_number(value: float) -> float | int:
    return int(value) if isinstance(value, float) and value.is_integer() else value


_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def semver_key(version: str) -> tuple[Any, ...]:
    """Ordering key for ``blang/semver``; unparsable versions count as 0.0.0 (as upstream)."""
    m = _SEMVER.match(version or "")
    if not m:
        return (0, 0, 0, 1, ())
    pre = m.group(4)
    pre_key: tuple[tuple[int, int, str], ...] = ()
    if pre:
        pre_key = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), 0 if pre else 1, pre_key)


# --- producers ---------------------------------------------------------------------------------

@dataclass
class Producer:
    """One nsqd as nsqadmin lists it (upstream's ``clusterinfo.Producer``)."""

    hostname: str = ""
    broadcast_address: str = ""
    tcp_port: int = 0
    http_port: int = 0
    version: str = ""
    remote_address: str = ""
    remote_addresses: list[str] | None = None
    topology_zone: str = ""
    topology_region: str = ""
    topics: list[dict[str, Any]] | None = None  # [{"topic": name, "tombstoned": bool}]
    out_of_date: bool = False

    @property
    def http_address(self) -> str:
        return join_host_port(self.broadcast_address, self.http_port)

    @property
    def tcp_address(self) -> str:
        return join_host_port(self.broadcast_address, self.tcp_port)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "remote_addresses": self.remote_addresses,
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }
        if self.topology_zone:
            out["topology_zone"] = self.topology_zone
        if self.topology_region:
            out["topology_region"] = self.topology_region
        out["topics"] = self.topics
        out["out_of_date"] = self.out_of_date
        return out

    @classmethod
    def from_lookupd(cls, raw: dict[str, Any]) -> "Producer":
        topics = raw.get("topics") or []
        tombstones = raw.get("tombstones") or []
        return cls(
            hostname=raw.get("hostname", ""),
            broadcast_address=raw.get("broadcast_address", ""),
            tcp_port=int(raw.get("tcp_port", 0)),
            http_port=int(raw.get("http_port", 0)),
            version=raw.get("version", ""),
            remote_address=raw.get("remote_address", ""),
            topology_zone=raw.get("topology_zone", ""),
            topology_region=raw.get("topology_region", ""),
            topics=[{"topic": t, "tombstoned": bool(tombstones[i]) if i < len(tombstones)
                     else False} for i, t in enumerate(topics)] or None,
        )

    @classmethod
    def from_nsqd_info(cls, info: dict[str, Any], topic_names: list[str], addr: str,
                       fallback: bool = False) -> "Producer":
        """From nsqd's ``/info``; ``fallback`` (upstream does it when looking up a topic's
        producers, not when listing nodes): an nsqd too old to report its broadcast address or
        hostname is known by the address nsqadmin was given."""
        broadcast = info.get("broadcast_address", "")
        http_port = int(info.get("http_port", 0))
        hostname = info.get("hostname", "")
        if fallback and not broadcast:
            broadcast, http_port = split_host_port(addr)
        if fallback and not hostname:
            hostname = split_host_port(addr)[0]
        return cls(
            hostname=hostname, broadcast_address=broadcast, http_port=http_port,
            tcp_port=int(info.get("tcp_port", 0)), version=info.get("version", ""),
            topology_zone=info.get("topology_zone", ""),
            topology_region=info.get("topology_region", ""),
            topics=[{"topic": t, "tombstoned": False} for t in topic_names] or None,
        )


# --- stats documents ---------------------------------------------------------------------------

class E2eAggregate:
    """Upstream's ``quantile.E2eProcessingLatencyAggregate``: percentiles averaged across nodes."""

    def __init__(self, count: int = 0, percentiles: list[dict[str, Any]] | None = None, topic: str = "",
                 channel: str = "", host: str = "") -> None:
        self.count = count
        self.percentiles = percentiles
        self.topic = topic
        self.channel = channel
        self.host = host

    @classmethod
    def from_nsqd(cls, raw: dict[str, Any] | None) -> "E2eAggregate":
        raw = raw or {}
        count = int(raw.get("count", 0))
        pcts = raw.get("percentiles")
        if pcts is not None:
            pcts = [{"average": p.get("value", 0), "count": count, "max": p.get("value", 0),
                     "min": p.get("value", 0), "quantile": p.get("quantile", 0),
                     "value": p.get("value", 0)} for p in pcts]
        return cls(count, pcts)

    def add(self, other: "E2eAggregate") -> None:
        """Upstream's ``E2eProcessingLatencyAggregate.Add``, arithmetic included: ``min`` ends
        up as the ``max`` of the node added last (upstream compares the two maxima), and a
        quantile first seen here has no ``value`` key."""
        self.host = "*"
        self.count += other.count
        for value in other.percentiles or ():
            if self.percentiles is None:
                self.percentiles = []
            mine = next((p for p in self.percentiles if p.get("quantile") == value.get("quantile")),
                        None)
            if mine is None:
                mine = {"quantile": value.get("quantile", 0)}
                self.percentiles.append(mine)
            mine["max"] = max(value.get("max", 0), mine.get("max", 0))
            mine["min"] = min(value.get("max", 0), mine["max"])
            mine["count"] = mine.get("count", 0) + value.get("count", 0)
            if mine["count"] == 0:
                mine["average"] = 0
                continue
            delta = value.get("average", 0) - mine.get("average", 0)
            mine["average"] = mine.get("average", 0) + delta * value.get("count", 0) / mine["count"]

    def to_json(self) -> dict[str, Any]:
        pcts = None
        if self.percentiles is not None:
            pcts = [{k: _go_number(v) if isinstance(v, float) else v for k, v in sorted(p.items())}
                    for p in self.percentiles]
        return {"count": self.count, "percentiles": pcts, "topic": self.topic,
                "channel": self.channel, "host": self.host}


def client_doc(raw: dict[str, Any], node: str, producer: Producer, now: float) -> dict[str, Any]:
    """Upstream's ``clusterinfo.ClientStats`` from one nsqd client entry."""
    connect_ts = int(raw.get("connect_ts", 0))
    out: dict[str, Any] = {
        "node": node,
        "remote_address": raw.get("remote_address", ""),
        "version": raw.get("version", ""),
        "client_id": raw.get("client_id", ""),
        "hostname": raw.get("hostname", ""),
        "user_agent": raw.get("user_agent", ""),
        "connect_ts": connect_ts,
        "connected": (int(now) - connect_ts) * 1_000_000_000,
        "in_flight_count": raw.get("in_flight_count", 0),
        "ready_count": raw.get("ready_count", 0),
        "finish_count": raw.get("finish_count", 0),
        "requeue_count": raw.get("requeue_count", 0),
        "message_count": raw.get("message_count", 0),
        "sample_rate": raw.get("sample_rate", 0),
        "deflate": bool(raw.get("deflate", False)),
        "snappy": bool(raw.get("snappy", False)),
        "authed": bool(raw.get("authed", False)),
        "auth_identity": raw.get("auth_identity", ""),
        "auth_identity_url": raw.get("auth_identity_url", ""),
    }
    for key, value in (("node_topology_region", producer.topology_region),
                       ("node_topology_zone", producer.topology_zone),
                       ("topology_region", raw.get("topology_region", "")),
                       ("topology_zone", raw.get("topology_zone", ""))):
        if value:
            out[key] = value
    out["tls"] = bool(raw.get("tls", False))
    out["tls_cipher_suite"] = raw.get("tls_cipher_suite", "")
    out["tls_version"] = raw.get("tls_version", "")
    out["tls_negotiated_protocol"] = raw.get("tls_negotiated_protocol", "")
    out["tls_negotiated_protocol_is_mutual"] = bool(raw.get("tls_negotiated_protocol_is_mutual",
                                                            False))
    return out


_TOPOLOGY_KEYS = ("node_topology_region", "node_topology_zone", "topology_region", "topology_zone")
_CHANNEL_COUNTS = ("depth", "memory_depth", "backend_depth", "in_flight_count", "deferred_count",
                   "requeue_count", "timeout_count", "message_count")
_TOPIC_COUNTS = ("depth", "memory_depth", "backend_depth", "message_count")


def _by_hostname(items: list[Any]) -> None:
    """Upstream's ``sort.Sort(...ByHost)``: by hostname only; equal hostnames keep the order
    they were added in (Go's sort is an insertion sort at these sizes)."""
    items.sort(key=lambda item: item.hostname)


class ChannelStats:
    """Upstream's ``clusterinfo.ChannelStats``: one node's channel, or a sum over nodes."""

    def __init__(self, node: str, hostname: str, topic: str, channel: str) -> None:
        self.node = node
        self.hostname = hostname
        self.topic_name = topic
        self.channel_name = channel
        self.counts = dict.fromkeys(_CHANNEL_COUNTS, 0)
        self.client_count = 0
        self.lifecycle: dict[str, int] = {}  # nsqpy's opt-in counters, only those reported
        self.nodes: list[ChannelStats] | None = None
        self.clients: list[dict[str, Any]] | None = None
        self.paused = False
        self.e2e: E2eAggregate | None = None

    @classmethod
    def from_nsqd(cls, raw: dict[str, Any], node: str, producer: Producer, topic: str,
                  now: float) -> "ChannelStats":
        c = cls(node, producer.hostname, topic, raw.get("channel_name", ""))
        for key in _CHANNEL_COUNTS:
            if key != "memory_depth":
                c.counts[key] = int(raw.get(key, 0))
        c.counts["memory_depth"] = c.counts["depth"] - c.counts["backend_depth"]
        c.client_count = int(raw.get("client_count", 0))
        c.lifecycle = read_lifecycle(raw)
        clients = raw.get("clients")
        if clients is not None:
            c.clients = [client_doc(cl, node, producer, now) for cl in clients]
        c.paused = bool(raw.get("paused", False))
        c.e2e = E2eAggregate.from_nsqd(raw.get("e2e_processing_latency"))
        return c

    def add(self, other: "ChannelStats") -> None:
        """Upstream's ``ChannelStats.Add``: sums, ``other`` listed under ``nodes``."""
        self.node = "*"
        for key in self.counts:
            self.counts[key] += other.counts[key]
        self.client_count += other.client_count
        add_lifecycle(self.lifecycle, other.lifecycle)
        self.paused = self.paused or other.paused
        self.nodes = (self.nodes or []) + [other]
        _by_hostname(self.nodes)
        if self.e2e is None:
            self.e2e = E2eAggregate(topic=self.topic_name, channel=self.channel_name, host="*")
        if other.e2e is not None:
            self.e2e.add(other.e2e)
        if other.clients:
            self.clients = (self.clients or []) + other.clients
            self.clients.sort(key=lambda c: c["hostname"])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "hostname": self.hostname,
                               "topic_name": self.topic_name, "channel_name": self.channel_name,
                               **self.counts, **self.lifecycle}
        out["client_count"] = self.client_count
        out["nodes"] = [n.to_json() for n in self.nodes] if self.nodes is not None else None
        out["clients"] = self.clients
        out["paused"] = self.paused
        out["e2e_processing_latency"] = self.e2e.to_json() if self.e2e is not None else None
        return out


class TopicStats:
    """Upstream's ``clusterinfo.TopicStats``: one node's topic, or the sum over nodes."""

    def __init__(self, node: str, hostname: str, topic: str) -> None:
        self.node = node
        self.hostname = hostname
        self.topic_name = topic
        self.counts = dict.fromkeys(_TOPIC_COUNTS, 0)
        self.lifecycle: dict[str, int] = {}
        self.history: dict[str, int] | None = None  # nsqd's history (docs/history.md), if kept
        self.nodes: list[TopicStats] | None = None
        self.channels: list[ChannelStats] | None = None
        self.paused = False
        self.e2e: E2eAggregate | None = None

    @classmethod
    def from_nsqd(cls, raw: dict[str, Any], node: str, producer: Producer,
                  now: float) -> "TopicStats":
        t = cls(node, producer.hostname, raw.get("topic_name", ""))
        for key in ("depth", "backend_depth", "message_count"):
            t.counts[key] = int(raw.get(key, 0))
        t.counts["memory_depth"] = t.counts["depth"] - t.counts["backend_depth"]
        t.lifecycle = read_lifecycle(raw)
        t.history = read_history(raw)
        channels = raw.get("channels")
        if channels is not None:
            t.channels = [ChannelStats.from_nsqd(c, node, producer, t.topic_name, now)
                          for c in channels]
        t.paused = bool(raw.get("paused", False))
        t.e2e = E2eAggregate.from_nsqd(raw.get("e2e_processing_latency"))
        return t

    def add(self, other: "TopicStats") -> None:
        """Upstream's ``TopicStats.Add``. A channel not seen yet is taken over as it is, the
        node's own object: the channel total *is* that object from then on, so the first
        node's entry shows the totals and lists the other nodes under ``nodes``."""
        self.node = "*"
        for key in self.counts:
            self.counts[key] += other.counts[key]
        add_lifecycle(self.lifecycle, other.lifecycle)
        self.history = add_history(self.history, other.history)
        self.paused = self.paused or other.paused
        for theirs in other.channels or ():
            mine = next((c for c in self.channels or () if c.channel_name == theirs.channel_name),
                        None)
            if mine is None:
                self.channels = (self.channels or []) + [theirs]
            else:
                mine.add(theirs)
        self.nodes = (self.nodes or []) + [other]
        _by_hostname(self.nodes)
        if self.e2e is None:
            self.e2e = E2eAggregate(topic=self.topic_name, host="*")
        if other.e2e is not None:
            self.e2e.add(other.e2e)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "hostname": self.hostname,
                               "topic_name": self.topic_name, **self.counts, **self.lifecycle}
        out["nodes"] = [n.to_json() for n in self.nodes] if self.nodes is not None else None
        out["channels"] = ([c.to_json() for c in self.channels]
                           if self.channels is not None else None)
        out["paused"] = self.paused
        out["e2e_processing_latency"] = self.e2e.to_json() if self.e2e is not None else None
        if self.history is not None:  # only for a topic some nsqd keeps history of
            out["history"] = self.history
        return out


def sort_clients_by_node_topology(clients: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """With nsqd's opt-in topology labels, a channel's clients by node, then same zone, same
    region, others (upstream's later ``ClientStatsByNodeTopology``); without any, as they are
    (upstream v1.3.0's order: by client hostname)."""
    if not any(k in c for c in clients for k in _TOPOLOGY_KEYS):
        return clients

    def key(c: dict[str, Any]) -> tuple[Any, ...]:
        region, zone = c.get("node_topology_region", ""), c.get("node_topology_zone", "")
        mine_r, mine_z = c.get("topology_region", ""), c.get("topology_zone", "")
        if mine_r == region and mine_z == zone:
            rank = 0
        elif mine_r == region:
            rank = 1
        else:
            rank = 2
        return (c["node"], rank, mine_r, mine_z)
    return sorted(clients, key=key)
