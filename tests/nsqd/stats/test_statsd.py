"""nsqd --statsd-*: real nsqd processes push to a UDP socket we read (reference §2.9).

One push is read whole (its last line is known: ``mem.gc_runs`` with mem stats, else the last
channel's ``clients`` gauge), and every key upstream sends for the node's topics and channels
is checked against ``/stats`` with its type: gauges equal the values, counters add up to them.
"""

from __future__ import annotations

import socket
import time

import orjson
import pytest

from helpers.nsqd_http import http, stats
from helpers.polling import wait_for
from helpers.servers import unique_name
from helpers.statsd_receiver import StatsdReceiver
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(90)

TOPIC_COUNTERS = ("message_count", "message_bytes")
TOPIC_GAUGES = ("depth", "backend_depth")
CHANNEL_COUNTERS = ("message_count", "requeue_count", "timeout_count")
CHANNEL_GAUGES = {"depth": "depth", "backend_depth": "backend_depth",
                  "in_flight_count": "in_flight_count", "deferred_count": "deferred_count",
                  "clients": "client_count"}
MEM_GAUGES = ("heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
              "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes")


def parse(datagrams: list[bytes], size: int) -> dict[str, tuple[int, str]]:
    """``key -> (value, type)``; each datagram holds whole lines and fits ``size``."""
    out: dict[str, tuple[int, str]] = {}
    for data in datagrams:
        assert len(data) <= size, data
        assert data.endswith(b"\n"), data
        for line in data.decode().splitlines():
            key, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            assert kind in ("c", "g"), line
            assert key not in out, f"{key} sent twice in one push"
            out[key] = (int(value), kind)
    return out


@pytest.fixture
def receiver():
    r = StatsdReceiver()
    yield r
    r.close()


def _build_state(node, topic: str, eph_topic: str) -> list[Wire]:
    """Messages published, finished, requeued, timed out, deferred and in flight."""
    http(node, "POST", f"/topic/create?topic={topic}")
    http(node, "POST", f"/channel/create?topic={topic}&channel=c1")
    http(node, "POST", f"/channel/create?topic={topic}&channel=c2")
    for i in range(5):
        http(node, "POST", f"/pub?topic={topic}", b"message %d" % i)
    http(node, "POST", f"/pub?topic={topic}&defer=60000", b"deferred")
    c1 = Wire(node.tcp_address)
    c1.identify(client_id="c1")
    c1.sub(topic, "c1", rdy=3)
    msgs = [c1.read_message() for _ in range(3)]
    c1.cmd(b"RDY", "0")
    c1.cmd(b"FIN", msgs[0].id)
    c1.cmd(b"REQ", msgs[1].id, "0")
    c2 = Wire(node.tcp_address)
    c2.identify(client_id="c2", msg_timeout=1000)
    c2.sub(topic, "c2", rdy=1)
    c2.read_message()
    c2.cmd(b"RDY", "0")
    eph = Wire(node.tcp_address)
    eph.sub(eph_topic, "x#ephemeral", rdy=0)
    http(node, "POST", f"/pub?topic={eph_topic}", b"e")
    deadline = time.monotonic() + 30
    while True:  # c2's message times out (1s) and goes back to its queue
        ch = {c["channel_name"]: c for t in stats(node)["topics"] if t["topic_name"] == topic
              for c in t["channels"]}
        if ch["c2"]["timeout_count"] == 1 and ch["c1"]["requeue_count"] == 1:
            break
        assert time.monotonic() < deadline, ch
        time.sleep(0.1)
    return [c1, c2, eph]


def test_one_interval_carries_every_upstream_key(nsqd_factory, receiver):
    topic = unique_name("st")
    eph_topic = unique_name("zz") + "#ephemeral"
    node = nsqd_factory(f"--statsd-address={receiver.address}", "--statsd-interval=2s",
                        "--e2e-processing-latency-percentile=1.0,0.99")
    prefix = "nsq.127_0_0_1_%d." % node.http_port
    # a string option: answered as its text, as upstream's RespondV1 writes strings
    assert http(node, "GET", "/config/statsd_prefix") == prefix.encode()
    conns = _build_state(node, topic, eph_topic)
    try:
        before = stats(node)
        t0 = time.monotonic()
        # every push from nsqd's start; the last two begun after the state settled
        pushes = receiver.pushes_after(t0, "mem.gc_runs", 2)
        totals: dict[str, int] = {}
        for _, datagrams in pushes:
            for key, (value, kind) in parse(datagrams, 508).items():
                if kind == "c":
                    totals[key] = totals.get(key, 0) + value
        assert stats(node)["topics"] == before["topics"], "state moved while measuring"
        first = [first for first, _ in pushes if first > t0]
        assert 1.5 < first[1] - first[0] < 3.5, "one push per --statsd-interval"
        last = [d for f, d in pushes if f == first[1]][0]
        values = parse(last, 508)
        times = [when for when, data in receiver.received if when >= first[1]][:len(last)]
        assert len(last) > 1 and times[-1] - times[0] >= 0.4, "datagrams spread over ~1s"

        expected: dict[str, tuple[int, str]] = {}
        for t in before["topics"]:
            base = f"{prefix}topic.{t['topic_name']}."
            for name in TOPIC_GAUGES:
                expected[base + name] = (t[name], "g")
            for name in TOPIC_COUNTERS:
                expected[base + name] = (0, "c")  # nothing happened since the previous push
                assert totals[base + name] == t[name], base + name
            for p in t["e2e_processing_latency"]["percentiles"] or ():
                expected[base + "e2e_processing_latency_%d" % round(p["quantile"] * 100)] = \
                    (int(p["value"]), "g")
            for c in t["channels"]:
                cbase = f"{base}channel.{c['channel_name']}."
                for key, field in CHANNEL_GAUGES.items():
                    expected[cbase + key] = (c[field], "g")
                for name in CHANNEL_COUNTERS:
                    expected[cbase + name] = (0, "c")
                    assert totals[cbase + name] == c[name], cbase + name
                for p in c["e2e_processing_latency"]["percentiles"] or ():
                    expected[cbase + "e2e_processing_latency_%d" % round(p["quantile"] * 100)] = \
                        (int(p["value"]), "g")
        mem = {k: v for k, v in values.items() if k.startswith(prefix + "mem.")}
        assert {k: v for k, v in values.items() if k not in mem} == expected
        assert set(mem) == {prefix + "mem." + k for k in MEM_GAUGES} | {prefix + "mem.gc_runs"}
        assert all(kind == "g" for k, (_, kind) in mem.items() if not k.endswith("gc_runs"))
        assert mem[prefix + "mem.gc_runs"][1] == "c" and mem[prefix + "mem.gc_runs"][0] >= 0
        assert mem[prefix + "mem.heap_in_use_bytes"][0] > 1 << 20

        # the state built above, as upstream names it
        t = f"{prefix}topic.{topic}."
        assert totals[t + "message_count"] == 6
        assert values[t + "channel.c1.in_flight_count"] == (1, "g")
        assert values[t + "channel.c1.deferred_count"] == (1, "g")
        assert values[t + "channel.c1.clients"] == (1, "g")
        assert totals[t + "channel.c1.requeue_count"] == 1
        assert totals[t + "channel.c2.timeout_count"] == 1
        assert values[t + "e2e_processing_latency_99"][0] > 0  # c1 finished one message
        assert f"{prefix}topic.{eph_topic}.channel.x#ephemeral.depth" in values
    finally:
        for conn in conns:
            conn.close()


def test_exclude_ephemeral_prefix_packet_size_and_no_mem(nsqd_factory, receiver):
    topic = unique_name("zz")  # sorts last: its channel's clients gauge ends every push
    node = nsqd_factory(f"--statsd-address={receiver.address}", "--statsd-interval=1s",
                        "--statsd-prefix=custom.%s.x", "--statsd-mem-stats=false",
                        "--statsd-udp-packet-size=120", "--statsd-exclude-ephemeral")
    prefix = "custom.127_0_0_1_%d.x." % node.http_port
    http(node, "POST", f"/topic/create?topic={topic}")
    http(node, "POST", f"/channel/create?topic={topic}&channel=last")
    eph = Wire(node.tcp_address)
    try:
        eph.sub(topic, "a#ephemeral", rdy=0)
        eph2 = Wire(node.tcp_address)
        eph2.sub("aa#ephemeral", "b#ephemeral", rdy=0)
        http(node, "POST", f"/pub?topic={topic}", b"x" * 10)
        t0 = time.monotonic()
        _, datagrams = receiver.pushes_after(t0, f"topic.{topic}.channel.last.clients", 1)[-1]
        values = parse(datagrams, 120)
        assert len(datagrams) > 1
        assert all(k.startswith(prefix) for k in values)
        assert not any("ephemeral" in k or ".mem." in k for k in values)
        assert values[f"{prefix}topic.{topic}.channel.last.depth"] == (1, "g")
        eph2.close()
    finally:
        eph.close()


def test_unreachable_or_bad_statsd_address_does_not_stop_nsqd(nsqd_factory):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        closed = "127.0.0.1:%d" % s.getsockname()[1]
    a = nsqd_factory(f"--statsd-address={closed}", "--statsd-interval=1s")
    b = nsqd_factory("--statsd-address=no-port-here", "--statsd-interval=1s")
    wait_for(lambda: "failed to create UDP socket to statsd(no-port-here)" in b.log()
             and "STATSD: pushing stats to " + closed in a.log(), what="a statsd interval on both")
    for node in (a, b):
        assert http(node, "GET", "/ping") == b"OK"


def test_non_positive_interval_is_refused(nsqd_factory, tmp_path):
    import subprocess
    from helpers.servers import VENV_BIN, free_port

    out = subprocess.run([str(VENV_BIN / "nsqd"), f"--data-path={tmp_path}",
                          f"--tcp-address=127.0.0.1:{free_port()}",
                          f"--http-address=127.0.0.1:{free_port()}",
                          "--statsd-address=127.0.0.1:1", "--statsd-interval=0s"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "statsd-interval" in out.stderr
