"""Message TTL, requeue on disconnect and --max-defer-timeout (issue #13), real processes."""

from __future__ import annotations

import time

import pytest

from helpers.servers import unique_name
from helpers.wire import Wire
from interop.support import assert_server_healthy
from nsqd.lifecycle.lifecycle_util import channel_stats, make_channel, fin_all, http, http_json, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("mem", ["10000", "0"])  # from memory and from disk
def test_msg_ttl_drops_old_messages_at_delivery(nsqd_factory, mem):
    node = nsqd_factory("--msg-ttl=1s", f"--mem-queue-size={mem}")
    topic = unique_name()
    make_channel(node, topic, "ch")
    pub = Wire(node.tcp_address)
    pub.mpub(topic, [b"old1", b"old2", b"old3"])
    pub.cmd(b"DPUB", topic, "1500", body=b"deferred-too-long")  # due after its TTL
    pub.expect_ok()
    time.sleep(1.2)
    pub.mpub(topic, [b"new1", b"new2"])
    c = Wire(node.tcp_address)
    c.sub(topic, "ch", rdy=10)
    got = fin_all(c, 1.5)
    assert [m.body for m in got] == [b"new1", b"new2"]
    ch = channel_stats(node, topic, "ch")
    assert ch["expired_count"] == 4 and ch["depth"] == 0 and ch["deferred_count"] == 0
    assert ch["dead_letter_count"] == 0  # no dead-letter topic set explicitly: dropped
    assert_server_healthy(node)


def test_msg_ttl_with_explicit_dead_letter_topic(nsqd_factory):
    node = nsqd_factory()
    topic = unique_name()
    make_channel(node, topic, "ch")
    make_channel(node, topic, "keep")
    status, _ = http_json(node, "POST", f"/channel/config?topic={topic}&channel=ch",
                          {"msg_ttl": "300ms", "dead_letter_topic": "expired_%s"})
    assert status == 200
    Wire(node.tcp_address).pub(topic, b"stale")
    time.sleep(0.5)
    c = Wire(node.tcp_address)
    c.sub(topic, "ch", rdy=10)
    assert fin_all(c, 0.8) == []
    expired = Wire(node.tcp_address)
    expired.sub(f"expired_{topic}", "x", rdy=10)
    assert [m.body for m in fin_all(expired, 1.0)] == [b"stale"]
    ch = channel_stats(node, topic, "ch")
    assert ch["expired_count"] == 1 and ch["dead_letter_count"] == 1
    keep = Wire(node.tcp_address)  # the other channel has no TTL: it still gets the message
    keep.sub(topic, "keep", rdy=10)
    assert [m.body for m in fin_all(keep, 0.8)] == [b"stale"]


@pytest.mark.parametrize("flag", [True, False])
def test_requeue_on_disconnect(nsqd_factory, flag):
    node = nsqd_factory(*(["--requeue-on-disconnect"] if flag else []), "--msg-timeout=30s")
    topic = unique_name()
    make_channel(node, topic, "ch")
    Wire(node.tcp_address).mpub(topic, [b"a", b"b", b"c"])
    a = Wire(node.tcp_address)
    a.sub(topic, "ch", rdy=3)
    held = [a.read_message() for _ in range(3)]
    finished = next(m for m in held if m.body == b"b")
    b = Wire(node.tcp_address)
    b.sub(topic, "ch", rdy=10)
    # a FIN that races the close is honoured: it is sent together with the close
    a.cmd(b"FIN", finished.id)
    a.close()
    got = fin_all(b, 1.5)
    if flag:
        assert sorted(m.body for m in got) == [b"a", b"c"]
        assert all(m.attempts == 2 for m in got)
        ch = channel_stats(node, topic, "ch")
        assert ch["in_flight_count"] == 0 and ch["depth"] == 0 and ch["timeout_count"] == 0
    else:  # upstream: they wait for --msg-timeout
        assert got == []
        assert channel_stats(node, topic, "ch")["in_flight_count"] == 2
    assert_server_healthy(node)


def test_requeue_on_disconnect_respects_max_attempts(nsqd_factory):
    node = nsqd_factory("--requeue-on-disconnect", "--max-attempts=1")
    topic = unique_name()
    make_channel(node, topic, "ch")
    Wire(node.tcp_address).pub(topic, b"crashy")
    a = Wire(node.tcp_address)
    a.sub(topic, "ch", rdy=1)
    assert a.read_message().attempts == 1
    a.close()  # the consumer crashed with it once: it counts like a timeout
    wait_for(lambda: channel_stats(node, topic, "ch")["dead_letter_count"] == 1, 5, "dead letter")
    d = Wire(node.tcp_address)
    d.sub(f"{topic}.dead", "x", rdy=1)
    assert [m.body for m in fin_all(d, 1.0)] == [b"crashy"]


def _dpub(node, topic: str, ms: int) -> bytes:
    w = Wire(node.tcp_address)
    w.cmd(b"DPUB", topic, str(ms), body=b"later")
    frame = w.read_frame()
    w.close()
    return frame.data


@pytest.mark.parametrize("flags,ms,accepted", [
    ((), 3_600_000, True),
    ((), 3_600_001, False),  # upstream's limit: --max-req-timeout (1h)
    (("--max-defer-timeout=2h",), 5_400_000, True),
    (("--max-req-timeout=2h",), 5_400_000, True),  # falls back to --max-req-timeout
    (("--max-defer-timeout=10s",), 10_001, False),
])
def test_max_defer_timeout(nsqd_factory, flags, ms, accepted):
    node = nsqd_factory(*flags)
    topic = unique_name()
    answer = _dpub(node, topic, ms)
    status, body = http(node, "POST", f"/pub?topic={topic}&defer={ms}", b"later")
    if accepted:
        assert answer == b"OK" and (status, body) == (200, b"OK")
    else:
        limit = {(): 3_600_000}.get(flags, 10_000)
        assert answer == b"E_INVALID DPUB timeout %d out of range 0-%d" % (ms, limit)
        assert (status, body) == (400, b'{"message":"INVALID_DEFER"}')


def test_max_defer_timeout_leaves_req_clamped_at_max_req_timeout(nsqd_factory):
    node = nsqd_factory("--max-defer-timeout=3h", "--max-req-timeout=2s")
    topic = unique_name()
    assert _dpub(node, topic, 7_200_000) == b"OK"
    Wire(node.tcp_address).pub(topic, b"r")
    c = Wire(node.tcp_address)
    c.sub(topic, "ch", rdy=5)
    m = c.read_message()
    while m.body != b"r":
        m = c.read_message()
    c.cmd(b"REQ", m.id, "7200000")  # clamped to 2s, as upstream clamps REQ
    start = time.monotonic()
    c.sock.settimeout(60)
    again = c.read_message()
    assert again.body == b"r" and again.attempts == 2
    assert 1.5 <= time.monotonic() - start <= 60  # clamped: the asked delay is 2 hours
    assert "REQ timeout 7200000000000 out of range 0-2000000000. Setting to 2000000000" in node.log()
