"""GET /metrics on real nsqd, nsqlookupd and nsqadmin processes: the values equal what /stats,
/topics and the cluster say, the output passes ``promtool check metrics``, and
``--metrics=false`` leaves the path unrouted (404, as upstream)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
import urllib.error
import urllib.request

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.daemons_cluster import Cluster
from helpers.nsqd_http import http, stats, wait_for
from helpers.servers import unique_name
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(120)
PROMTOOL = shutil.which("promtool")
DOCS = Path(__file__).resolve().parents[2] / "docs"
_METRIC_NAME = re.compile(r"\b((?:nsqd|nsqlookupd|nsqadmin|process|python)_[a-z0-9_]*[a-z0-9])\b")


def documented_names() -> set[str]:
    """Every metric name docs/metrics.md and the Grafana dashboard mention."""
    text = (DOCS / "metrics.md").read_text() + (DOCS / "grafana-nsqpy.json").read_text()
    return set(_METRIC_NAME.findall(text))


def scrape(daemon) -> tuple[str, dict[str, dict[tuple, float]]]:
    """(raw text, family -> {sorted label items: value}) with the ``_total`` etc. names kept."""
    with urllib.request.urlopen(f"http://{daemon.http_address}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return text, out


def sample(values, name: str, **lbl) -> float:
    return values[name][tuple(sorted(lbl.items()))]


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, nsqd_flags=("--e2e-processing-latency-percentile=1.0,0.5",))
    yield c
    c.stop()


def test_values_match_stats_on_every_daemon(cluster):
    topic = unique_name("pm")
    n0, n1 = cluster.nodes
    for node in (n0, n1):
        http(node, "POST", f"/topic/create?topic={topic}")
        http(node, "POST", f"/channel/create?topic={topic}&channel=work")
    pub = Wire(n0.tcp_address)
    sub = Wire(n0.tcp_address)
    try:
        pub.identify(client_id="the-producer")
        for i in range(6):
            pub.pub(topic, b"m%d" % i)
        http(n1, "POST", f"/pub?topic={topic}", b"x" * 100)
        sub.identify(client_id='odd "client"', hostname="h1")
        sub.sub(topic, "work", rdy=3)
        msgs = [sub.read_message() for _ in range(3)]
        sub.cmd(b"RDY", "0")
        sub.cmd(b"FIN", msgs[0].id)
        sub.cmd(b"REQ", msgs[1].id, "0")
        wait_for(lambda: stats(n0)["topics"][0]["channels"][0]["requeue_count"] == 1, what="REQ seen",
                 interval=0.1)

        # nsqd: every /stats figure of every topic and channel, and the consumer's
        _, m = scrape(n0)
        doc = stats(n0)
        t = doc["topics"][0]
        assert sample(m, "nsqd_topics") == len(doc["topics"]) == 1
        assert sample(m, "nsqd_clients") == 2
        lt = {"topic": topic}
        for name, key in (("nsqd_topic_messages_total", "message_count"),
                          ("nsqd_topic_message_bytes_total", "message_bytes"),
                          ("nsqd_topic_depth", "depth"),
                          ("nsqd_topic_backend_depth", "backend_depth")):
            assert sample(m, name, **lt) == t[key], name
        c = t["channels"][0]
        lc = {"topic": topic, "channel": "work"}
        for name, key in (("nsqd_channel_messages_total", "message_count"),
                          ("nsqd_channel_requeued_total", "requeue_count"),
                          ("nsqd_channel_timed_out_total", "timeout_count"),
                          ("nsqd_channel_depth", "depth"),
                          ("nsqd_channel_backend_depth", "backend_depth"),
                          ("nsqd_channel_in_flight", "in_flight_count"),
                          ("nsqd_channel_deferred", "deferred_count"),
                          ("nsqd_channel_clients", "client_count")):
            assert sample(m, name, **lc) == c[key], name
        assert (c["message_count"], c["in_flight_count"], c["requeue_count"]) == (6, 1, 1)
        for p in c["e2e_processing_latency"]["percentiles"]:
            got = sample(m, "nsqd_channel_e2e_processing_latency_seconds", **lc,
                         quantile=str(p["quantile"]))
            assert got == pytest.approx(p["value"] / 1e9)
        assert sample(m, "nsqd_channel_e2e_processing_latency_seconds", **lc, quantile="1") > 0
        full = orjson.loads(http(n0, "GET", "/stats?format=json"))
        client = full["topics"][0]["channels"][0]["clients"][0]
        lk = dict(lc, client_id='odd "client"', hostname="h1",
                  remote_address=client["remote_address"])
        assert sample(m, "nsqd_client_finished_total", **lk) == 1
        assert sample(m, "nsqd_client_requeued_total", **lk) == 1
        assert sample(m, "nsqd_client_in_flight", **lk) == 1
        assert sample(m, "nsqd_client_ready", **lk) == 0
        assert sum(v for k, v in m["nsqd_producer_published_total"].items()
                   if ("client_id", "the-producer") in k and ("topic", topic) in k) == 6
        assert sample(m, "nsqd_healthy") == 1
        assert sample(m, "process_resident_memory_bytes") > 0

        # nsqlookupd: topics, channels and producers as registered
        # both nsqd register the topic in their own time
        _, lm = wait_for(lambda: (r := scrape(cluster.lookupd))[1]
                         .get("nsqlookupd_topic_producers", {})
                         .get((("topic", topic),)) == 2 and r,
                         what="both nsqd registered the topic", interval=0.1)
        assert sample(lm, "nsqlookupd_producers") == 2
        assert sample(lm, "nsqlookupd_topic_producers", topic=topic) == 2
        assert sample(lm, "nsqlookupd_channel_producers", topic=topic, channel="work") == 2
        assert sample(lm, "nsqlookupd_registrations_total", category="client",
                      action="register") == 2
        assert sample(lm, "nsqlookupd_tcp_connections") == 2

        # nsqadmin: the sums over both nodes
        _, am = scrape(cluster.admin)
        assert sample(am, "nsqadmin_nodes") == 2
        assert sample(am, "nsqadmin_upstream_errors") == 0
        assert sample(am, "nsqadmin_topic_messages_total", topic=topic) == 7
        assert sample(am, "nsqadmin_topic_nodes", topic=topic) == 2
        assert sample(am, "nsqadmin_channel_messages_total", topic=topic, channel="work") == 7
        assert sample(am, "nsqadmin_channel_in_flight", topic=topic, channel="work") == 1
        assert sample(am, "nsqadmin_channel_clients", topic=topic, channel="work") == 1
        assert sample(am, "nsqadmin_cluster_messages_total") == 7
        assert sample(am, "nsqadmin_cluster_in_flight") == 1
        # every name the docs and the dashboard use is served (clients, producers, e2e present)
        served = set(m) | set(lm) | set(am)
        # (replication's families appear only on a node with it: tests/nsqd/replication/test_strict.py;
        # the history's on a topic with retention: tests/nsqd/history/test_history_http.py)
        missing = {n for n in documented_names() if n not in served
                   and not n.startswith(("nsqd_replication_", "nsqd_replica_", "nsqd_history_"))}
        assert not missing, missing
    finally:
        pub.close()
        sub.close()

    # churn: one nsqd leaves, lookupd counts its unregistrations, nsqadmin sees one node
    n1.stop()
    _, lm = wait_for(lambda: (r := scrape(cluster.lookupd))[1]["nsqlookupd_producers"][()] == 1
                  and r, what="lookupd saw the node leave", interval=0.1)
    assert sample(lm, "nsqlookupd_registrations_total", category="client", action="unregister") == 1
    assert sample(lm, "nsqlookupd_registrations_total", category="topic", action="unregister") == 1
    assert sample(lm, "nsqlookupd_topic_producers", topic=topic) == 1
    _, am = scrape(cluster.admin)
    assert sample(am, "nsqadmin_nodes") == 1


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (make test installs prometheus)")
def test_promtool_accepts_every_daemons_output(cluster):
    topic = unique_name("lint")
    http(cluster.nodes[0], "POST", f"/topic/create?topic={topic}")
    http(cluster.nodes[0], "POST", f"/channel/create?topic={topic}&channel=c#ephemeral")
    for daemon in cluster.daemons:
        text, _ = scrape(daemon)
        out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, (daemon.argv[0], out.stdout, out.stderr)


def test_metrics_false_leaves_the_path_unrouted(tmp_path):
    c = Cluster(tmp_path, "--metrics=false")
    try:
        for daemon in c.daemons:
            for method in ("GET", "POST"):
                req = urllib.request.Request(f"http://{daemon.http_address}/metrics",
                                             method=method, data=b"" if method == "POST" else None)
                with pytest.raises(urllib.error.HTTPError) as err:
                    urllib.request.urlopen(req, timeout=5)
                assert err.value.code == 404, (daemon.argv[0], method)
                assert b"NOT_FOUND" in err.value.read()
    finally:
        c.stop()
