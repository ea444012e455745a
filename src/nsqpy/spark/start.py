"""Where a streaming query starts: option ``startingPosition`` (docs/spark.md, "Starting in the past").

``latest`` (the default) | ``earliest`` | an RFC 3339 time | unix milliseconds. The query's channel
is made on every nsqd of the topic while the query is *defined* (``load()``, which asks the source
for its schema) and again, for a query whose checkpoint is new, when Spark asks for the initial
offset: so it exists before the first batch, and messages published while the query starts wait
in it (with ``latest`` too: a plain ``/channel/create``).

A channel that already exists is left as it is: it is the position of the queries (or other
consumers) already reading it; ``/channel/rewind`` moves it. A new channel from a point in the past
is ``POST /channel/create?from=P``, which needs nsqd's history: an nsqd without it fails the query
definition with an error naming it (upstream's nsqd would ignore ``from`` and start at "now").
"""

from __future__ import annotations

import logging
from typing import Any

from nsqpy.client.history import (
    LATEST, HistoryError, HistoryUnavailable, Point, fetch_segments, format_point,
)

from .nodes import Node, NsqdHttpError, configured_nodes, http_call, lookupd_nodes, query

log = logging.getLogger("nsqpy.spark")


def http_nodes(cfg: Any) -> tuple[list[Node], list[str]]:
    """The nsqd whose HTTP API is known (given, or listed by nsqlookupd), and the TCP addresses of
    the ones whose HTTP API is not."""
    nodes = [n for n in configured_nodes(cfg.nsqd_tcp, cfg.nsqd_http) if n.http]
    unknown = [n.tcp for n in configured_nodes(cfg.nsqd_tcp, cfg.nsqd_http) if not n.http]
    if cfg.lookupd_http:
        seen = {n.tcp for n in nodes}
        for node in lookupd_nodes(cfg.lookupd_http, cfg.topic) or ():
            if node.tcp not in seen:
                nodes.append(node)
                seen.add(node.tcp)
                if node.tcp in unknown:
                    unknown.remove(node.tcp)
    return nodes, unknown


def channel_exists(node: Node, topic: str, channel: str, secret: str | None) -> bool:
    stats = http_call(f"{node.http}/stats?{query(format='json', topic=topic, channel=channel, include_clients='false')}",
                      secret=secret)
    if isinstance(stats, dict) and "data" in stats and "topics" not in stats:
        stats = stats["data"]
    return any(c.get("channel_name") == channel
               for t in (stats or {}).get("topics") or () if t.get("topic_name") == topic
               for c in t.get("channels") or ())


def prepare_channel(cfg: Any) -> None:
    """Make the query's channel on every nsqd known now, from ``cfg.starting_position``."""
    point: Point = getattr(cfg, "starting_position", LATEST)
    nodes, unknown = http_nodes(cfg)
    if point != LATEST and unknown:
        raise ValueError(f"nsq option startingPosition={format_point(point)} needs each nsqd's HTTP "
                         f"address: give nsqd_http_addresses (paired with nsqd_tcp_addresses) or "
                         f"lookupd_http_addresses ({', '.join(unknown)} has none)")
    if point == LATEST and cfg.channel.endswith("#ephemeral"):
        return  # an ephemeral channel made now would outlive a query that never connects
    for node in nodes:
        try:
            _prepare_on(node, cfg.topic, cfg.channel, point, cfg.connection.get("auth_secret"))
        except (OSError, NsqdHttpError) as err:
            if point != LATEST:
                raise RuntimeError(f"nsq source: cannot create {cfg.topic}/{cfg.channel} from "
                                   f"{format_point(point)} at {node.http}: {err}") from None
            log.warning("nsq source: cannot create %s/%s at %s: %s", cfg.topic, cfg.channel, node.http, err)


def _prepare_on(node: Node, topic: str, channel: str, point: Point, secret: str | None) -> None:
    if channel_exists(node, topic, channel, secret):
        if point != LATEST:
            log.info("nsq source: %s/%s exists at %s: it goes on from where it is "
                     "(startingPosition only makes new channels; /channel/rewind moves one)",
                     topic, channel, node.tcp)
        return
    http_call(f"{node.http}/topic/create?{query(topic=topic)}", "POST", secret=secret)
    if point == LATEST:
        http_call(f"{node.http}/channel/create?{query(topic=topic, channel=channel)}", "POST",
                  secret=secret)
        return
    try:  # upstream's /channel/create would ignore `from`: make sure this nsqd keeps history
        fetch_segments(node.http, topic, secret=secret)
    except HistoryUnavailable as err:
        raise RuntimeError(f"nsq source: startingPosition={format_point(point)}: {err}") from None
    except HistoryError as err:
        raise RuntimeError(f"nsq source: startingPosition={format_point(point)} for topic "
                           f"{topic!r}: {err}") from None
    http_call(f"{node.http}/channel/create?{query(topic=topic, channel=channel, **{'from': format_point(point)})}",
              "POST", secret=secret)
    log.info("nsq source: created %s/%s at %s from %s", topic, channel, node.tcp, format_point(point))
