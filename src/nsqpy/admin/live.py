"""Live graphs without graphite (beyond upstream, opt-in with ``--live-interval``).

Upstream's nsqadmin shows no rate and no graph unless statsd + graphite are set up. With
``--live-interval=5s`` nsqadmin samples every nsqd's ``/stats`` itself (the same requests its
pages make) and keeps a bounded in-memory history (``--live-history``, default 1h) per topic and
channel, per node and summed over nodes. ``GET /api/live`` serves it; the pages draw the numbers and
small graphs from it and refresh them on their own.

:class:`LiveHistory` is the sans-I/O part (stats in, series out, unit-tested); :class:`LiveSampler`
is the thin asyncio loop around it. Memory is bounded: at most ``history / interval`` points per
series, and a series that has not been seen for a whole history is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Iterable, Mapping

from ..common.goweb import ApiError
from .clusterinfo import ClusterInfo, UpstreamError
from .stats import TopicStats

#: what each point holds, in this order
FIELDS = ("depth", "in_flight_count", "message_count", "deferred_count", "requeue_count",
          "timeout_count")
#: counters: served as per-second rates between consecutive points
COUNTERS = {"message_count": "rate", "requeue_count": "requeue_rate",
            "timeout_count": "timeout_rate"}

Key = tuple[str, str, str]  # (topic, channel, node); channel "" = the topic; node "*" = all nodes
Point = tuple[float, tuple[int, ...]]


def _topic_point(ts: TopicStats) -> tuple[int, ...]:
    chans = ts.channels or ()
    return (ts.counts["depth"], sum(c.counts["in_flight_count"] for c in chans),
            ts.counts["message_count"], sum(c.counts["deferred_count"] for c in chans),
            sum(c.counts["requeue_count"] for c in chans),
            sum(c.counts["timeout_count"] for c in chans))


def _add(a: tuple[int, ...] | None, b: tuple[int, ...]) -> tuple[int, ...]:
    return b if a is None else tuple(x + y for x, y in zip(a, b))


class LiveHistory:
    """Series of points per (topic, channel, node), plus ``("*", "", "*")``: the whole cluster
    (depth of every topic, in-flight of every channel, messages summed over channels as
    nsqadmin's counter page counts them)."""

    def __init__(self, points: int) -> None:
        self.points = max(2, points)
        self.series: dict[Key, deque[Point]] = {}

    def record(self, now: float, topics: Iterable[TopicStats]) -> None:
        snapshot: dict[Key, tuple[int, ...]] = {}
        cluster: tuple[int, ...] | None = None
        for ts in topics:
            name, node = ts.topic_name, ts.node
            point = _topic_point(ts)
            snapshot[(name, "", node)] = point
            snapshot[(name, "", "*")] = _add(snapshot.get((name, "", "*")), point)
            counted = 0
            for cs in ts.channels or ():
                cpoint = tuple(cs.counts[f] for f in FIELDS)
                counted += cs.counts["message_count"]
                snapshot[(name, cs.channel_name, node)] = cpoint
                key = (name, cs.channel_name, "*")
                snapshot[key] = _add(snapshot.get(key), cpoint)
            # the counter page's total: messages finished through channels, not published
            cluster = _add(cluster, point[:2] + (counted,) + point[3:])
        if cluster is not None:
            snapshot[("*", "", "*")] = cluster
        for key, point in snapshot.items():
            series = self.series.get(key)
            if series is None:
                series = self.series[key] = deque(maxlen=self.points)
            series.append((now, point))
        horizon = now - self.points * self._step()
        for key in [k for k, s in self.series.items() if s[-1][0] < horizon]:
            del self.series[key]

    def _step(self) -> float:
        for s in self.series.values():
            if len(s) >= 2:
                return (s[-1][0] - s[0][0]) / (len(s) - 1) or 1.0
        return 1.0

    def query(self, topic: str = "", channel: str | None = None, node: str = "",
              last: int = 0) -> list[dict[str, Any]]:
        """Matching series as JSON-ready dicts, sorted; empty filters match everything, except
        ``channel=""`` which selects the topics' own series; ``last`` keeps that many points."""
        out = []
        for (t, c, n), points in sorted(self.series.items()):
            if (topic and t != topic) or (channel is not None and c != channel) \
                    or (node and n != node):
                continue
            if 0 < last < len(points):
                points = deque(list(points)[-last:])
            out.append(series_doc(t, c, n, points))
        return out


def series_doc(topic: str, channel: str, node: str, points: deque[Point]) -> dict[str, Any]:
    """One series: timestamps (unix s), every field as sampled, and the counters also as rates
    per second (``None`` at the first point and where a counter went down: nsqd restarted)."""
    doc: dict[str, Any] = {"topic": topic, "channel": channel, "node": node,
                           "t": [round(t, 3) for t, _ in points]}
    for i, name in enumerate(FIELDS):
        if name in COUNTERS:
            rates: list[float | None] = [None]
            for (t0, p0), (t1, p1) in zip(points, list(points)[1:]):
                delta, dt = p1[i] - p0[i], t1 - t0
                rates.append(round(delta / dt, 3) if delta >= 0 and dt > 0 else None)
            doc[COUNTERS[name]] = rates
        doc[name] = [p[i] for _, p in points]
    return doc


class QuietLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The sampler's cluster queries log at debug, not info: one ``CI: querying`` line per nsqd
    every interval would drown the lines operators read (the pages' own queries stay at info)."""

    def info(self, msg: object, *args: object, **kwargs: object) -> None:
        self.debug(msg, *args, **kwargs)  # type: ignore[arg-type]


class LiveSampler:
    """Every ``interval`` seconds: the producers, then their ``/stats`` (without clients)."""

    def __init__(self, opts: Any, logger: logging.Logger, ci: ClusterInfo) -> None:
        self.opts = opts  # read per round: PUT /config may change the lookupd addresses
        self.logger = logger
        self.ci = ci
        self.interval = opts.live_interval
        self.history = LiveHistory(int(opts.live_history / opts.live_interval))
        self.last_error = ""
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def sample(self) -> None:
        opts = self.opts
        try:
            producers = await self.ci.producers(opts.lookupd_http_address, opts.nsqd_http_address)
            stats = await self.ci.nsqd_stats(producers.value, "", "", include_clients=False)
        except UpstreamError as err:
            self.last_error = str(err)
            self.logger.warning("LIVE: sampling failed - %s", err)
            return
        self.last_error = "; ".join(producers.errors + stats.errors)
        self.history.record(time.time(), stats.value[0])

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            try:
                await self.sample()
            except Exception as err:  # a bug must not end sampling for good
                self.logger.exception("LIVE: sampling failed - %s", err)
            # a slow round is not made up for with a burst of samples
            next_at = max(next_at + self.interval, loop.time())
            await asyncio.sleep(next_at - loop.time())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass


def live_document(sampler: LiveSampler, query: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/live[?topic=&channel=&node=&points=]``: ``{"interval", "series", "message"}``."""
    try:
        last = int(query.get("points", "0"))
    except ValueError:
        raise ApiError(400, "INVALID_ARG_POINTS") from None
    series = sampler.history.query(query.get("topic", ""), query.get("channel"),
                                   query.get("node", ""), last)
    message = f"WARNING: {sampler.last_error}" if sampler.last_error else ""
    return {"interval": sampler.interval, "series": series, "message": message}
