"""Plain blocking calls to a test server's HTTP API (urllib, no client library in between)."""

from __future__ import annotations

import urllib.request

import orjson

from helpers.polling import wait_for  # noqa: F401  (the metrics tests import it from here)


def http(node, method: str, path: str, body: bytes = b"") -> bytes:
    """The response body of ``method path`` on ``node``; HTTPError for a non-2xx answer."""
    req = urllib.request.Request(f"http://{node.http_address}{path}", data=body or None,
                                 method=method)
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.read()


def stats(node) -> dict:
    """nsqd's ``/stats`` JSON without clients."""
    return orjson.loads(http(node, "GET", "/stats?format=json&include_clients=false"))

