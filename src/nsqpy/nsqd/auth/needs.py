"""What a route of nsqd's HTTP API asks of the caller's secret (docs/security.md, "AUTH over
HTTP"), declared where the route is registered (``Route(..., auth=...)``).

A :class:`Need` turns a request's query into *checks*, ``(grant, topic, channel)`` triples that
the auth server's answer must all pass (:func:`nsqpy.nsqd.auth.http.permitted`). Declaring it
with the route, and checking it in one place at the routing step, means a handler never checks
by hand and a route added later cannot forget: one registered without a Need gets
:data:`NODE`, the strictest.

Sans I/O and cheap to import: every feature's routes import it, with or without an auth server.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from ...common.goweb import first_value

#: V2's PUB check on the topic
PUBLISH = "publish"
#: V2's SUB check on topic and channel; with channel ``""`` a read of the whole topic
SUBSCRIBE = "subscribe"
#: either of the two on the topic (what a V2 PUB or SUB may create)
PUBLISH_OR_SUBSCRIBE = "publish-or-subscribe"
#: both: publish on the topic, subscribe on it (or on the channel)
ADMIN = "admin"
#: any secret the auth server accepted with at least one authorization
ANY = "any"

#: the names a grant must cover for the routes about the whole node (as replication's
#: ``nsqpy-replication``): ``.*`` covers them, a grant on the node's topics alone does not
NODE_NAME = "nsqpy-admin"

Check = tuple[str, str, str]
Query = dict[str, list[str]]


class Need(NamedTuple):
    """``checks(query)`` gives the checks, or None when the arguments they need are missing
    (the handler then reports that, before any effect). ``strict``: one of upstream's routes,
    asked only with ``--http-auth-required``; nsqpy's own are asked whenever an auth server is
    set. ``open``: never asked (``/ping``)."""

    checks: Callable[[Query], list[Check] | None]
    strict: bool = False
    open: bool = False
    #: for a path nsqpy extends: whether this request is upstream's route (strict, as above);
    #: ``/channel/create`` without ``from=`` is, with it is nsqpy's
    upstream_when: Callable[[Query], bool] | None = None


def _on_topic(grant: str, channel: bool) -> Callable[[Query], list[Check] | None]:
    def checks(query: Query) -> list[Check] | None:
        topic = first_value(query, "topic")
        name = first_value(query, "channel") if channel else ""
        if topic is None or name is None:
            return None
        return [(grant, topic, name)]
    return checks


def on_topic(grant: str, *, strict: bool = False) -> Need:
    """The route's ``topic`` argument (e.g. ``/history/read``: ``on_topic(SUBSCRIBE)``)."""
    return Need(_on_topic(grant, False), strict)


def on_channel(grant: str, *, strict: bool = False) -> Need:
    """The route's ``topic`` and ``channel`` arguments."""
    return Need(_on_topic(grant, True), strict)


def _node(query: Query) -> list[Check]:
    return [(ADMIN, NODE_NAME, NODE_NAME)]


def _any(query: Query) -> list[Check]:
    return [(ANY, "", "")]


def _stats(query: Query) -> list[Check]:
    topic = first_value(query, "topic")
    if not topic:  # (an empty filter is no filter, as upstream's /stats reads it)
        return _node(query)
    return [(SUBSCRIBE, topic, first_value(query, "channel") or "")]


def on_channel_unless(key: str, grant: str) -> Need:
    """The ``topic`` and ``channel`` arguments; upstream's route (strict) without ``key``."""
    return Need(_on_topic(grant, True), upstream_when=lambda query: key not in query)


def each(checks: Callable[[Query], list[Check] | None], *, strict: bool = False) -> Need:
    """A route whose checks come from elsewhere (the leases a call names)."""
    return Need(checks, strict)


#: the routes about the whole node (``/drain``, ``/config``, ``/metrics``...)
NODE = Need(_node)
NODE_STRICT = Need(_node, strict=True)
#: ``/info``: who is asking must be known, nothing more
ANY_STRICT = Need(_any, strict=True)
#: ``/stats``: the topic (and channel) it is filtered on, the node without a filter
STATS_STRICT = Need(_stats, strict=True)
#: ``/ping``: health checks
OPEN = Need(_any, open=True)


def applies(need: Need | None, strict: bool) -> bool:
    """Whether a route with ``need`` is checked (``strict``: ``--http-auth-required``)."""
    if need is None:
        return True
    return not need.open and (strict or not need.strict)


__all__ = ["ADMIN", "ANY", "ANY_STRICT", "NODE", "NODE_NAME", "NODE_STRICT", "Need", "OPEN",
           "PUBLISH", "PUBLISH_OR_SUBSCRIBE", "STATS_STRICT", "SUBSCRIBE", "Check", "applies",
           "each", "on_channel", "on_channel_unless", "on_topic"]
