"""nsqadmin's JSON API against a real cluster: nsqlookupd + 2 nsqd registered with it + nsqadmin.

Every action is checked where it must land (nsqd ``/stats``, nsqlookupd's API), not only in
nsqadmin's answer.
"""

from __future__ import annotations

import base64
import subprocess

import pytest

from admin.admin_util import (
    ADMIN_USER, NsqAdmin, lookupd_producer_ports, nsqd_stats, request, wait_until,
)
from helpers.servers import VENV_BIN, unique_name
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(30)

ADMIN = {"X-Forwarded-User": ADMIN_USER}


def api(cluster, path: str, method: str = "GET", body=None, headers=None):
    return request(cluster.admin.url + path, method, body, headers)


@pytest.fixture
def topic(cluster):
    """A topic on both nsqd with channel ``ch``: 3 messages on node 0, 5 on node 1."""
    name = unique_name("adm")
    cluster.create_channel(name, "ch")
    cluster.publish(cluster.nodes[0], name, 3)
    cluster.publish(cluster.nodes[1], name, 5)
    cluster.wait_registered(name)
    cluster.wait_in_channel(name, "ch", [3, 5])
    return name


# --- reading --------------------------------------------------------------------------------------

def test_ping(cluster):
    resp = api(cluster, "/ping")
    assert (resp.status, resp.body) == (200, b"OK")


def test_topics_lists_topic_from_lookupd(cluster, topic):
    resp = api(cluster, "/api/topics")
    assert resp.status == 200
    assert resp.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    doc = resp.json()
    assert topic in doc["topics"] and doc["message"] == ""
    assert doc["topics"] == sorted(doc["topics"])


def test_topic_is_aggregated_across_nodes(cluster, topic):
    doc = api(cluster, f"/api/topics/{topic}").json()
    assert doc["node"] == "*" and doc["topic_name"] == topic and doc["message"] == ""
    assert doc["message_count"] == 8
    assert doc["paused"] is False
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert set(nodes) == {n.http_address for n in cluster.nodes}
    assert nodes[cluster.nodes[0].http_address]["message_count"] == 3
    assert nodes[cluster.nodes[1].http_address]["message_count"] == 5
    [channel] = doc["channels"]
    assert channel["channel_name"] == "ch" and channel["node"] == "*"
    # the channel's depth is summed over both nodes, memory + disk included
    assert channel["depth"] == 8
    assert channel["memory_depth"] + channel["backend_depth"] == 8
    # upstream's aggregation: the first node's channel object becomes the total, so that node's
    # entry shows the totals and lists the other node under "nodes" (not null, not both)
    first, second = doc["nodes"]
    assert first["channels"] == [channel]
    assert channel["nodes"] == second["channels"]
    assert second["channels"][0]["node"] == second["node"]
    assert second["channels"][0]["nodes"] is None
    assert doc["e2e_processing_latency"]["host"] == "*"
    # a field of upstream's later master, not of v1.3.0
    assert "delivery_msg_count" not in doc and "delivery_msg_count" not in first


def test_channel_is_aggregated_with_clients(cluster, topic):
    consumer = Wire(cluster.nodes[0].tcp_address)
    try:
        consumer.identify(client_id="admin-test", hostname="admin-test-host",
                          user_agent="admin-test/1.0")
        consumer.sub(topic, "ch", rdy=1)
        consumer.read_message()  # one message in flight on node 0
        doc = api(cluster, f"/api/topics/{topic}/ch").json()
        assert doc["topic_name"] == topic and doc["channel_name"] == "ch"
        assert doc["in_flight_count"] == 1
        assert doc["depth"] == 7, doc
        assert doc["client_count"] == 1
        [client] = doc["clients"]
        assert client["node"] == cluster.nodes[0].http_address
        assert client["hostname"] == "admin-test-host"
        assert client["user_agent"] == "admin-test/1.0"
        assert client["in_flight_count"] == 1
    finally:
        consumer.close()


def test_missing_topic_is_upstream_error(cluster):
    resp = api(cluster, "/api/topics/" + unique_name("none"))
    assert resp.status == 502
    assert resp.json()["message"].startswith("UPSTREAM_ERROR: failed to query any nsqlookupd: ")


def test_nodes_and_node_detail(cluster, topic):
    doc = api(cluster, "/api/nodes").json()
    by_port = {n["http_port"]: n for n in doc["nodes"]}
    assert set(by_port) == {n.http_port for n in cluster.nodes}
    node = by_port[cluster.nodes[1].http_port]
    assert node["broadcast_address"] == "127.0.0.1" and node["version"] == "1.3.0"
    assert {"topic": topic, "tombstoned": False} in node["topics"]
    assert node["remote_addresses"][0].startswith(cluster.lookupd.http_address + "/")

    addr = cluster.nodes[1].http_address
    detail = api(cluster, f"/api/nodes/{addr}").json()
    assert detail["node"] == addr
    mine = [t for t in detail["topics"] if t["topic_name"] == topic]
    assert mine and mine[0]["message_count"] == 5 and mine[0]["node"] == addr
    assert detail["total_messages"] >= 5
    assert list(detail) == ["node", "topics", "total_messages", "total_clients", "message"]
    assert "delivery_msg_count" not in mine[0]  # upstream's later master, not v1.3.0

    resp = api(cluster, "/api/nodes/127.0.0.1:1")
    assert (resp.status, resp.json()["message"]) == (404, "NODE_NOT_FOUND")


def test_counter(cluster, topic):
    stats = api(cluster, "/api/counter").json()["stats"]
    for node, count in ((cluster.nodes[0], 3), (cluster.nodes[1], 5)):
        entry = stats[f"{topic}:ch:{node.http_address}"]
        assert entry == {"node": node.http_address, "topic_name": topic, "channel_name": "ch",
                         "message_count": count}


# --- actions reach nsqd and nsqlookupd --------------------------------------------------------------

def test_pause_and_unpause_topic_on_every_nsqd(cluster, topic):
    resp = api(cluster, f"/api/topics/{topic}", "POST", {"action": "pause"}, ADMIN)
    assert (resp.status, resp.json()) == (200, {"message": ""})
    assert all(nsqd_stats(n, topic)["paused"] for n in cluster.nodes)
    assert api(cluster, f"/api/topics/{topic}").json()["paused"] is True
    api(cluster, f"/api/topics/{topic}", "POST", {"action": "unpause"}, ADMIN)
    assert not any(nsqd_stats(n, topic)["paused"] for n in cluster.nodes)


def test_pause_empty_channel_on_every_nsqd(cluster, topic):
    path = f"/api/topics/{topic}/ch"
    assert api(cluster, path, "POST", {"action": "pause"}, ADMIN).status == 200
    for node in cluster.nodes:
        assert nsqd_stats(node, topic)["channels"][0]["paused"] is True
    assert api(cluster, path, "POST", {"action": "empty"}, ADMIN).status == 200
    for node in cluster.nodes:
        assert nsqd_stats(node, topic)["channels"][0]["depth"] == 0
    assert api(cluster, path).json()["depth"] == 0
    assert api(cluster, path, "POST", {"action": "unpause"}, ADMIN).status == 200
    assert not any(nsqd_stats(n, topic)["channels"][0]["paused"] for n in cluster.nodes)


def test_delete_channel_then_topic(cluster, topic):
    resp = api(cluster, f"/api/topics/{topic}/ch", "DELETE", headers=ADMIN)
    assert resp.status == 200
    assert all(nsqd_stats(n, topic)["channels"] == [] for n in cluster.nodes)
    resp = api(cluster, f"/api/topics/{topic}", "DELETE", headers=ADMIN)
    assert resp.status == 200
    assert all(nsqd_stats(n, topic) is None for n in cluster.nodes)
    wait_until(lambda: topic not in api(cluster, "/api/topics").json()["topics"],
               what="topic gone from lookupd")


def test_create_topic_and_channel_in_lookupd(cluster, topic):
    fresh = unique_name("created")
    resp = api(cluster, "/api/topics", "POST", {"topic": fresh, "channel": "made"}, ADMIN)
    assert (resp.status, resp.json()) == (200, {"message": ""})
    lookupd = f"http://{cluster.lookupd.http_address}"
    assert fresh in request(lookupd + "/topics").json()["topics"]
    assert request(f"{lookupd}/channels?topic={fresh}").json()["channels"] == ["made"]
    inactive = api(cluster, "/api/topics?inactive=true").json()["topics"]
    assert inactive[fresh] == ["made"] and topic not in inactive
    # a channel for a topic with producers is also created on those nsqd
    resp = api(cluster, "/api/topics", "POST", {"topic": topic, "channel": "extra"}, ADMIN)
    assert resp.status == 200
    for node in cluster.nodes:
        assert {c["channel_name"] for c in nsqd_stats(node, topic)["channels"]} == {"ch", "extra"}


def test_tombstone_node_for_topic(cluster, topic):
    node = cluster.nodes[0]
    resp = api(cluster, f"/api/nodes/{node.http_address}", "DELETE", {"topic": topic}, ADMIN)
    assert (resp.status, resp.json()) == (200, {"message": ""})
    assert nsqd_stats(node, topic) is None  # deleted on that nsqd
    assert nsqd_stats(cluster.nodes[1], topic) is not None
    wait_until(lambda: lookupd_producer_ports(cluster.lookupd, topic)
               == {cluster.nodes[1].http_port}, what="producer gone from lookupd")


def test_bad_requests(cluster, topic):
    path = f"/api/topics/{topic}"
    for body, message in (({"action": "bogus"}, "INVALID_ACTION"), (None, "EOF"),
                          (b"null", "INVALID_ACTION"), (b"[1]", None)):
        resp = api(cluster, path, "POST", body, ADMIN)
        assert resp.status == 400
        if message:
            assert resp.json()["message"] == message
    resp = api(cluster, "/api/topics", "POST", {"topic": "bad topic!"}, ADMIN)
    assert (resp.status, resp.json()["message"]) == (400, "INVALID_TOPIC")
    resp = api(cluster, "/api/topics", "POST", {"topic": topic, "channel": "b@d"}, ADMIN)
    assert (resp.status, resp.json()["message"]) == (400, "INVALID_CHANNEL")
    resp = api(cluster, f"/api/nodes/{cluster.nodes[0].http_address}", "DELETE", b"{", ADMIN)
    assert (resp.status, resp.json()["message"]) == (400, "INVALID_BODY")


# --- ACL and notifications --------------------------------------------------------------------------

def test_non_admin_users_are_forbidden(cluster, topic):
    for headers in ({}, {"X-Forwarded-User": "mallory"}):
        for method, path, body in (
                ("POST", f"/api/topics/{topic}", {"action": "pause"}),
                ("POST", f"/api/topics/{topic}/ch", {"action": "empty"}),
                ("DELETE", f"/api/topics/{topic}", None),
                ("DELETE", f"/api/topics/{topic}/ch", None),
                ("POST", "/api/topics", {"topic": topic}),
                ("DELETE", f"/api/nodes/{cluster.nodes[0].http_address}", {"topic": topic})):
            resp = api(cluster, path, method, body, headers)
            assert (resp.status, resp.json()) == (403, {"message": "FORBIDDEN"}), (method, path)
    # nothing happened, and reading stays open to everyone
    assert not any(nsqd_stats(n, topic)["paused"] for n in cluster.nodes)
    assert all(nsqd_stats(n, topic)["channels"][0]["depth"] for n in cluster.nodes)
    assert api(cluster, f"/api/topics/{topic}").status == 200
    # the page is told whether to offer the action buttons
    assert b'"isAdmin":false' in api(cluster, "/").body
    assert b'"isAdmin":true' in api(cluster, "/", headers=ADMIN).body


def test_admin_action_posts_a_notification(cluster, topic):
    auth = base64.b64encode(b"bob:secret").decode()
    headers = {**ADMIN, "Authorization": f"Basic {auth}", "User-Agent": "admin-test-agent"}
    resp = api(cluster, f"/api/topics/{topic}/ch", "POST", {"action": "pause"}, headers)
    assert resp.status == 200
    doc = cluster.sink.wait_for("pause_channel", topic)
    assert doc["_content_type"] == "application/json"
    assert doc["channel"] == "ch" and "node" not in doc
    assert doc["user"] == "bob" and doc["user_agent"] == "admin-test-agent"
    assert doc["remote_ip"].startswith("127.0.0.1:")
    assert doc["url"] == f"http://127.0.0.1:{cluster.admin.http_port}/api/topics/{topic}/ch"
    assert doc["via"] and isinstance(doc["timestamp"], int)
    api(cluster, f"/api/topics/{topic}", "DELETE", headers=ADMIN)
    assert cluster.sink.wait_for("delete_topic", topic)["topic"] == topic


# --- routing, /config, static ----------------------------------------------------------------------

def test_routing_and_config(cluster):
    resp = api(cluster, "/api/topics", "PUT")
    assert (resp.status, resp.headers["Allow"]) == (405, "GET, OPTIONS, POST")
    assert api(cluster, "/nope").json() == {"message": "NOT_FOUND"}
    for page in ("/", "/topics/x", "/topics/x/y", "/nodes", "/nodes/a:1", "/lookup", "/counter"):
        resp = api(cluster, page)
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/html"), page
    script = api(cluster, "/static/app.js")
    assert script.status == 200 and b"nsqadmin UI" in script.body
    assert script.headers["Content-Type"].startswith(("application/javascript", "text/javascript"))
    assert api(cluster, "/static/..%2fhttp.py").status == 404
    assert api(cluster, "/config/log_level").json() == 2
    assert api(cluster, "/config/log_level", "PUT", b"debug").json() == 1
    assert api(cluster, "/config/log_level", "PUT", b"info").json() == 2
    assert api(cluster, "/config/http_client_connect_timeout").json() == 2_000_000_000
    assert api(cluster, "/config/admin_users").json() == [ADMIN_USER]
    assert api(cluster, "/config/nope").json() == {"message": "INVALID_OPTION"}


def test_nsqd_mode_with_base_path(cluster, topic, tmp_path):
    """Without nsqlookupd: nsqd addresses given directly, everything under --base-path."""
    addrs = [f"--nsqd-http-address={n.http_address}" for n in cluster.nodes]
    admin = NsqAdmin(tmp_path, *addrs, "--allow-config-from-cidr=10.0.0.0/8",
                     base_path="/admin")
    try:
        base = admin.url + "/admin"
        assert topic in request(base + "/api/topics").json()["topics"]
        doc = request(f"{base}/api/topics/{topic}").json()
        assert doc["message_count"] == 8 and len(doc["nodes"]) == 2
        assert doc["channels"][0]["depth"] == 8
        nodes = request(base + "/api/nodes").json()["nodes"]
        assert {n["http_port"] for n in nodes} == {n.http_port for n in cluster.nodes}
        resp = request(f"{base}/api/topics/{topic}", "POST", {"action": "pause"})  # no ACL set
        assert resp.status == 200
        assert all(nsqd_stats(n, topic)["paused"] for n in cluster.nodes)
        assert request(admin.url + "/api/topics").status == 404
        page = request(base + "/topics/x").body
        assert b'"/admin/static/app.js"' in page and b'"basePath":"/admin"' in page
        assert request(base + "/config/log_level").json() == {"message": "FORBIDDEN"}
    finally:
        admin.stop()


# --- command line -------------------------------------------------------------------------------------

def run_admin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "nsqadmin"), *args], capture_output=True, text=True,
                          timeout=15)


def test_command_line():
    out = run_admin("--version")
    assert out.returncode == 0 and out.stdout.startswith("nsqadmin v1.3.0 (built w/nsqpy ")
    out = run_admin("--http-address=127.0.0.1:0")
    assert out.returncode == 1
    assert "--nsqd-http-address or --lookupd-http-address required" in out.stderr
    assert "[nsqadmin] " in out.stderr
    out = run_admin("--http-address=127.0.0.1:0", "--nsqd-http-address=127.0.0.1:1",
                    "--lookupd-http-address=127.0.0.1:2")
    assert out.returncode == 1 and "not both" in out.stderr
    out = run_admin("--http-client-tls-cert=x.pem", "--nsqd-http-address=127.0.0.1:1")
    assert out.returncode == 1
    assert "--http-client-tls-key must be specified with --http-client-tls-cert" in out.stderr
    out = run_admin("--bogus")
    assert out.returncode == 2 and "flag provided but not defined: -bogus" in out.stderr
