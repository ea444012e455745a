"""nsqd --statsd-address feeding the real statsd daemon (npm ``statsd``): what it aggregated
(counters summed over pushes, last gauges) equals nsqd's own /stats, and it saw no bad line."""

from __future__ import annotations

import time

import pytest

from helpers.nsqd_http import http, stats
from helpers.servers import unique_name
from helpers.statsd_daemon import StatsdDaemon, missing_reason
from helpers.wire import Wire

pytestmark = [pytest.mark.timeout(90),
              pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))]


@pytest.fixture
def statsd_daemon(tmp_path):
    daemon = StatsdDaemon(tmp_path / "statsd")
    yield daemon
    daemon.stop()


def test_statsd_daemon_aggregates_what_nsqd_pushes(nsqd_factory, statsd_daemon):
    topic = unique_name("sd")
    node = nsqd_factory(f"--statsd-address={statsd_daemon.address}", "--statsd-interval=1s",
                        "--e2e-processing-latency-percentile=0.5")
    prefix = "nsq.127_0_0_1_%d." % node.http_port
    http(node, "POST", f"/topic/create?topic={topic}")
    for channel in ("a", "b"):
        http(node, "POST", f"/channel/create?topic={topic}&channel={channel}")
    for i in range(7):
        http(node, "POST", f"/pub?topic={topic}", b"m%d" % i)
    sub = Wire(node.tcp_address)
    try:
        sub.sub(topic, "a", rdy=3)
        msgs = [sub.read_message() for _ in range(3)]
        sub.cmd(b"RDY", "0")
        for msg in msgs[:2]:
            sub.cmd(b"FIN", msg.id)
        sub.cmd(b"REQ", msgs[2].id, "0")
        deadline = time.monotonic() + 30
        t = f"{prefix}topic.{topic}."
        while True:
            now = [x for x in stats(node)["topics"] if x["topic_name"] == topic][0]
            ch = {c["channel_name"]: c for c in now["channels"]}
            counters, gauges = statsd_daemon.counters(), statsd_daemon.gauges()
            want_counters = {t + "message_count": 7, t + "message_bytes": now["message_bytes"],
                             t + "channel.a.message_count": 7, t + "channel.b.message_count": 7,
                             t + "channel.a.requeue_count": 1, t + "channel.a.timeout_count": 0}
            want_gauges = {t + "depth": 0, t + "channel.a.depth": ch["a"]["depth"],
                           t + "channel.b.depth": 7, t + "channel.a.in_flight_count": 0,
                           t + "channel.a.clients": 1, t + "channel.b.clients": 0,
                           t + "channel.a.e2e_processing_latency_50":
                               int(ch["a"]["e2e_processing_latency"]["percentiles"][0]["value"])}
            got_c = {k: counters.get(k) for k in want_counters}
            got_g = {k: gauges.get(k) for k in want_gauges}
            if got_c == want_counters and got_g == want_gauges and prefix + "mem.gc_runs" in counters:
                break
            assert time.monotonic() < deadline, (got_c, want_counters, got_g, want_gauges)
            time.sleep(0.3)
        assert ch["a"]["depth"] == 5 and ch["a"]["requeue_count"] == 1
        assert gauges[prefix + "mem.heap_in_use_bytes"] > 0
        assert counters["statsd.bad_lines_seen"] == 0
        assert counters["statsd.packets_received"] >= 2
    finally:
        sub.close()
