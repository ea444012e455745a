"""nsqadmin and nsqpy's opt-in nsqd features: lifecycle counters and replication.

Real nsqd and nsqadmin processes, real V2 clients, headless Chromium. With a feature in use its
counters/sections appear in nsqadmin's API JSON and pages; without it not a key or a column is
added (upstream v1.3.0's output).
"""

from __future__ import annotations

import pytest

from admin.admin_util import NsqAdmin, request, wait_until
from admin.browser_util import expect
from helpers.replication import linked
from helpers.servers import unique_name
from helpers.wire import Wire
from nsqpy.admin.stats import Producer, TopicStats

pytestmark = pytest.mark.timeout(90)

LIFECYCLE = ("dead_letter_count", "expired_count", "dropped_count")


@pytest.fixture
def admin_for(tmp_path):
    """Start an nsqadmin pointed straight at the given nsqd(s); stopped at the end."""
    started: list[NsqAdmin] = []

    def start(*nodes) -> NsqAdmin:
        args = [f"--nsqd-http-address={n.http_address}" for n in nodes]
        admin = NsqAdmin(tmp_path / f"admin{len(started)}", *args)
        started.append(admin)
        return admin

    yield start
    for admin in started:
        admin.stop()


def _create_channel(node, topic: str, channel: str) -> None:
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel={channel}"):
        assert request(f"http://{node.http_address}{path}", "POST").status == 200


def _requeue_until_dead(node, topic: str, channel: str) -> int:
    """SUB, PUB one message, REQ it each time it arrives until nsqd dead-letters it."""
    w = Wire(node.tcp_address)
    try:
        w.sub(topic, channel, rdy=1)
        Wire(node.tcp_address).pub(topic, b"poison")
        reqs = 0
        for _ in range(5):
            msg = w.read_message()
            w.cmd(b"REQ", msg.id.decode(), b"0")
            reqs += 1
            doc = request(f"http://{node.http_address}/stats?format=json&topic={topic}").json()
            chan = doc["topics"][0]["channels"][0]
            if chan.get("dead_letter_count"):
                return reqs
        raise AssertionError("the message was never dead-lettered")
    finally:
        w.close()


def test_dead_letter_count_in_api_and_on_channel_and_topic_pages(nsqd_factory, admin_for, page):
    node = nsqd_factory("--max-attempts=2")
    admin = admin_for(node)
    topic, channel = unique_name("lc"), "work"
    _create_channel(node, topic, channel)
    assert _requeue_until_dead(node, topic, channel) == 2  # attempt 1 REQ'd, attempt 2 REQ'd: dead

    doc = request(f"{admin.url}/api/topics/{topic}/{channel}").json()
    assert doc["dead_letter_count"] == 1 and doc["expired_count"] == 0
    assert doc["dropped_count"] == 0 and doc["depth"] == 0
    assert doc["nodes"][0]["dead_letter_count"] == 1
    topic_doc = request(f"{admin.url}/api/topics/{topic}").json()
    assert topic_doc["channels"][0]["dead_letter_count"] == 1
    assert "dead_letter_count" not in topic_doc  # a topic only ever counts drops
    dead = request(f"{admin.url}/api/topics/{topic}.dead").json()
    assert dead["message_count"] == 1

    page.goto(f"{admin.url}/topics/{topic}/{channel}")
    expect(page.get_by_role("columnheader", name="Dead Lettered")).to_be_visible()
    expect(page.get_by_role("columnheader", name="Expired")).to_be_visible()
    total = page.locator("tr.total")
    expect(total.locator('td[data-key="dead_letter_count"]')).to_have_text("1")
    expect(total.locator('td[data-key="expired_count"]')).to_have_text("0")
    row = page.locator(f'tr[data-node="{node.http_address}"]')
    expect(row.locator('td[data-key="dead_letter_count"]')).to_have_text("1")

    page.goto(f"{admin.url}/topics/{topic}")
    chan_row = page.locator(f'tr[data-channel="{channel}"]')
    expect(chan_row.locator('td[data-key="dead_letter_count"]')).to_have_text("1")
    expect(page.get_by_role("columnheader", name="Dead Lettered")).to_have_count(1)


def test_topic_drop_counter_column_on_the_topic_page(nsqd_factory, admin_for, page):
    """A disk bound makes nsqd report ``dropped_count`` for the topic too: a column in both tables."""
    node = nsqd_factory("--max-disk-bytes=1000000")
    admin = admin_for(node)
    topic = unique_name("bound")
    _create_channel(node, topic, "c")
    doc = request(f"{admin.url}/api/topics/{topic}").json()
    assert doc["dropped_count"] == 0 and doc["nodes"][0]["dropped_count"] == 0
    assert doc["channels"][0]["dropped_count"] == 0 and "expired_count" in doc["channels"][0]
    assert "expired_count" not in doc

    page.goto(f"{admin.url}/topics/{topic}")
    expect(page.get_by_role("columnheader", name="Dropped")).to_have_count(2)
    expect(page.get_by_role("columnheader", name="Expired")).to_have_count(1)  # channels only
    node_row = page.locator(f'tr[data-node="{node.http_address}"]')
    expect(node_row.locator('td[data-key="dropped_count"]')).to_have_text("0")
    expect(page.locator('tr.total td[data-key="dropped_count"]')).to_have_text("0")
    expect(page.locator('tr[data-channel="c"] td[data-key]')).to_have_count(3)


def test_no_lifecycle_keys_or_columns_without_the_feature(nsqd_factory, admin_for, page):
    node = nsqd_factory()
    admin = admin_for(node)
    topic, channel = unique_name("plain"), "work"
    _create_channel(node, topic, channel)
    w = Wire(node.tcp_address)
    try:
        w.sub(topic, channel, rdy=1)
        Wire(node.tcp_address).pub(topic, b"x")
        w.cmd(b"REQ", w.read_message().id.decode(), b"0")
        wait_until(lambda: request(f"{admin.url}/api/topics/{topic}/{channel}").json()
                   ["requeue_count"] == 1, what="the REQ counted")
    finally:
        w.close()

    chan = request(f"{admin.url}/api/topics/{topic}/{channel}").json()
    topic_doc = request(f"{admin.url}/api/topics/{topic}").json()
    node_doc = request(f"{admin.url}/api/nodes/{node.http_address}").json()
    for doc in (chan, chan["nodes"][0], topic_doc, topic_doc["nodes"][0], topic_doc["channels"][0],
                node_doc["topics"][0], node_doc["topics"][0]["channels"][0]):
        assert not set(LIFECYCLE) & set(doc), doc
    assert "replication" not in node_doc and "replicas" not in node_doc

    page.goto(f"{admin.url}/topics/{topic}/{channel}")
    expect(page.get_by_role("heading", name="Channel Message Queue")).to_be_visible()
    for name in ("Dead Lettered", "Expired", "Dropped"):
        expect(page.get_by_role("columnheader", name=name)).to_have_count(0)
    expect(page.locator("td[data-key]")).to_have_count(0)
    page.goto(f"{admin.url}/nodes/{node.http_address}")
    expect(page.get_by_role("heading", name="Node: ")).to_be_visible()
    expect(page.locator("#replication")).to_have_count(0)


def test_node_pages_show_replication_on_both_sides(nsqd_factory, admin_for, page):
    peer = nsqd_factory("--accept-replicas")
    origin = nsqd_factory(f"--replicate-to={peer.tcp_address}", "--replication-degraded=accept")
    wait_until(lambda: linked(origin), what="the replication link")
    topic = unique_name("rep")
    _create_channel(origin, topic, "c")
    w = Wire(origin.tcp_address)
    try:
        w.mpub(topic, [b"one", b"two", b"three"])  # sync acks: on the peer once OK'd
    finally:
        w.close()
    admin = admin_for(origin, peer)

    origin_doc = request(f"{admin.url}/api/nodes/{origin.http_address}").json()
    assert origin_doc["replication"]["peer"] == peer.tcp_address
    assert origin_doc["replication"]["state"] == "up"
    peer_doc = request(f"{admin.url}/api/nodes/{peer.http_address}").json()
    assert "replication" not in peer_doc
    (rep,) = peer_doc["replicas"]
    assert rep["origin"] == origin.tcp_address and rep["messages"] == 3

    page.goto(f"{admin.url}/nodes/{origin.http_address}")
    section = page.locator("#replication")
    expect(section.get_by_role("heading", name="Replication")).to_be_visible()
    row = section.locator('tr[data-replication="origin"]')
    expect(row).to_contain_text(peer.tcp_address)
    expect(row).to_contain_text("linked")
    expect(row.locator("td").nth(4)).to_have_text("0")  # unacked batches

    page.goto(f"{admin.url}/nodes/{peer.http_address}")
    row = page.locator(f'#replication tr[data-replica="{origin.tcp_address}"]')
    expect(row.locator("td").nth(1)).to_have_text("up")
    expect(row.locator("td").nth(2)).to_have_text("3")  # messages held for the origin
    expect(row.locator("td").nth(3)).to_have_text(str(rep["bytes"]))
    expect(page.locator('#replication tr[data-replication="origin"]')).to_have_count(0)

    # the peer goes away: the origin keeps accepting (degraded) and its node page says so
    peer.stop()
    w = Wire(origin.tcp_address)
    try:
        w.pub(topic, b"four")
    finally:
        w.close()

    def degraded() -> bool:
        doc = request(f"{admin.url}/api/nodes/{origin.http_address}").json()
        return doc.get("replication", {}).get("state") == "degraded"
    wait_until(degraded, timeout=20, what="the origin's degraded state")
    page.goto(f"{admin.url}/nodes/{origin.http_address}")
    row = page.locator('#replication tr[data-replication="origin"]')
    expect(row.locator("td").nth(2)).to_have_text("degraded")


def _node_stats(port: int, channel: dict, topic_extra: dict | None = None) -> TopicStats:
    producer = Producer(hostname=f"h{port}", broadcast_address="127.0.0.1", http_port=port)
    raw = {"topic_name": "t", "depth": 0, "backend_depth": 0, "message_count": 1,
           "channels": [{"channel_name": "c", "depth": 0, "backend_depth": 0, **channel}],
           **(topic_extra or {})}
    return TopicStats.from_nsqd(raw, producer.http_address, producer, 0.0)


def test_aggregates_sum_only_the_nodes_that_report_a_counter():
    with_feature = _node_stats(1, {"dead_letter_count": 2, "expired_count": 1, "dropped_count": 0},
                               {"dropped_count": 4})
    plain = _node_stats(2, {})
    also = _node_stats(3, {"dead_letter_count": 3, "expired_count": 0, "dropped_count": 5})
    total = TopicStats("", "", "t")
    for ts in (with_feature, plain, also):
        total.add(ts)
    doc = total.to_json()
    assert doc["dropped_count"] == 4 and "dead_letter_count" not in doc
    chan = doc["channels"][0]
    assert (chan["dead_letter_count"], chan["expired_count"], chan["dropped_count"]) == (5, 1, 5)
    per_node = {n["node"]: n for n in chan["nodes"]}
    assert not set(LIFECYCLE) & set(per_node["127.0.0.1:2"])
    assert per_node["127.0.0.1:3"]["dropped_count"] == 5
    # the keys sit after upstream's counters, before client_count (Go's field order otherwise)
    keys = list(chan)
    assert keys.index("message_count") < keys.index("dead_letter_count") < keys.index("client_count")

    none = TopicStats("", "", "t")
    none.add(_node_stats(4, {}))
    assert not set(LIFECYCLE) & set(none.to_json()) and not set(LIFECYCLE) & set(
        none.to_json()["channels"][0])


def _lease_read(node, name: str, topic: str, channel: str, n: int) -> None:
    """Read ``n`` messages under a consumption lease and close: the lease holds them."""
    w = Wire(node.tcp_address)
    try:
        assert w.identify(feature_negotiation=True, lease=name)["lease"]["state"] == "new"
        w.sub(topic, channel, rdy=n)
        for _ in range(n):
            w.read_message()
    finally:
        w.close()


def test_leases_in_api_and_on_channel_and_topic_pages(nsqd_factory, admin_for, page):
    a, b = nsqd_factory("--leases"), nsqd_factory("--leases")
    admin = admin_for(a, b)
    topic, channel = unique_name("lease"), "spark"
    for node in (a, b):
        _create_channel(node, topic, channel)
        Wire(node.tcp_address).mpub(topic, [b"m%d" % i for i in range(10)])
    _lease_read(a, "q/1/0", topic, channel, 4)
    _lease_read(a, "q/1/1", topic, channel, 3)
    _lease_read(b, "q/1/0", topic, channel, 5)

    doc = request(f"{admin.url}/api/topics/{topic}/{channel}").json()
    assert (doc["lease_count"], doc["lease_held_count"], doc["in_flight_count"]) == (3, 12, 12)
    by_node = {n["node"]: n for n in doc["nodes"]}
    assert (by_node[a.http_address]["lease_count"], by_node[b.http_address]["lease_held_count"]) == (2, 5)
    assert doc["lease_oldest_ms"] == max(n["lease_oldest_ms"] for n in doc["nodes"])
    assert "lease_count" not in request(f"{admin.url}/api/topics/{topic}").json()

    page.goto(f"{admin.url}/topics/{topic}/{channel}")
    expect(page.get_by_role("columnheader", name="Leases")).to_be_visible()
    expect(page.locator('tr.total td[data-key="lease_held_count"]')).to_have_text("12")
    expect(page.locator(f'tr[data-node="{b.http_address}"] td[data-key="lease_count"]')).to_have_text("1")
    page.goto(f"{admin.url}/topics/{topic}")
    expect(page.locator(f'tr[data-channel="{channel}"] td[data-key="lease_count"]')).to_have_text("3")
