"""The replication link with real nsqd processes: origin A --replicate-to B (phase 2 of #14)."""

from __future__ import annotations

import os
import signal
import urllib.error
import urllib.request

import pytest

from helpers.replication import get_json, linked, post, replica, wait_for
from helpers.servers import unique_name
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def pair(nsqd_factory):
    b = nsqd_factory("--accept-replicas")
    a = nsqd_factory(f"--replicate-to={b.tcp_address}")
    wait_for(lambda: linked(a), what="link up")
    return a, b


def test_without_flags_nothing_changes(nsqd):
    w = Wire(nsqd.tcp_address)
    w.send(b"RSUB 127.0.0.1:1 00112233aabbccdd 1\n")
    w.expect_error(b"E_INVALID invalid command RSUB")
    doc = get_json(nsqd, "/stats?format=json")
    assert "replicas" not in doc and "replication" not in doc
    w2 = Wire(nsqd.tcp_address)
    w2.pub("t", b"x")
    names = set(os.listdir(nsqd.data_path))
    assert not names & {"replicas", "nsqd.replication.json"}
    req = urllib.request.Request(f"http://{nsqd.http_address}/replication/adopt?origin=a:1",
                                 method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 404


def test_publishes_reach_the_replica_and_fins_shrink_it(pair):
    a, b = pair
    topic = unique_name()
    assert post(a, f"/channel/create?topic={topic}&channel=c1") == 200
    assert post(a, f"/channel/create?topic={topic}&channel=c2") == 200
    w = Wire(a.tcp_address)
    for i in range(20):
        w.pub(topic, b"p%d" % i)
    w.mpub(topic, [b"m%d" % i for i in range(20)])
    w.cmd(b"DPUB", topic, b"60000", body=b"deferred")
    w.expect_ok()
    assert post(a, f"/pub?topic={topic}", b"http") == 200
    assert post(a, f"/mpub?topic={topic}", b"h1\nh2") == 200
    # sync mode: every OK above came after B stored the message
    got = replica(b, topic)
    assert got["messages"] == 44 and got["channels"] == {"c1": 44, "c2": 44}
    assert replica(b)["link"] == "up"
    assert topic not in [t["topic_name"] for t in get_json(b, "/stats?format=json")["topics"]]
    # consume 30 on c1 and FIN them: still owed to c2
    c = Wire(a.tcp_address)
    c.sub(topic, "c1", rdy=30)
    for _ in range(30):
        m = c.read_message()
        c.cmd(b"FIN", m.id)
    wait_for(lambda: replica(b, topic)["channels"].get("c1") == 14, what="c1 FINs shipped")
    assert replica(b, topic)["messages"] == 44
    c2 = Wire(a.tcp_address)
    c2.sub(topic, "c2", rdy=43)
    for _ in range(43):
        m = c2.read_message()
        c2.cmd(b"FIN", m.id)
    # what both channels finished is gone; the deferred one and c1's rest stay
    wait_for(lambda: replica(b, topic)["messages"] == 14, what="replica shrinks")
    # deleting c1 on the origin releases what only c1 owed
    assert post(a, f"/channel/delete?topic={topic}&channel=c1") == 200
    wait_for(lambda: replica(b, topic)["messages"] == 1, what="channel deletion shipped")


def test_ephemeral_topics_and_channels_are_not_replicated(pair):
    """Upstream keeps them in memory only: no durability to replicate (docs/replication.md §9)."""
    a, b = pair
    topic = unique_name()
    assert post(a, f"/channel/create?topic={topic}&channel=kept") == 200
    assert post(a, f"/channel/create?topic={topic}&channel=gone%23ephemeral") == 200
    assert post(a, f"/channel/create?topic={topic}_e%23ephemeral&channel=c") == 200
    w = Wire(a.tcp_address)
    w.mpub(topic, [b"x%d" % i for i in range(5)])
    w.mpub(f"{topic}_e#ephemeral", [b"e%d" % i for i in range(5)])
    got = replica(b, topic)
    assert got["messages"] == 5 and got["channels"] == {"kept": 5}
    assert replica(b, f"{topic}_e#ephemeral")["messages"] == 0
    assert get_json(a, "/stats?format=json")["replication"]["shipped_messages"] == 5


def test_held_messages_follow_the_pump(pair):
    a, b = pair
    topic = unique_name()
    w = Wire(a.tcp_address)
    w.mpub(topic, [b"x"] * 5)  # no channel yet: held at the topic
    assert replica(b, topic)["held"] == 5
    assert post(a, f"/channel/create?topic={topic}&channel=late") == 200
    wait_for(lambda: replica(b, topic).get("channels") == {"late": 5}, what="pumped")


def test_sync_ok_waits_for_the_peer(pair):
    a, b = pair
    topic = unique_name()
    assert post(a, f"/channel/create?topic={topic}&channel=c") == 200
    w = Wire(a.tcp_address)
    w.pub(topic, b"first")
    os.kill(b.pid, signal.SIGSTOP)
    try:
        w.cmd(b"PUB", topic, body=b"second")
        w.sock.settimeout(0.7)
        with pytest.raises(TimeoutError):
            w.read_frame()
    finally:
        os.kill(b.pid, signal.SIGCONT)
    w.sock.settimeout(5)
    w.expect_ok()
    assert replica(b, topic)["messages"] == 2


def test_async_and_degraded_mode(nsqd_factory):
    b = nsqd_factory("--accept-replicas")
    a = nsqd_factory(f"--replicate-to={b.tcp_address}", "--replication-ack=async")
    wait_for(lambda: linked(a), what="link up")
    topic = unique_name()
    assert post(a, f"/channel/create?topic={topic}&channel=c") == 200
    w = Wire(a.tcp_address)
    w.mpub(topic, [b"a"] * 10)
    wait_for(lambda: replica(b, topic)["messages"] == 10, what="async replica")
    b.stop()
    # the peer is gone: publishes are still accepted (degraded), and say so in /stats
    w.mpub(topic, [b"b"] * 5)
    rep = wait_for(lambda: (r := get_json(a, "/stats?format=json")["replication"])
                   ["state"] == "degraded" and r, what="degraded")
    assert rep["degraded_messages"] >= 5
    # the peer returns
    b2 = b.restart("--accept-replicas")
    try:
        wait_for(lambda: linked(a), timeout=15, what="relink")
        # its replica survived, and what was accepted while degraded is shipped on return
        wait_for(lambda: replica(b2, topic)["messages"] == 15, what="re-replicated")
        w.mpub(topic, [b"c"] * 3)
        wait_for(lambda: replica(b2, topic)["messages"] == 18, what="after relink")
    finally:
        b2.stop()


def test_bad_replication_ack_is_refused(tmp_path):
    import subprocess

    from helpers.servers import VENV_BIN

    out = subprocess.run([str(VENV_BIN / "nsqd"), "--replication-ack=maybe",
                          f"--data-path={tmp_path}"], capture_output=True, text=True, timeout=20)
    assert out.returncode != 0
    assert "replication-ack" in out.stderr + out.stdout
