"""Small HTTP helpers for the replication tests (tests/replication)."""

from __future__ import annotations

import urllib.request

import orjson

from helpers.polling import wait_for  # noqa: F401  (the replication tests import it from here)


def get_json(node, path: str):
    with urllib.request.urlopen(f"http://{node.http_address}{path}", timeout=5) as resp:
        return orjson.loads(resp.read())


def post(node, path: str, body: bytes = b"") -> int:
    if path.startswith("/channel/create"):
        post(node, "/topic/create?" + path.split("?")[1].split("&")[0])
    req = urllib.request.Request(f"http://{node.http_address}{path}", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status




def replica(node, topic: str | None = None) -> dict:
    """The one origin's replica on ``node`` (or the topic's part of it)."""
    reps = get_json(node, "/stats?format=json").get("replicas") or []
    if not reps:
        return {}
    if topic is None:
        return reps[0]
    return next((t for t in reps[0]["topics"] if t["name"] == topic), {"messages": 0})


def linked(origin) -> bool:
    return get_json(origin, "/stats?format=json")["replication"]["state"] == "up"
