"""nsqjs 0.13.0 (Node) against our nsqd: Writer publish / MPUB / deferPublish, Reader finish /
requeue / touch, heartbeats, snappy and deflate.

Each scenario is ``tests/js/interop.js <scenario> <address> <topic>``, which prints its
observations as JSON; the assertions are here. ``make test`` installs nsqjs (tests/js/package.json);
without node or node_modules these tests are skipped, naming what is missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers.servers import unique_name
from interop.support import assert_server_healthy, run_json_script

JS_DIR = Path(__file__).resolve().parent.parent / "js"
SCRIPT = JS_DIR / "interop.js"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
    pytest.mark.skipif(not (JS_DIR / "node_modules" / "nsqjs").is_dir(),
                       reason="nsqjs is not installed: run `cd tests/js && npm install` (make test does)"),
]


def run_scenario(node, scenario: str, topic: str, timeout: float = 50) -> dict:
    result = run_json_script([NODE, str(SCRIPT), scenario, node.tcp_address, topic], timeout, cwd=str(JS_DIR))
    assert result["ok"], f"{result.get('error')}\nobserved: {result}\nnsqd log:\n{node.log()[-3000:]}"
    return result


def by_body(deliveries: list[dict]) -> dict[bytes, list[dict]]:
    out: dict[bytes, list[dict]] = {}
    for d in deliveries:
        out.setdefault(bytes.fromhex(d["body"]), []).append(d)
    return out


def conn(result: dict, kind: str) -> dict:
    found = [c for c in result["conns"] if c["kind"] == kind]
    assert len(found) == 1, result["conns"]  # exactly one connection: nsqjs never had to reconnect
    return found[0]


@pytest.mark.timeout(60)
def test_nsqjs_publish_mpub_defer_and_consume(nsqd):
    r = run_scenario(nsqd, "pubsub", unique_name("jpub"))
    assert r["responses"] == ["OK"] * 5
    assert r["errors"] == [] and r["closed_events"] == 0
    got = [d["body"] for d in r["deliveries"]]
    assert got == r["expected"], [bytes.fromhex(b)[:20] for b in got]
    assert all(d["attempts"] == 1 for d in r["deliveries"])
    assert len({d["id"] for d in r["deliveries"]}) == len(got)
    deferred = r["deliveries"][-1]
    assert 1.1 <= deferred["t"] - r["dpub_at"] <= 4.0, deferred["t"] - r["dpub_at"]
    assert r["deliveries"][-2]["t"] - r["dpub_at"] < 1.0
    assert conn(r, "reader")["identify"]["version"] == "1.3.0"
    assert_server_healthy(nsqd)


@pytest.mark.timeout(60)
def test_nsqjs_requeue(nsqd):
    r = run_scenario(nsqd, "requeue", unique_name("jreq"))
    assert r["responses"] == ["OK"] and r["errors"] == []
    seen = by_body(r["deliveries"])
    expected_delay = {b"explicit": 1.0, b"default": 0.5, b"zero": 0.0}
    assert set(seen) == set(expected_delay)
    for body, ds in seen.items():
        assert [d["attempts"] for d in ds] == [1, 2], (body, ds)
        assert ds[0]["id"] == ds[1]["id"]
        gap = ds[1]["t"] - ds[0]["t"]
        if expected_delay[body]:
            assert expected_delay[body] - 0.1 <= gap <= expected_delay[body] + 2.0, (body, gap)
        else:
            assert gap < 0.5, (body, gap)
    assert_server_healthy(nsqd)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("timeout_from", ["server_flag", "identify"])
def test_nsqjs_touch(nsqd_factory, timeout_from):
    if timeout_from == "server_flag":
        node = nsqd_factory("--msg-timeout=1s")
        r = run_scenario(node, "touch", unique_name("jtouch"))
    else:
        node = nsqd_factory()
        r = run_scenario(node, "touch_identify", unique_name("jtouchid"))
    assert r["responses"] == ["OK"] and r["errors"] == []
    assert conn(r, "reader")["identify"]["msg_timeout"] == 1000
    seen = by_body(r["deliveries"])
    assert [d["attempts"] for d in seen[b"touched"]] == [1], r["deliveries"]
    assert [d["attempts"] for d in seen[b"untouched"]] == [1, 2], r["deliveries"]
    timed_out_after = seen[b"untouched"][1]["t"] - seen[b"untouched"][0]["t"]
    assert 0.9 <= timed_out_after <= 2.5, timed_out_after
    assert r["touches"] >= 8
    assert_server_healthy(node)


@pytest.mark.timeout(60)
def test_nsqjs_heartbeats(nsqd):
    r = run_scenario(nsqd, "heartbeat", unique_name("jhb"))
    assert r["responses"] == ["OK", "OK"] and r["errors"] == [] and r["closed_events"] == 0
    assert [bytes.fromhex(d["body"]) for d in r["deliveries"]] == [b"before", b"after"]
    for kind in ("reader", "writer"):
        nops = [t for t in conn(r, kind)["nops"] if r["idle_from"] <= t <= r["idle_to"]]
        assert 3 <= len(nops) <= 6, (kind, nops)
        gaps = [b - a for a, b in zip(nops, nops[1:])]
        assert all(0.7 <= g <= 1.6 for g in gaps), (kind, gaps)
    assert "i/o timeout" not in nsqd.log()
    assert_server_healthy(nsqd)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_nsqjs_compression(nsqd_factory, codec):
    node = nsqd_factory("--msg-timeout=2s")
    r = run_scenario(node, codec, unique_name(f"j{codec}"))
    assert r["errors"] == [] and r["closed_events"] == 0, r["errors"]
    assert r["responses"] == ["OK"] * (1 + 43 + 1)
    other = "deflate" if codec == "snappy" else "snappy"
    inflater = "UnsnappyStream" if codec == "snappy" else "InflateRaw"
    for kind in ("reader", "writer"):
        c = conn(r, kind)
        assert c["identify"][codec] is True and c["identify"][other] is False, c["identify"]
        if codec == "deflate":
            assert c["identify"]["deflate_level"] == 6, c["identify"]  # asked 9, max is 6
        assert c["inflater"] == inflater
        assert len(c["nops"]) >= 2  # compressed heartbeats were decoded and answered
    assert sorted(d["body"] for d in r["deliveries"]) == sorted(r["expected"])
    seen = by_body(r["deliveries"])
    assert [d["attempts"] for d in seen[b"small-3"]] == [1, 2]
    assert all(len(ds) == 1 and ds[0]["attempts"] == 1 for b, ds in seen.items() if b != b"small-3")
    assert_server_healthy(node)
