"""The lease routes (docs/leases.md §5), served next to upstream's only with ``--leases``.

``POST /lease/fin``, ``/lease/requeue``, ``/lease/touch`` act on ``group=G&upto=N`` (every lease of
group G with seq <= N: Spark's commit is cumulative) or on one ``name=L``; ``GET /leases`` lists
them. Errors in upstream's shape, ``{"message": ...}``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from ...common.goweb import ApiError, first_value
from ...common.http_api import v1_json
from ...httpserver import Request
from ..auth.needs import SUBSCRIBE, Check, each
from ..http import Route
from .names import is_valid_group, parse_name, parse_seq

if TYPE_CHECKING:
    from ..http import NsqdHTTP
    from .lease import Lease
    from .registry import Leases


def selected(leases: "Leases", query: dict[str, list[str]]) -> list["Lease"]:
    """The leases a call names; ApiError when its arguments are bad or nothing matches."""
    name = first_value(query, "name")
    group = first_value(query, "group")
    if name is not None and group is not None:
        raise ApiError(400, "INVALID_REQUEST")
    if name is not None:
        if parse_name(name) is None:
            raise ApiError(400, "INVALID_LEASE")
        lease = leases.by_name.get(name)
        found = [lease] if lease is not None else []
    else:
        if group is None:
            raise ApiError(400, "MISSING_ARG_GROUP")
        if not is_valid_group(group):
            raise ApiError(400, "INVALID_GROUP")
        upto = first_value(query, "upto")
        if upto is None:
            raise ApiError(400, "MISSING_ARG_UPTO")
        seq = parse_seq(upto)
        if seq is None:
            raise ApiError(400, "INVALID_ARG_UPTO")
        found = leases.select(group, seq)
    if not found:
        raise ApiError(404, "LEASE_NOT_FOUND")
    return found


def _subscribed(found: list["Lease"]) -> list[Check]:
    """What a secret needs to act on or list leases: subscribe on each one's topic and channel
    (one without a channel yet holds nothing)."""
    return [(SUBSCRIBE, lease.channel.topic_name, lease.channel.name)
            for lease in found if lease.channel is not None]


def lease_routes(api: "NsqdHTTP") -> list[Route]:
    leases: "Leases" = api.nsqd.leases

    def action(act: Callable[[list["Lease"]], int]) -> Callable[[Request], Any]:
        def handler(request: Request) -> Any:
            if api.nsqd.exiting:
                raise ApiError(503, "EXITING")
            found = selected(leases, api.query(request))
            messages = act(found)
            return v1_json({"leases": len(found), "messages": messages})
        return handler

    def listed(query: dict[str, list[str]]) -> list[tuple["Lease", dict[str, Any]]]:
        group = first_value(query, "group")
        topic = first_value(query, "topic")
        channel = first_value(query, "channel")
        now = time.monotonic()
        out = []
        for lease in sorted(leases.by_name.values(), key=lambda lease: lease.created):
            doc = lease.describe(now)
            if ((group is None or lease.parts[0] == group)
                    and (topic is None or doc["topic"] == topic)
                    and (channel is None or doc["channel"] == channel)):
                out.append((lease, doc))
        return out

    def listing(request: Request) -> Any:
        return v1_json({"leases": [doc for _, doc in listed(api.query(request))]})

    # with an auth server: subscribe on every lease a call acts on or lists (docs/security.md)
    named = each(lambda query: _subscribed(selected(leases, query)))
    return [
        Route("POST", "/lease/fin", action(leases.finish), auth=named),
        Route("POST", "/lease/requeue", action(leases.requeue), auth=named),
        Route("POST", "/lease/touch", action(leases.renew), auth=named),
        Route("GET", "/leases", listing,
              auth=each(lambda query: _subscribed([lease for lease, _ in listed(query)]))),
    ]
