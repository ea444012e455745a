"""What an idle nsqd holds: no aiohttp, no OpenSSL (no flag asks for TLS), no Prometheus client
until a scrape asks, and a resident size well under the 42 MiB it had on aiohttp; the HTTP
client (lookupd channel pre-creation) comes with its first use. (A TLS flag loads OpenSSL:
tests/security/test_tls.py.)"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from helpers.proc import mapped, rss_kib
from helpers.servers import Nsqd, Nsqlookupd, unique_name

pytestmark = pytest.mark.timeout(60)


def get(node: Nsqd, path: str) -> int:
    with urllib.request.urlopen(f"http://{node.http_address}{path}", timeout=5) as resp:
        resp.read()
        return resp.status


def post(node: Nsqd, path: str, body: bytes = b"") -> int:
    req = urllib.request.Request(f"http://{node.http_address}{path}", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.status


def test_idle_nsqd_loads_no_tls_no_aiohttp(tmp_path):
    node = Nsqd(tmp_path / "d")
    try:
        assert get(node, "/ping") == 200 and post(node, f"/pub?topic={unique_name()}", b"m") == 200
        assert get(node, "/stats?format=json") == 200
        maps = mapped(node.pid)
        assert "libssl" not in maps and "libcrypto" not in maps
        assert "aiohttp" not in maps and "prometheus" not in maps
        # ~23 MiB with bytecode caches (upstream: ~8); the bound is generous, the point is that
        # nothing heavy came back (it was 42 MiB)
        assert rss_kib(node.pid) < 28 * 1024
        assert get(node, "/metrics") == 200  # a scrape loads what it needs
    finally:
        assert node.stop() == 0


def test_the_http_client_comes_with_its_first_use(tmp_path):
    lookupd = Nsqlookupd(tmp_path / "l")
    node = Nsqd(tmp_path / "d", f"--lookupd-tcp-address={lookupd.tcp_address}")
    try:
        assert "aiohttp" not in mapped(node.pid)
        topic = unique_name("ci")
        assert post(node, f"/topic/create?topic={topic}") == 200
        # channel pre-creation asks nsqlookupd over HTTP, over the plain event loop
        pattern = re.compile(r"CI: querying nsqlookupd http://\S+/channels\?topic=" + topic)
        for _ in range(100):
            if pattern.search(node.log()):
                break
            time.sleep(0.05)
        assert pattern.search(node.log()), node.log()
        assert "failed to query" not in node.log()
        assert post(node, f"/pub?topic={topic}", b"m") == 200
    finally:
        node.stop()
        lookupd.stop()
