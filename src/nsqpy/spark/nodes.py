"""The nsqd a query reads, as the driver sees them: discovery, the lease probe, nsqd's HTTP API.

Used where the source decides its mode (``mode.py``) and by the executor-side reader's driver
half (``partitioned.py``). Every call here is blocking (urllib, or a short-lived event loop for
the TCP probe): they run in Spark's planner and source-runner processes, between batches.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

import orjson

from nsqpy.client import NSQConnection, NSQError
from nsqpy.client.addr import parse_address
from nsqpy.client.httpauth import bearer, refusal
from nsqpy.client.lookupd import ACCEPT, lookup_url
from nsqpy.common.addr import join_host_port

from .options import connection_options

log = logging.getLogger("nsqpy.spark")
HTTP_TIMEOUT = 10.0


@dataclass(frozen=True)
class Node:
    """One nsqd: its TCP address (what readers dial, the ``nsqd_address`` column) and the base
    URL of its HTTP API (``http://host:port``), or ``""`` when not known yet."""

    tcp: str
    http: str = ""


class NsqdHttpError(Exception):
    """nsqd's HTTP API answered with an error status (``message`` is nsqd's text)."""

    def __init__(self, status: int, message: str) -> None:
        meaning = refusal(status, message)  # (an auth refusal says what it means: authSecret)
        super().__init__(f"HTTP {status} {message}" + (f" - {meaning} (option authSecret)"
                                                        if meaning else ""))
        self.status = status
        self.message = message


def http_call(url: str, method: str = "GET", timeout: float = HTTP_TIMEOUT,
              secret: str | None = None) -> Any:
    """nsqd's JSON answer (None for an empty body); NsqdHttpError for an error status, OSError
    when it cannot be reached. ``secret``: the ``authSecret`` option, for an nsqd with an auth
    server (never sent to nsqlookupd)."""
    req = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method,
                                 headers={"Accept": ACCEPT, **bearer(secret)})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as err:
        text = err.read()
        try:
            message = str(orjson.loads(text).get("message", ""))
        except (orjson.JSONDecodeError, AttributeError):
            message = text.decode("utf-8", "replace")
        raise NsqdHttpError(err.code, message) from None
    return orjson.loads(body) if body else None


def query(**params: Any) -> str:
    return urllib.parse.urlencode(params)


# --- discovery ---------------------------------------------------------------------------------


def lookupd_nodes(lookupd: list[str], topic: str) -> list[Node] | None:
    """The producers of ``topic`` over every lookupd (union), or None when none answered."""
    found: dict[str, Node] = {}
    answered = False
    for addr in lookupd:
        try:
            data = http_call(lookup_url(addr, topic))
        except NsqdHttpError as err:
            if err.status == 404:  # TOPIC_NOT_FOUND: nobody produces it (yet)
                answered = True
            else:
                log.warning("nsq source: lookupd %s: %s", addr, err)
            continue
        except (OSError, ValueError) as err:
            log.warning("nsq source: lookupd %s: %s", addr, err)
            continue
        answered = True
        if isinstance(data, dict) and "status_code" in data and isinstance(data.get("data"), dict):
            data = data["data"]
        for p in (data or {}).get("producers") or ():
            host = p.get("broadcast_address") or p.get("address")
            if not host or not isinstance(p.get("tcp_port"), int):
                continue
            tcp = join_host_port(str(host), p["tcp_port"])
            found[tcp] = Node(tcp, "http://" + join_host_port(str(host), p.get("http_port")))
    return list(found.values()) if answered else None


def configured_nodes(nsqd_tcp: list[str], nsqd_http: list[str]) -> list[Node]:
    """``nsqd_tcp_addresses``, paired with ``nsqd_http_addresses`` when both lists have the same
    length (otherwise the HTTP port comes from the lease probe)."""
    https = [a if "://" in a else "http://" + a for a in nsqd_http]
    if len(https) != len(nsqd_tcp):
        https = [""] * len(nsqd_tcp)
    return [Node(tcp, http.rstrip("/")) for tcp, http in zip(nsqd_tcp, https)]


# --- the lease probe ---------------------------------------------------------------------------


async def _probe(tcp: str, settings: dict[str, Any]) -> dict[str, Any] | None:
    host, port = parse_address(tcp)
    opts = connection_options(settings, identify_extra={"lease": ""},
                              user_agent=f"{settings['user_agent']} probe")
    conn = NSQConnection(host, port, opts)
    try:
        answer = await conn.connect()
    finally:
        conn.close()
    lease = answer.get("lease")
    return lease if isinstance(lease, dict) else None


def probe(node: Node, settings: dict[str, Any]) -> tuple[bool, Node, dict[str, Any] | None]:
    """Ask one nsqd whether it has leases (docs/leases.md §3: IDENTIFY ``lease: ""``).

    ``(reached, node, answer)``: ``answer`` is the ``lease`` part of IDENTIFY's answer, None when
    the node does not announce leases (upstream nsqd, ours without ``--leases``); the node comes
    back with its HTTP address filled in from the answer when it was not known."""
    try:
        answer = asyncio.run(_probe(node.tcp, settings))
    except (OSError, NSQError, TimeoutError, ValueError) as err:
        log.warning("nsq source: cannot reach %s to ask for leases: %s", node.tcp, err)
        return False, node, None
    if answer is not None and not node.http:
        host, _ = parse_address(node.tcp)
        node = Node(node.tcp, "http://" + join_host_port(host, int(answer.get("http_port", 4151))))
    return True, node, answer


# --- the channel on one nsqd -------------------------------------------------------------------


def ensure_channel(node: Node, topic: str, channel: str, secret: str | None) -> None:
    """Create the topic and the channel, so messages published from now on wait for us (a SUB
    would do it; the executors only connect once there is something to read)."""
    http_call(f"{node.http}/topic/create?{query(topic=topic)}", "POST", secret=secret)
    http_call(f"{node.http}/channel/create?{query(topic=topic, channel=channel)}", "POST",
              secret=secret)


def channel_state(node: Node, topic: str, channel: str,
                  secret: str | None) -> dict[str, int] | None:
    """``depth``, ``deferred_count``, ``in_flight_count``, ``lease_held_count`` of the channel on
    one nsqd (zeros when it does not exist), or None when nsqd cannot be read."""
    url = (f"{node.http}/stats?"
           f"{query(format='json', topic=topic, channel=channel, include_clients='false', include_mem='false')}")
    try:
        stats = http_call(url, secret=secret)
    except (OSError, ValueError, NsqdHttpError) as err:
        log.warning("nsq source: %s/stats: %s", node.http, err)
        return None
    if isinstance(stats, dict) and "data" in stats and "topics" not in stats:
        stats = stats["data"]
    for t in (stats or {}).get("topics") or ():
        for c in t.get("channels") or ():
            if c.get("channel_name") == channel:
                return {key: int(c.get(key, 0)) for key in
                        ("depth", "deferred_count", "in_flight_count", "lease_held_count")}
    return {"depth": 0, "deferred_count": 0, "in_flight_count": 0, "lease_held_count": 0}
