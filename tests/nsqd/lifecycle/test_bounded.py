"""Bounded disk queues (issue #13): --max-disk-bytes with reject and drop-oldest, real nsqd."""

from __future__ import annotations

import pytest

from helpers.servers import unique_name
from helpers.wire import Wire
from interop.support import assert_server_healthy
from nsqd.lifecycle.lifecycle_util import (
    channel_stats, fin_all, http, http_json, make_channel, topic_stats,
)

pytestmark = pytest.mark.timeout(60)

BODY = 100
RECORD = 4 + 26 + BODY  # length prefix + message header + body, as stored on disk


def _body(i: int) -> bytes:
    return (b"%04d" % i).ljust(BODY, b".")


def test_reject_refuses_publishes_while_a_channel_queue_is_full(nsqd_factory):
    node = nsqd_factory("--mem-queue-size=0", "--max-disk-bytes=1000")
    topic = unique_name()
    make_channel(node, topic, "ch")
    pub = Wire(node.tcp_address)
    accepted = 0
    while True:
        pub.cmd(b"PUB", topic, body=_body(accepted))
        frame = pub.read_frame()
        if frame.data != b"OK":
            break
        accepted += 1
        assert accepted < 100
    assert accepted == -(-1000 // RECORD)  # accepted until the queue reached its bound
    assert frame.data == b"E_PUB_FAILED PUB failed channel %s:ch queue full (max-disk-bytes)" % (
        topic.encode())
    assert http(node, "POST", f"/pub?topic={topic}", b"x") == (503, b'{"message":"QUEUE_FULL"}')
    assert http(node, "POST", f"/mpub?topic={topic}", b"x\ny") == (
        503, b'{"message":"QUEUE_FULL"}')
    assert http(node, "GET", "/ping") == (200, b"OK")  # a full queue is not a sick disk
    # consuming frees room; nothing accepted was lost
    c = Wire(node.tcp_address)
    c.sub(topic, "ch", rdy=100)
    got = fin_all(c, 1.0)
    assert [m.body for m in got] == [_body(i) for i in range(accepted)]
    Wire(node.tcp_address).pub(topic, b"room again")
    assert [m.body for m in fin_all(c, 1.0)] == [b"room again"]
    assert "dropped_count" in channel_stats(node, topic, "ch")
    assert channel_stats(node, topic, "ch")["dropped_count"] == 0
    assert_server_healthy(node)


@pytest.mark.parametrize("per_file", [100 * 1024 * 1024, 600])  # one file, and many
def test_drop_oldest_keeps_the_newest_within_bound(nsqd_factory, per_file):
    node = nsqd_factory("--mem-queue-size=0", "--max-disk-bytes=1000",
                        "--disk-full-policy=drop-oldest", f"--max-bytes-per-file={per_file}")
    topic = unique_name()
    make_channel(node, topic, "bounded")
    make_channel(node, topic, "free")
    http_json(node, "POST", f"/channel/config?topic={topic}&channel=free", {"max_disk_bytes": 0})
    pub = Wire(node.tcp_address)
    for i in range(0, 60, 3):
        pub.mpub(topic, [_body(i), _body(i + 1), _body(i + 2)])
    ch = channel_stats(node, topic, "bounded")
    assert ch["depth"] * RECORD <= 1000 and ch["depth"] == 1000 // RECORD
    assert ch["dropped_count"] == 60 - ch["depth"]
    kept = ch["depth"]
    c = Wire(node.tcp_address)
    c.sub(topic, "bounded", rdy=100)
    assert [m.body for m in fin_all(c, 1.0)] == [_body(i) for i in range(60 - kept, 60)]
    free = Wire(node.tcp_address)
    free.sub(topic, "free", rdy=100)
    assert len(fin_all(free, 1.0)) == 60
    # fully read files are gone: the data directory stays bounded too
    files = list(node.data_path.glob(f"{topic}:bounded.diskqueue.*.dat"))
    assert sum(f.stat().st_size for f in files) <= max(per_file, 1000) + RECORD * 3
    assert_server_healthy(node)


def test_topic_bound_without_channels(nsqd_factory):
    """A topic without channels holds its messages itself; its own bound applies."""
    node = nsqd_factory("--mem-queue-size=0")
    topic = unique_name()
    http(node, "POST", f"/topic/create?topic={topic}")
    status, doc = http_json(node, "POST", f"/topic/config?topic={topic}",
                            {"max_disk_bytes": 500, "disk_full_policy": "drop-oldest"})
    assert status == 200 and doc["max_disk_bytes"] == 500
    Wire(node.tcp_address).mpub(topic, [_body(i) for i in range(10)])
    st = topic_stats(node, topic)
    assert st["depth"] == 500 // RECORD and st["dropped_count"] == 10 - st["depth"]
    http_json(node, "POST", f"/topic/config?topic={topic}", {"disk_full_policy": "reject"})
    pub = Wire(node.tcp_address)
    pub.pub(topic, _body(10))  # 3 records (390 bytes) are under 500: one more fits
    pub.cmd(b"PUB", topic, body=b"more")
    pub.expect_error(b"E_PUB_FAILED PUB failed topic %s queue full (max-disk-bytes)" % (
        topic.encode()))
    # lifting the bound (null: inherit the flag's 0) lets publishes in again
    http_json(node, "POST", f"/topic/config?topic={topic}", {"max_disk_bytes": None})
    Wire(node.tcp_address).pub(topic, b"more")
    assert topic_stats(node, topic)["depth"] == 500 // RECORD + 2
