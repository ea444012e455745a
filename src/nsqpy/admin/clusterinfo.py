"""What nsqadmin knows about the cluster, asked of nsqlookupd and nsqd over HTTP on each request.

This follows upstream's ``internal/clusterinfo/data.go`` (reference §4.3): every upstream is
queried in parallel; when *all* of them fail the call raises :class:`UpstreamError` (the handler
answers 502 ``UPSTREAM_ERROR: ...``), when only some fail the result comes back with the failures
as warnings (the handler answers 200 with ``"message": "WARNING: ..."``). Actions POST to each
upstream in turn and every failure is a warning, as upstream's. The documents themselves are
built in :mod:`.stats`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar
from urllib.parse import quote

from .extras import read_replication
from .stats import ChannelStats, Producer, TopicStats, semver_key
from .v1client import RequestError, V1Client

T = TypeVar("T")


class UpstreamError(Exception):
    """No upstream answered: upstream's plain ``error`` (not a ``PartialErr``)."""


def qs_escape(text: str) -> str:
    """Go's ``url.QueryEscape``."""
    return quote(text, safe="-_.~").replace("%20", "+")


@dataclass
class Result:
    """A value plus the upstream failures that did not prevent it (a ``PartialErr``)."""

    value: Any
    errors: list[str] = field(default_factory=list)
    replication: dict[str, dict[str, Any]] = field(default_factory=dict)  # by node, if reported


class ClusterInfo:
    """Upstream's ``clusterinfo.ClusterInfo`` over a :class:`V1Client`."""

    def __init__(self, client: V1Client, logger: logging.Logger | logging.LoggerAdapter) -> None:
        self.client = client
        self.logger = logger
        self.get_v1 = client.get_v1
        self.post_v1 = client.post_v1

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
        # by hostname only, as upstream: nodes of one host keep nsqlookupd's order
        producers.sort(key=lambda p: p.hostname)
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
            return Producer.from_nsqd_info(await self.get_v1(url), names, addr, fallback=True)
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
        # upstream takes the answers as they arrive and sorts by hostname only; among equal
        # hostnames (nodes on one machine) the node address decides here, so pages stay put
        results.sort(key=lambda r: (r[0].hostname, r[0].http_address))
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
        return Result((topic_list, channel_map), errors, replication)

    async def history_segments(self, producers: list[Producer], topic: str, start: str) -> Result:
        """Every producer's ``/history/segments?topic=&from=`` (nsqpy's history, for the rewind
        confirmation); a node that refuses (no history there) is a warning."""
        async def one(p: Producer) -> dict[str, Any]:
            url = (f"http://{p.http_address}/history/segments?topic={qs_escape(topic)}"
                   f"&from={qs_escape(start)}")
            self.logger.info("CI: querying nsqd %s", url)
            return await self.get_v1(url)  # type: ignore[no-any-return]

        results, errors = await self._each(producers, one, "nsqd")  # type: ignore[arg-type]
        return Result(results, errors)

    # --- actions -------------------------------------------------------------------------------

    async def _post_all(self, urls: list[str], what: str) -> list[str]:
        """POST each URL one after another (as upstream); every failure is a warning."""
        errors = []
        for url in urls:
            self.logger.info("CI: querying %s %s", what, url)
            try:
                await self.post_v1(url)
            except RequestError as err:
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
                                   lookupds: list[str], nsqds: list[str], extra: str = "") -> list[str]:
        """``action`` is pause, unpause or empty (or a channel's rewind, ``extra`` its ``&to=``);
        sent to every nsqd producing the topic."""
        found = await self.topic_producers(topic, lookupds, nsqds)
        if channel:
            uri = f"channel/{action}"
            qs = f"topic={qs_escape(topic)}&channel={qs_escape(channel)}{extra}"
        else:
            uri, qs = f"topic/{action}", f"topic={qs_escape(topic)}"
        return found.errors + await self.producers_post(found.value, uri, qs)
