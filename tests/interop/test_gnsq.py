"""gnsq 1.0.2 (gevent) against our nsqd.

gevent's monkey-patching must not leak into the rest of the suite, so each scenario runs in a
subprocess (``gnsq_scenarios.py``) that prints its observations as JSON; the assertions are here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from helpers.servers import unique_name
from interop.support import assert_server_healthy, run_json_script

# checked without importing: even importing gevent/gnsq in the pytest process is avoided
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gnsq") is None or importlib.util.find_spec("gevent") is None,
    reason="gnsq/gevent are not installed (pyproject's test extra installs them)")

SCRIPT = Path(__file__).with_name("gnsq_scenarios.py")


def run_scenario(node, scenario: str, topic: str, timeout: float = 50) -> dict:
    result = run_json_script([sys.executable, str(SCRIPT), scenario, node.tcp_address, topic], timeout)
    assert result["ok"], f"{result.get('traceback')}\nobserved: {result}\nnsqd log:\n{node.log()[-3000:]}"
    return result


def by_body(deliveries: list[dict]) -> dict[bytes, list[dict]]:
    out: dict[bytes, list[dict]] = {}
    for d in deliveries:
        out.setdefault(bytes.fromhex(d["body"]), []).append(d)
    return out


@pytest.mark.timeout(60)
def test_gnsq_publish_multipublish_defer_and_consume(nsqd):
    r = run_scenario(nsqd, "pubsub", unique_name("gpub"))
    assert r["responses"] == ["OK", "OK", "OK", "OK"]
    assert r["errors"] == []
    got = [d["body"] for d in r["deliveries"]]
    assert got == r["expected"], [bytes.fromhex(b)[:20] for b in got]  # FIFO on one connection
    assert all(d["attempts"] == 1 for d in r["deliveries"])
    assert len({d["id"] for d in r["deliveries"]}) == len(got)
    deferred = r["deliveries"][-1]
    assert bytes.fromhex(deferred["body"]) == b"deferred"
    assert 1.1 <= deferred["t"] - r["dpub_at"] <= 4.0, deferred["t"] - r["dpub_at"]
    immediate = r["deliveries"][-2]
    assert immediate["t"] - r["dpub_at"] < 1.0
    assert_server_healthy(nsqd)


@pytest.mark.timeout(60)
def test_gnsq_requeue(nsqd):
    r = run_scenario(nsqd, "requeue", unique_name("greq"))
    assert r["responses"] == ["OK"] and r["errors"] == []
    seen = by_body(r["deliveries"])
    assert set(seen) == {b"explicit", b"requeue-exc", b"crash"}
    expected_delay = {b"explicit": 1.0, b"requeue-exc": 0.5, b"crash": 0.5}
    for body, ds in seen.items():
        assert [d["attempts"] for d in ds] == [1, 2], (body, ds)
        assert ds[0]["id"] == ds[1]["id"]
        gap = ds[1]["t"] - ds[0]["t"]
        assert expected_delay[body] - 0.1 <= gap <= expected_delay[body] + 2.0, (body, gap)
    assert_server_healthy(nsqd)


@pytest.mark.timeout(60)
def test_gnsq_touch(nsqd_factory):
    node = nsqd_factory("--msg-timeout=1s")
    r = run_scenario(node, "touch", unique_name("gtouch"))
    assert r["responses"] == ["OK"] and r["errors"] == []
    seen = by_body(r["deliveries"])
    assert [d["attempts"] for d in seen[b"touched"]] == [1], r["deliveries"]
    assert [d["attempts"] for d in seen[b"untouched"]] == [1, 2], r["deliveries"]
    timed_out_after = seen[b"untouched"][1]["t"] - seen[b"untouched"][0]["t"]
    assert 0.9 <= timed_out_after <= 2.5, timed_out_after
    assert r["touches"] >= 8
    assert_server_healthy(node)


@pytest.mark.timeout(60)
def test_gnsq_heartbeats(nsqd):
    r = run_scenario(nsqd, "heartbeat", unique_name("ghb"))
    assert r["responses"] == ["OK", "OK"] and r["errors"] == []
    assert [bytes.fromhex(d["body"]) for d in r["deliveries"]] == [b"before", b"after"]
    for who in ("consumer_heartbeats", "producer_heartbeats"):
        beats = [t for t in r[who] if r["idle_from"] <= t <= r["idle_to"]]
        assert 3 <= len(beats) <= 6, (who, beats)
        gaps = [b - a for a, b in zip(beats, beats[1:])]
        assert all(0.7 <= g <= 1.6 for g in gaps), (who, gaps)
    assert "i/o timeout" not in nsqd.log()
    assert_server_healthy(nsqd)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_gnsq_compression(nsqd_factory, codec):
    """Consumer and publisher negotiate snappy/deflate; messages flow both ways compressed.

    The publisher is gnsq.NsqdTCPClient: gnsq.Producer itself cannot use compression against any
    nsqd (client bug, see gnsq_scenarios._compression)."""
    node = nsqd_factory("--msg-timeout=2s")
    r = run_scenario(node, codec, unique_name(f"g{codec}"))
    assert r["errors"] == [], r["errors"]
    assert r["responses"] == ["OK"] * (1 + 43 + 1)
    other = "deflate" if codec == "snappy" else "snappy"
    assert r["identify"][codec] is True and r["identify"][other] is False, r["identify"]
    if codec == "deflate":
        assert r["identify"]["deflate_level"] == 6, r["identify"]
    expected_socket = "SnappySocket" if codec == "snappy" else "DefalteSocket"
    assert r["stream_sockets"] == [expected_socket, expected_socket]
    assert r["connected"] == [True, True]
    assert sorted(d["body"] for d in r["deliveries"]) == sorted(r["expected"])
    seen = by_body(r["deliveries"])
    assert [d["attempts"] for d in seen[b"small-3"]] == [1, 2]
    assert all(len(ds) == 1 and ds[0]["attempts"] == 1 for b, ds in seen.items() if b != b"small-3")
    assert len(r["consumer_heartbeats"]) >= 2 and len(r["producer_heartbeats"]) >= 2
    assert_server_healthy(node)
