"""Leases with the rest of nsqd (docs/leases.md §6-7): a restart with leased messages in flight,
replication failover, drain, dead letters, and what /stats, /metrics show. Real processes."""

from __future__ import annotations

import pytest

from helpers.replication import linked, replica
from helpers.servers import unique_name
from helpers.wire import Wire

from .lease_util import channel_stats, get_json, http_request, lease_read, post_json, wait_for
from .test_lease_wire import make_channel, publish

pytestmark = pytest.mark.timeout(90)


def drain_plain(node, topic: str, channel: str, n: int) -> list:
    """Read ``n`` messages with an ordinary consumer, FINing each."""
    w = Wire(node.tcp_address)
    w.sub(topic, channel, rdy=n)
    got = []
    for _ in range(n):
        m = w.read_message()
        w.cmd(b"FIN", m.id)
        got.append(m)
    w.close()
    return got


def test_restart_writes_leased_messages_to_disk_and_forgets_the_lease(nsqd_factory):
    node = nsqd_factory("--leases")
    topic = unique_name("restart")
    make_channel(node, topic)
    bodies = publish(node, topic, 40)
    _, read = lease_read(node, "s/1/0", topic, "c", 25)
    node = node.restart("--leases")
    try:
        ch = channel_stats(node, topic, "c")
        assert (ch["depth"], ch["in_flight_count"]) == (40, 0)  # requeued to disk, as upstream on exit
        assert "lease_count" not in ch
        lease, again = lease_read(node, "s/1/0", topic, "c", 40, replay=True)
        assert (lease["state"], lease["held"], again) == ("replay", 0, [])  # the name is unknown now
        got = drain_plain(node, topic, "c", 40)
        assert sorted(m.body for m in got) == bodies
        attempts = {m.body: m.attempts for m in got}
        assert {attempts[m.body] for m in read} == {2}  # the leased delivery counted
    finally:
        node.stop()


def test_group_fin_is_replicated_and_a_dead_origins_leased_messages_are_adopted(nsqd_factory):
    peer = nsqd_factory("--leases", "--accept-replicas", "--replication-failover-timeout=2s")
    origin = nsqd_factory("--leases", f"--replicate-to={peer.tcp_address}", "--sync-every=1")
    wait_for(lambda: linked(origin), what="link up")
    topic = unique_name("repl")
    make_channel(origin, topic)
    bodies = publish(origin, topic, 100)
    _, finished = lease_read(origin, "p/1/0", topic, "c", 30)
    _, held = lease_read(origin, "p/2/0", topic, "c", 30)
    assert post_json(origin, "/lease/fin?group=p&upto=1") == (200, {"leases": 1, "messages": 30})
    wait_for(lambda: replica(peer, topic).get("messages") == 70, what="the lease FIN on the replica")
    origin.kill9()
    wait_for(lambda: any(t["topic_name"] == topic for t in get_json(peer, "/stats?format=json")["topics"]),
             timeout=15, what="adoption")
    got = drain_plain(peer, topic, "c", 70)
    assert sorted(m.body for m in got) == sorted(set(bodies) - {m.body for m in finished})
    attempts = {m.body: m.attempts for m in got}
    # adopted like any in-flight message: the peer knows the attempts last shipped (REQ and
    # timeouts ship them, a delivery does not), so they are delivered as first attempts again
    assert {attempts[m.body] for m in held} == {1}


def test_drain_waits_for_leased_messages_until_their_group_fin(nsqd_factory):
    node = nsqd_factory("--leases")
    topic = unique_name("drain")
    make_channel(node, topic)
    publish(node, topic, 20)
    lease_read(node, "g/1/0", topic, "c", 20)
    assert http_request(node, "POST", "/drain")[0] == 200
    import time

    time.sleep(0.5)
    assert node.proc.poll() is None  # held by the lease: not drained yet
    assert post_json(node, "/lease/fin?group=g&upto=1")[0] == 200
    assert node.proc.wait(10) == 0


def test_lease_timeouts_count_attempts_up_to_the_dead_letter_topic(nsqd_factory):
    node = nsqd_factory("--leases", "--max-attempts=2")
    topic = unique_name("dl")
    make_channel(node, topic)
    publish(node, topic, 5)
    lease_read(node, "d/1/0", topic, "c", 5, msg_timeout=1000)
    wait_for(lambda: channel_stats(node, topic, "c")["timeout_count"] == 5, timeout=30, what="timeouts")
    lease_read(node, "d/2/0", topic, "c", 5)
    assert post_json(node, "/lease/requeue?group=d&upto=2") == (200, {"leases": 2, "messages": 5})
    ch = channel_stats(node, topic, "c")
    assert (ch["dead_letter_count"], ch["depth"], ch["in_flight_count"]) == (5, 0, 0)
    dead = get_json(node, f"/stats?format=json&topic={topic}.dead")["topics"][0]
    assert dead["depth"] == 5


def test_stats_metrics_and_lease_listing(nsqd_factory):
    node = nsqd_factory("--leases")
    topic = unique_name("st")
    make_channel(node, topic)
    make_channel(node, topic, "plain")
    publish(node, topic, 30)
    lease_read(node, "m/1/0", topic, "c", 10)
    lease_read(node, "m/1/1", topic, "c", 5)
    doc = get_json(node, f"/stats?format=json&topic={topic}")
    chans = {c["channel_name"]: c for c in doc["topics"][0]["channels"]}
    assert (chans["c"]["lease_count"], chans["c"]["lease_held_count"]) == (2, 15)
    assert chans["c"]["lease_oldest_ms"] >= 0
    assert not any(k.startswith("lease") for k in chans["plain"])  # upstream's keys where unused
    status, text = http_request(node, "GET", f"/stats?topic={topic}")
    assert b"[leases] count: 2 held: 15 oldest: " in text
    status, metrics = http_request(node, "GET", "/metrics")
    line = f'nsqd_channel_lease_held{{topic="{topic}",channel="c"}} 15'.encode()
    assert line in metrics and b'channel="plain"' not in metrics.split(b"nsqd_channel_leases")[1].split(b"\n#")[0]
    leases = get_json(node, f"/leases?topic={topic}")["leases"]
    assert [(x["name"], x["channel"], x["state"], x["held"], x["connections"]) for x in leases] == [
        ("m/1/0", "c", "closed", 10, 0), ("m/1/1", "c", "closed", 5, 0)]
    peek = get_json(node, f"/channel/peek?topic={topic}&channel=c&state=in_flight&n=100")
    assert len(peek) == 15


def test_emptying_the_channel_drops_leased_messages_and_replay_gets_none(nsqd_factory):
    node = nsqd_factory("--leases")
    topic = unique_name("empty")
    make_channel(node, topic)
    publish(node, topic, 10)
    lease_read(node, "x/1/0", topic, "c", 10)
    assert http_request(node, "POST", f"/channel/empty?topic={topic}&channel=c")[0] == 200
    ch = channel_stats(node, topic, "c")
    assert (ch["depth"], ch["in_flight_count"], ch["lease_held_count"]) == (0, 0, 0)
    lease, again = lease_read(node, "x/1/0", topic, "c", 10)
    assert (lease["state"], lease["held"], again) == ("replay", 0, [])
    assert http_request(node, "POST", f"/topic/delete?topic={topic}")[0] == 200
    assert post_json(node, "/lease/fin?name=x/1/0") == (200, {"leases": 1, "messages": 0})
