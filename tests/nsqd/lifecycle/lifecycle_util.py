"""Small HTTP helpers for the lifecycle-control tests (issue #13), over real sockets."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from helpers.polling import wait_for  # noqa: F401  (the lifecycle tests import it from here)
from helpers.servers import Nsqd


def http(node: Nsqd, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://{node.http_address}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def http_json(node: Nsqd, method: str, path: str, doc: Any = None) -> tuple[int, Any]:
    body = None if doc is None else (doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    status, raw = http(node, method, path, body)
    return status, (json.loads(raw) if raw else None)


def channel_stats(node: Nsqd, topic: str, channel: str) -> dict | None:
    _, doc = http_json(node, "GET", f"/stats?format=json&topic={topic}")
    for t in doc.get("topics") or []:
        for ch in t["channels"]:
            if ch["channel_name"] == channel:
                return ch
    return None


def topic_stats(node: Nsqd, topic: str) -> dict | None:
    _, doc = http_json(node, "GET", f"/stats?format=json&topic={topic}")
    topics = doc.get("topics") or []
    return topics[0] if topics else None




def fin_all(w, quiet: float) -> list:
    """Messages a subscribed Wire receives (each FINed) until nothing came for ``quiet`` s."""
    w.sock.settimeout(quiet)
    got = []
    try:
        while True:
            m = w.read_message()
            got.append(m)
            w.cmd(b"FIN", m.id)
    except OSError:  # socket.timeout included
        pass
    return got


def make_channel(node: Nsqd, topic: str, channel: str) -> None:
    """Create the topic and the channel (``/channel/create`` needs an existing topic)."""
    assert http(node, "POST", f"/topic/create?topic={topic}")[0] == 200
    assert http(node, "POST", f"/channel/create?topic={topic}&channel={channel}")[0] == 200
