"""What nsqadmin knows about the cluster, asked of nsqlookupd and nsqd over HTTP on each request.

This follows upstream's ``internal/clusterinfo`` (reference §4.3): every upstream is queried in
parallel; when *all* of them fail the call raises :class:`UpstreamError` (the handler answers
502 ``UPSTREAM_ERROR: ...``), when only some fail the result comes back with the failures as
warnings (the handler answers 200 with ``"message": "WARNING: ..."``). Documents are built as
dicts in the field order of upstream's Go structs, so nsqadmin's JSON reads like upstream's.

Where upstream's aggregation aliases the first node's channel objects (so its per-node entries
show cluster totals) we build fresh aggregates instead: per-node entries stay per node.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar
from urllib.parse import quote

import aiohttp
import orjson

from ..common.addr import join_host_port, split_host_port
from ..protocol.commands import go_quote
from .extras import add_lifecycle, read_lifecycle, read_replication

T = TypeVar("T")


class UpstreamError(Exception):
    """No upstream answered: upstream's plain ``error`` (not a ``PartialErr``)."""


def qs_escape(text: str) -> str:
    """Go's ``url.QueryEscape``."""
    return quote(text, safe="-_.~").replace("%20", "+")


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
    def from_nsqd_info(cls, info: dict[str, Any], topic_names: list[str], addr: str) -> "Producer":
        broadcast = info.get("broadcast_address", "")
        http_port = int(info.get("http_port", 0))
        hostname = info.get("hostname", "")
        if not broadcast:  # very old nsqd: fall back to the address we were given
            broadcast, http_port = split_host_port(addr)
        if not hostname:
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
        self.host = "*"
        self.count += other.count
        for value in other.percentiles or ():
            if self.percentiles is None:
                self.percentiles = []
            mine = next((p for p in self.percentiles if p["quantile"] == value["quantile"]), None)
            if mine is None:
                mine = {"average": 0, "count": 0, "max": value["max"], "min": value["min"],
                        "quantile": value["quantile"]}
                self.percentiles.append(mine)
            mine["max"] = max(mine["max"], value["max"])
            mine["min"] = min(mine["min"], value["min"])
            mine["count"] += value["count"]
            if mine["count"] == 0:
                mine["average"] = 0
                continue
            mine["average"] += (value["average"] - mine["average"]) * value["count"] / mine["count"]

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


_CHANNEL_SUMS = ("depth", "memory_depth", "backend_depth", "in_flight_count", "deferred_count",
                 "requeue_count", "timeout_count", "message_count")
_LOCALITY = ("zone_local_msg_count", "region_local_msg_count", "global_msg_count")


class ChannelStats:
    """Upstream's ``clusterinfo.ChannelStats``: one node's channel, or the sum over nodes."""

    def __init__(self, node: str, hostname: str, topic: str, channel: str) -> None:
        self.node = node
        self.hostname = hostname
        self.topic_name = topic
        self.channel_name = channel
        self.counts = dict.fromkeys(_CHANNEL_SUMS + ("delivery_msg_count",) + _LOCALITY, 0)
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
        for key in ("depth", "backend_depth", "in_flight_count", "deferred_count",
                    "requeue_count", "timeout_count", "message_count") + _LOCALITY:
            c.counts[key] = int(raw.get(key, 0))
        c.counts["memory_depth"] = c.counts["depth"] - c.counts["backend_depth"]
        c.counts["delivery_msg_count"] = sum(c.counts[k] for k in _LOCALITY)
        c.client_count = int(raw.get("client_count", 0))
        c.lifecycle = read_lifecycle(raw)
        clients = raw.get("clients")
        if clients is not None:
            c.clients = [client_doc(cl, node, producer, now) for cl in clients]
        c.paused = bool(raw.get("paused", False))
        c.e2e = E2eAggregate.from_nsqd(raw.get("e2e_processing_latency"))
        return c

    def add(self, other: "ChannelStats") -> None:
        self.node = "*"
        for key in self.counts:
            self.counts[key] += other.counts[key]
        self.client_count += other.client_count
        add_lifecycle(self.lifecycle, other.lifecycle)
        self.paused = self.paused or other.paused
        self.nodes = (self.nodes or []) + [other]
        self.nodes.sort(key=lambda n: (n.hostname, n.node))
        if self.e2e is None:
            self.e2e = E2eAggregate(topic=self.topic_name, channel=self.channel_name,
                                    host=self.node)
        if other.e2e is not None:
            self.e2e.add(other.e2e)
        if other.clients:
            self.clients = (self.clients or []) + other.clients
            self.clients.sort(key=lambda c: c["hostname"])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "hostname": self.hostname,
                               "topic_name": self.topic_name, "channel_name": self.channel_name}
        for key in _CHANNEL_SUMS[:3] + ("in_flight_count", "deferred_count", "requeue_count",
                                        "timeout_count", "message_count"):
            out[key] = self.counts[key]
        for key in ("delivery_msg_count",) + _LOCALITY:
            if self.counts[key]:
                out[key] = self.counts[key]
        out.update(self.lifecycle)
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
        self.counts = dict.fromkeys(("depth", "memory_depth", "backend_depth", "message_count",
                                     "delivery_msg_count") + _LOCALITY, 0)
        self.lifecycle: dict[str, int] = {}
        self.nodes: list[TopicStats] | None = None
        self.channels: list[ChannelStats] | None = None
        self.paused = False
        self.e2e: E2eAggregate | None = None

    @classmethod
    def from_nsqd(cls, raw: dict[str, Any], node: str, producer: Producer, now: float) -> "TopicStats":
        t = cls(node, producer.hostname, raw.get("topic_name", ""))
        for key in ("depth", "backend_depth", "message_count") + _LOCALITY:
            t.counts[key] = int(raw.get(key, 0))
        t.counts["memory_depth"] = t.counts["depth"] - t.counts["backend_depth"]
        t.counts["delivery_msg_count"] = sum(t.counts[k] for k in _LOCALITY)
        t.lifecycle = read_lifecycle(raw)
        channels = raw.get("channels")
        if channels is not None:
            t.channels = [ChannelStats.from_nsqd(c, node, producer, t.topic_name, now)
                          for c in channels]
        t.paused = bool(raw.get("paused", False))
        t.e2e = E2eAggregate.from_nsqd(raw.get("e2e_processing_latency"))
        return t

    def add(self, other: "TopicStats") -> None:
        self.node = "*"
        for key in self.counts:
            self.counts[key] += other.counts[key]
        add_lifecycle(self.lifecycle, other.lifecycle)
        self.paused = self.paused or other.paused
        for theirs in other.channels or ():
            if self.channels is None:
                self.channels = []
            mine = next((c for c in self.channels if c.channel_name == theirs.channel_name), None)
            if mine is None:
                mine = ChannelStats("*", "", self.topic_name, theirs.channel_name)
                self.channels.append(mine)
            mine.add(theirs)
        self.nodes = (self.nodes or []) + [other]
        self.nodes.sort(key=lambda n: (n.hostname, n.node))
        if self.e2e is None:
            self.e2e = E2eAggregate(topic=self.topic_name, host=self.node)
        if other.e2e is not None:
            self.e2e.add(other.e2e)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "hostname": self.hostname,
                               "topic_name": self.topic_name}
        for key in ("depth", "memory_depth", "backend_depth", "message_count",
                    "delivery_msg_count"):
            out[key] = self.counts[key]
        for key in _LOCALITY:
            if self.counts[key]:
                out[key] = self.counts[key]
        out.update(self.lifecycle)
        out["nodes"] = [n.to_json() for n in self.nodes] if self.nodes is not None else None
        out["channels"] = ([c.to_json() for c in self.channels]
                           if self.channels is not None else None)
        out["paused"] = self.paused
        out["e2e_processing_latency"] = self.e2e.to_json() if self.e2e is not None else None
        return out


def sort_clients_by_node_topology(clients: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upstream's ``ClientStatsByNodeTopology``: by node, then same zone, same region, others."""
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


# --- the client --------------------------------------------------------------------------------

@dataclass
class Result:
    """A value plus the upstream failures that did not prevent it (a ``PartialErr``)."""

    value: Any
    errors: list[str] = field(default_factory=list)
    replication: dict[str, dict[str, Any]] = field(default_factory=dict)  # by node, if reported


class ClusterInfo:
    def __init__(self, session: aiohttp.ClientSession, logger: logging.Logger) -> None:
        self.session = session
        self.logger = logger

    # --- transport -------------------------------------------------------------------------

    async def _request(self, method: str, url: str) -> bytes:
        op = method.capitalize()
        try:
            headers = {"Accept": "application/vnd.nsq; version=1.0"}
            async with self.session.request(method, url, headers=headers) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"got response {resp.status} {resp.reason} "
                                       f"{go_quote(body)}")
                return body
        except asyncio.TimeoutError:
            raise RuntimeError(f"{op} {go_quote(url)}: timeout awaiting response") from None
        except aiohttp.ClientError as err:
            raise RuntimeError(f"{op} {go_quote(url)}: {err}") from None

    async def get_v1(self, url: str) -> Any:
        body = await self._request("GET", url)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as err:
            raise RuntimeError(f"invalid JSON from {url} - {err}") from None

    async def post_v1(self, url: str) -> None:
        await self._request("POST", url)

    async def _each(self, addrs: list[str], fn: Callable[[str], Awaitable[T]],
                    what: str) -> tuple[list[T], list[str]]:
        """Run ``fn`` on every address in parallel: (results, errors); all failed → raise."""
        outcomes = await asyncio.gather(*(fn(a) for a in addrs), return_exceptions=True)
        results: list[T] = []
        errors: list[str] = []
        for out in outcomes:
            if isinstance(out, BaseException):
                if not isinstance(out, Exception):
                    raise out
                errors.append(str(out))
            else:
                results.append(out)
        if len(errors) == len(addrs):
            raise UpstreamError(f"failed to query any {what}: " + "\n".join(errors))
        return results, errors

    # --- lookupd queries ----------------------------------------------------------------------

    async def lookupd_topics(self, lookupds: list[str]) -> Result:
        async def one(addr: str) -> list[str]:
            url = f"http://{addr}/topics"
            self.logger.info("CI: querying nsqlookupd %s", url)
            return (await self.get_v1(url)).get("topics") or []
        results, errors = await self._each(lookupds, one, "nsqlookupd")
        topics = sorted({t for r in results for t in r})
        return Result(topics or None, errors)

    async def lookupd_topic_channels(self, topic: str, lookupds: list[str]) -> Result:
        async def one(addr: str) -> list[str]:
            url = f"http://{addr}/channels?topic={qs_escape(topic)}"
            self.logger.info("CI: querying nsqlookupd %s", url)
            return (await self.get_v1(url)).get("channels") or []
        results, errors = await self._each(lookupds, one, "nsqlookupd")
        channels = sorted({c for r in results for c in r})
        return Result(channels or None, errors)

    async def lookupd_producers(self, lookupds: list[str]) -> Result:
        async def one(addr: str) -> tuple[str, list[dict[str, Any]]]:
            url = f"http://{addr}/nodes"
            self.logger.info("CI: querying nsqlookupd %s", url)
            return addr, (await self.get_v1(url)).get("producers") or []
        results, errors = await self._each(lookupds, one, "nsqlookupd")
        by_addr: dict[str, Producer] = {}
        for addr, raws in results:
            for raw in raws:
                p = Producer.from_lookupd(raw)
                known = by_addr.get(p.tcp_address)
                if known is None:
                    if p.topics:
                        p.topics.sort(key=lambda t: t["topic"])
                    p.remote_addresses = []
                    by_addr[p.tcp_address] = known = p
                assert known.remote_addresses is not None
                known.remote_addresses.append(f"{addr}/{p.remote_address or 'N/A'}")
        producers = list(by_addr.values())
        newest = max((semver_key(p.version) for p in producers), default=semver_key("0.0.0"))
        for p in producers:
            p.out_of_date = semver_key(p.version) < newest
        producers.sort(key=lambda p: (p.hostname, p.http_address))
        return Result(producers, errors)

    async def lookupd_topic_producers(self, topic: str, lookupds: list[str]) -> Result:
        async def one(addr: str) -> list[dict[str, Any]]:
            url = f"http://{addr}/lookup?topic={qs_escape(topic)}"
            self.logger.info("CI: querying nsqlookupd %s", url)
            return (await self.get_v1(url)).get("producers") or []
        results, errors = await self._each(lookupds, one, "nsqlookupd")
        producers: list[Producer] = []
        seen: set[str] = set()
        for raws in results:
            for raw in raws:
                p = Producer.from_lookupd(raw)
                if p.http_address not in seen:
                    seen.add(p.http_address)
                    producers.append(p)
        return Result(producers, errors)

    # --- nsqd queries --------------------------------------------------------------------------

    async def nsqd_topics(self, nsqds: list[str]) -> Result:
        async def one(addr: str) -> list[str]:
            url = f"http://{addr}/stats?format=json"
            self.logger.info("CI: querying nsqd %s", url)
            doc = await self.get_v1(url)
            return [t.get("topic_name", "") for t in doc.get("topics") or ()]
        results, errors = await self._each(nsqds, one, "nsqd")
        topics = sorted({t for r in results for t in r})
        return Result(topics or None, errors)

    async def nsqd_producers(self, nsqds: list[str]) -> Result:
        async def one(addr: str) -> Producer:
            url = f"http://{addr}/info"
            self.logger.info("CI: querying nsqd %s", url)
            info = await self.get_v1(url)
            url = f"http://{addr}/stats?format=json&include_clients=false"
            self.logger.info("CI: querying nsqd %s", url)
            doc = await self.get_v1(url)
            names = [t.get("topic_name", "") for t in doc.get("topics") or ()]
            return Producer.from_nsqd_info(info, names, addr)
        producers, errors = await self._each(nsqds, one, "nsqd")
        return Result(producers, errors)

    async def nsqd_topic_producers(self, topic: str, nsqds: list[str]) -> Result:
        async def one(addr: str) -> Producer | None:
            url = f"http://{addr}/stats?format=json&topic={qs_escape(topic)}&include_clients=false"
            self.logger.info("CI: querying nsqd %s", url)
            doc = await self.get_v1(url)
            names = [t.get("topic_name", "") for t in doc.get("topics") or ()]
            if topic not in names:
                return None
            url = f"http://{addr}/info"
            self.logger.info("CI: querying nsqd %s", url)
            return Producer.from_nsqd_info(await self.get_v1(url), names, addr)
        results, errors = await self._each(nsqds, one, "nsqd")
        return Result([p for p in results if p is not None], errors)

    async def producers(self, lookupds: list[str], nsqds: list[str]) -> Result:
        if lookupds:
            return await self.lookupd_producers(lookupds)
        return await self.nsqd_producers(nsqds)

    async def topic_producers(self, topic: str, lookupds: list[str], nsqds: list[str]) -> Result:
        if lookupds:
            return await self.lookupd_topic_producers(topic, lookupds)
        return await self.nsqd_topic_producers(topic, nsqds)

    async def nsqd_stats(self, producers: list[Producer], topic: str = "", channel: str = "",
                         include_clients: bool = True) -> Result:
        """``(topic stats per node, channel aggregates by key)``; upstream's ``GetNSQDStats``.

        Keys are channel names when ``topic`` is given, else ``topic:channel``. With no
        producers at all this fails like upstream ("failed to query any nsqd: ")."""
        now = time.time()

        async def one(p: Producer) -> tuple[Producer, dict[str, Any]]:
            url = f"http://{p.http_address}/stats?format=json"
            if topic:
                url += "&topic=" + qs_escape(topic)
                if channel:
                    url += "&channel=" + qs_escape(channel)
            if not include_clients:
                url += "&include_clients=false"
            self.logger.info("CI: querying nsqd %s", url)
            return p, await self.get_v1(url)

        results, errors = await self._each(producers, one, "nsqd")  # type: ignore[arg-type]
        topic_list: list[TopicStats] = []
        channel_map: dict[str, ChannelStats] = {}
        replication: dict[str, dict[str, Any]] = {}
        for p, doc in results:
            node = p.http_address
            if extra := read_replication(doc):
                replication[node] = extra
            for raw in doc.get("topics") or ():
                ts = TopicStats.from_nsqd(raw, node, p, now)
                if topic and ts.topic_name != topic:
                    continue
                topic_list.append(ts)
                for cs in ts.channels or ():
                    key = cs.channel_name if topic else f"{ts.topic_name}:{cs.channel_name}"
                    agg = channel_map.get(key)
                    if agg is None:
                        agg = channel_map[key] = ChannelStats(node, "", ts.topic_name,
                                                              cs.channel_name)
                    agg.add(cs)
        topic_list.sort(key=lambda t: (t.hostname, t.node))
        return Result((topic_list, channel_map), errors, replication)

    # --- actions -------------------------------------------------------------------------------

    async def _post_all(self, urls: list[str], what: str) -> list[str]:
        """POST each URL one after another (as upstream); every failure is a warning."""
        errors = []
        for url in urls:
            self.logger.info("CI: querying %s %s", what, url)
            try:
                await self.post_v1(url)
            except Exception as err:
                errors.append(str(err))
        return errors

    async def lookupd_post(self, lookupds: list[str], uri: str, qs: str) -> list[str]:
        return await self._post_all([f"http://{a}/{uri}?{qs}" for a in lookupds], "nsqlookupd")

    async def producers_post(self, producers: list[Producer], uri: str, qs: str) -> list[str]:
        return await self._post_all([f"http://{p.http_address}/{uri}?{qs}" for p in producers],
                                    "nsqd")

    async def tombstone_node_for_topic(self, topic: str, node: str,
                                       lookupds: list[str]) -> list[str]:
        qs = f"topic={qs_escape(topic)}&node={qs_escape(node)}"
        errors = await self.lookupd_post(lookupds, "topic/tombstone", qs)
        found = await self.nsqd_producers([node])
        errors += found.errors
        errors += await self.producers_post(found.value, "topic/delete",
                                            f"topic={qs_escape(topic)}")
        return errors

    async def create_topic_channel(self, topic: str, channel: str,
                                   lookupds: list[str]) -> list[str]:
        errors = await self.lookupd_post(lookupds, "topic/create", f"topic={qs_escape(topic)}")
        if channel:
            qs = f"topic={qs_escape(topic)}&channel={qs_escape(channel)}"
            errors += await self.lookupd_post(lookupds, "channel/create", qs)
            found = await self.lookupd_topic_producers(topic, lookupds)
            errors += found.errors
            errors += await self.producers_post(found.value, "channel/create", qs)
        return errors

    async def delete_topic(self, topic: str, lookupds: list[str], nsqds: list[str]) -> list[str]:
        found = await self.topic_producers(topic, lookupds, nsqds)
        qs = f"topic={qs_escape(topic)}"
        errors = found.errors + await self.lookupd_post(lookupds, "topic/delete", qs)
        return errors + await self.producers_post(found.value, "topic/delete", qs)

    async def delete_channel(self, topic: str, channel: str, lookupds: list[str],
                             nsqds: list[str]) -> list[str]:
        found = await self.topic_producers(topic, lookupds, nsqds)
        qs = f"topic={qs_escape(topic)}&channel={qs_escape(channel)}"
        errors = found.errors + await self.lookupd_post(lookupds, "channel/delete", qs)
        return errors + await self.producers_post(found.value, "channel/delete", qs)

    async def topic_channel_action(self, topic: str, channel: str, action: str,
                                   lookupds: list[str], nsqds: list[str]) -> list[str]:
        """``action`` is pause, unpause or empty; sent to every nsqd producing the topic."""
        found = await self.topic_producers(topic, lookupds, nsqds)
        if channel:
            uri, qs = f"channel/{action}", f"topic={qs_escape(topic)}&channel={qs_escape(channel)}"
        else:
            uri, qs = f"topic/{action}", f"topic={qs_escape(topic)}"
        return found.errors + await self.producers_post(found.value, uri, qs)
