"""Peek (issue #13): queued (memory and disk), in-flight and deferred messages, read-only."""

from __future__ import annotations

import base64
import time

import pytest

from helpers.servers import unique_name
from helpers.wire import Wire
from interop.support import assert_server_healthy
from nsqd.lifecycle.lifecycle_util import channel_stats, fin_all, http_json, make_channel, topic_stats

pytestmark = pytest.mark.timeout(60)

COUNTERS = ("depth", "backend_depth", "in_flight_count", "deferred_count", "message_count",
            "requeue_count", "timeout_count")


def _bodies(entries: list[dict]) -> list[bytes]:
    return [base64.b64decode(e["body"]) for e in entries]


def test_channel_peek_shows_every_state_and_changes_nothing(nsqd_factory):
    node = nsqd_factory("--mem-queue-size=3")
    topic = unique_name()
    make_channel(node, topic, "ch")
    Wire(node.tcp_address).mpub(topic, [b"m%d" % i for i in range(8)])  # 3 in memory, 5 on disk
    c = Wire(node.tcp_address)
    c.sub(topic, "ch", rdy=2)
    m0, m1 = c.read_message(), c.read_message()
    c.cmd(b"RDY", "0")
    c.cmd(b"REQ", m1.id, "60000")
    c.cmd(b"NOP")
    time.sleep(0.2)
    before = {k: channel_stats(node, topic, "ch")[k] for k in COUNTERS}
    assert before["backend_depth"] == 5 and before["deferred_count"] == 1

    status, entries = http_json(node, "GET", f"/channel/peek?topic={topic}&channel=ch&n=1000")
    assert status == 200
    assert [e["state"] for e in entries] == ["in_flight"] + ["queued"] * 6 + ["deferred"]
    assert _bodies(entries) == [b"m0", b"m2", b"m3", b"m4", b"m5", b"m6", b"m7", b"m1"]
    assert entries[0]["id"] == m0.id.decode() and entries[0]["attempts"] == 1
    assert entries[-1]["id"] == m1.id.decode() and entries[-1]["attempts"] == 1
    assert entries[0]["timestamp"] == m0.timestamp
    now = time.time_ns()
    assert now + 55e9 < entries[-1]["due"] < now + 61e9
    assert all("due" not in e for e in entries[:-1])
    # n bounds the list; state narrows it (on-disk records included)
    assert _bodies(http_json(node, "GET", f"/channel/peek?topic={topic}&channel=ch&n=3")[1]) == [
        b"m0", b"m2", b"m3"]
    queued = http_json(node, "GET", f"/channel/peek?topic={topic}&channel=ch&state=queued")[1]
    assert _bodies(queued) == [b"m2", b"m3", b"m4", b"m5", b"m6", b"m7"]
    # read-only: counters, and what is delivered next and in which order
    assert {k: channel_stats(node, topic, "ch")[k] for k in COUNTERS} == before
    c.cmd(b"FIN", m0.id)
    c.cmd(b"RDY", "10")
    got = fin_all(c, 1.0)
    assert [m.id.decode() for m in got] == [e["id"] for e in queued]
    assert_server_healthy(node)


def test_topic_peek_reads_memory_and_disk(nsqd_factory):
    node = nsqd_factory("--mem-queue-size=2")
    topic = unique_name()
    pub = Wire(node.tcp_address)
    pub.cmd(b"DPUB", topic, "30000", body=b"later")
    pub.expect_ok()
    pub.mpub(topic, [b"a", b"b", b"c"])  # no channel yet: they wait at the topic
    status, entries = http_json(node, "GET", f"/topic/peek?topic={topic}")
    assert status == 200
    assert [(base64.b64decode(e["body"]), e["state"]) for e in entries] == [
        (b"later", "deferred"), (b"a", "queued"), (b"b", "queued"), (b"c", "queued")]
    assert topic_stats(node, topic)["depth"] == 4
    c = Wire(node.tcp_address)
    c.sub(topic, "ch", rdy=10)
    assert [m.body for m in fin_all(c, 1.0)] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("query,status,message", [
    ("/channel/peek?topic={t}&channel=ch&n=0", 400, "INVALID_ARG_N"),
    ("/channel/peek?topic={t}&channel=ch&n=1001", 400, "INVALID_ARG_N"),
    ("/channel/peek?topic={t}&channel=ch&n=x", 400, "INVALID_ARG_N"),
    ("/channel/peek?topic={t}&channel=ch&state=gone", 400, "INVALID_ARG_STATE"),
    ("/channel/peek?topic={t}&channel=nope", 404, "CHANNEL_NOT_FOUND"),
    ("/channel/peek?topic={t}", 400, "MISSING_ARG_CHANNEL"),
    ("/topic/peek?topic=nope_{t}", 404, "TOPIC_NOT_FOUND"),
    ("/topic/peek", 400, "MISSING_ARG_TOPIC"),
])
def test_peek_errors(shared_nsqd, query, status, message):
    topic = unique_name()
    make_channel(shared_nsqd, topic, "ch")
    assert http_json(shared_nsqd, "GET", query.format(t=topic)) == (status, {"message": message})
    assert http_json(shared_nsqd, "GET", f"/channel/peek?topic={topic}&channel=ch") == (200, [])


def test_peek_after_restart_shows_on_disk_deferred_messages(tmp_path):
    """Deferred messages are flushed to the disk queue at shutdown (due times kept beside it with
    --keep-deferred-delays);
    peek reads them there and still reports them as deferred, with their due time."""
    from helpers.servers import Nsqd

    node = Nsqd(tmp_path / "d", "--keep-deferred-delays")
    topic = unique_name()
    try:
        make_channel(node, topic, "ch")
        pub = Wire(node.tcp_address)
        pub.cmd(b"DPUB", topic, "60000", body=b"in a minute")
        pub.expect_ok()
        pub.pub(topic, b"now")
        due = time.time_ns() + 60e9
        node = node.restart("--keep-deferred-delays")
        entries = http_json(node, "GET", f"/channel/peek?topic={topic}&channel=ch")[1]
        assert [(base64.b64decode(e["body"]), e["state"]) for e in entries] == [
            (b"now", "queued"), (b"in a minute", "deferred")]
        assert abs(entries[1]["due"] - due) < 5e9
        assert channel_stats(node, topic, "ch")["backend_depth"] == 2
    finally:
        node.stop()
