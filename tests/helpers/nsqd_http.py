"""Plain blocking calls to a test server's HTTP API (urllib, no client library in between)."""

from __future__ import annotations

import urllib.request

import orjson


def http(node, method: str, path: str, body: bytes = b"") -> bytes:
    """The response body of ``method path`` on ``node``; HTTPError for a non-2xx answer."""
    req = urllib.request.Request(f"http://{node.http_address}{path}", data=body or None,
                                 method=method)
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.read()


def stats(node) -> dict:
    """nsqd's ``/stats`` JSON without clients."""
    return orjson.loads(http(node, "GET", "/stats?format=json&include_clients=false"))


def wait_for(pred, what: str, timeout: float = 10.0, interval: float = 0.1):
    """Poll ``pred`` until it returns something truthy (returned); fail after ``timeout``."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: last answer {got!r}"
        time.sleep(interval)
