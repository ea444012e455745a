"""nsqd.dat is written off the event loop (issue #32): creates never stall publishers, a burst is
coalesced, and a kill -9 loses nothing docs/operations.md promises (*nsqd.dat and kill -9*).

The promise: a create, delete, pause or setting is in nsqd.dat once the first write that began
after it has completed; pause, unpause and settings are answered only then (as upstream's), so
anything acknowledged before a pause's answer survives a kill -9 after it. Creates and deletes
are answered at once (upstream persists those asynchronously too), and what a kill -9 right after
them leaves is every create up to some point in their order, never one with a hole before it.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from helpers.nsqd_http import http
from helpers.servers import Nsqd
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(180)

CREATOR = r"""
import http.client, sys
host, port, n, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
conn = http.client.HTTPConnection(host, port, timeout=10)
for i in range(n):
    conn.request("POST", f"/topic/create?topic={prefix}{i:05d}")
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    resp.read()
print("done", flush=True)
"""


def _create(node: Nsqd, n: int, prefix: str) -> subprocess.Popen:
    """``n`` sequential /topic/create on one keep-alive connection, from another process (so the
    test's own threads do not share an interpreter lock with the creator)."""
    return subprocess.Popen([sys.executable, "-c", CREATOR, "127.0.0.1", str(node.http_port),
                             str(n), prefix], stdout=subprocess.PIPE, text=True)


def _topics(data: Path) -> list[str]:
    doc = orjson.loads((data / "nsqd.dat").read_bytes())
    return [t["name"] for t in doc["topics"]]


def test_2000_creates_never_stall_a_publisher(tmp_path):
    node = Nsqd(tmp_path / "d")
    try:
        wire = Wire(node.tcp_address)
        wire.pub("probe", b"warm")
        waits: list[float] = []
        creator = _create(node, 2000, "m")
        while creator.poll() is None:
            start = time.perf_counter()
            wire.pub("probe", b"x")
            waits.append(time.perf_counter() - start)
            time.sleep(0.002)
        assert creator.returncode == 0 and creator.stdout.read().strip() == "done"
        wire.close()
        assert len(waits) > 100  # the publisher ran alongside the whole burst
        waits.sort()
        p99 = waits[len(waits) * 99 // 100]
        # a write of nsqd.dat per create would hold every publish behind it; the bound is far
        # from the ~1 ms a quiet machine shows, so a busy one passes (max 38 ms, p99 20 ms seen
        # at a load average of 15 on 2 cores)
        assert p99 <= 0.100, f"max {waits[-1] * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms"
    finally:
        assert node.stop() == 0
    # what keeps the loop free, whatever the machine's speed: the 2,000 creates were written
    # together, several to a write (about 170 writes here on a quiet machine), not one each
    writes = node.log().count("NSQ: persisting topic/channel metadata")
    assert 2 <= writes <= 1000, writes
    # complete at a clean exit
    assert _topics(tmp_path / "d") == sorted(["probe"] + [f"m{i:05d}" for i in range(2000)])


def test_kill9_after_a_burst_keeps_everything_before_a_pause(tmp_path):
    """Creates, then a channel pause: its answer means nsqd.dat holds all of them."""
    data = tmp_path / "d"
    node = Nsqd(data)
    creator = _create(node, 500, "k")
    assert creator.wait(60) == 0
    http(node, "POST", "/channel/create?topic=k00007&channel=c")
    http(node, "POST", "/channel/pause?topic=k00007&channel=c")
    node.kill9()
    assert _topics(data) == [f"k{i:05d}" for i in range(500)]
    doc = orjson.loads((data / "nsqd.dat").read_bytes())
    assert doc["topics"][7]["channels"] == [{"name": "c", "paused": True}]
    node = Nsqd(data)  # and nsqd starts from it with all of them
    try:
        topics = {t["topic_name"]: t for t in orjson.loads(http(node, "GET", "/stats?format=json"))["topics"]}
        assert len(topics) == 500
        assert topics["k00007"]["channels"][0]["paused"] is True
    finally:
        node.stop()


def test_kill9_in_the_middle_of_a_burst_leaves_a_prefix(tmp_path):
    """kill -9 while creates are still arriving: nsqd.dat is whole (written by rename) and holds
    the creates up to some point, with no hole before it; nsqd starts from it."""
    data = tmp_path / "d"
    node = Nsqd(data)
    creator = _create(node, 3000, "p")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(_topics(data)) < 500:
        time.sleep(0.01)
    node.kill9()
    creator.wait(30)
    kept = _topics(data)
    assert len(kept) >= 500
    assert kept == [f"p{i:05d}" for i in range(len(kept))]
    node = Nsqd(data)
    try:
        stats = orjson.loads(http(node, "GET", "/stats?format=json"))
        assert len(stats["topics"]) == len(kept)
    finally:
        node.stop()
