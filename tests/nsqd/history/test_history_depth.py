"""A replaying channel's depth in /stats counts what the replay still has to deliver, so readers
that wait for depth (Spark's executor-side planner, availableNow, stop_when_drained) and
nsqadmin see a channel created from the past as full, not empty."""

from __future__ import annotations

import pytest

from helpers.polling import wait_for
from helpers.servers import unique_name
from helpers.wire import Wire

from .history_util import call, channel_stats, nothing_more, read, segments

pytestmark = pytest.mark.timeout(90)

N = 4000
BODY = b"x" * 100


def _publish(node, topic: str, n: int, prefix: bytes) -> None:
    w = Wire(node.tcp_address)
    for i in range(0, n, 100):
        w.mpub(topic, [prefix + b"%06d" % j + BODY for j in range(i, min(n, i + 100))])
    w.close()


@pytest.mark.parametrize("mem", ["10000", "0"])
def test_depth_of_a_channel_created_from_earliest(nsqd_factory, mem):
    # small segments (retention_bytes / 8), so the count spans several of them; nothing expires
    node = nsqd_factory("--retention=1h", "--retention-bytes=2000000", f"--mem-queue-size={mem}")
    topic = unique_name()
    create = f"/channel/create?topic={topic}&channel=past&from=earliest"
    assert call(node, "POST", f"/topic/create?topic={topic}")[0] == 200
    assert call(node, "POST", f"/channel/create?topic={topic}&channel=other")[0] == 200
    _publish(node, topic, N, b"old")
    assert len(segments(node, topic)["segments"]) >= 2
    assert call(node, "POST", create)[0] == 200
    c = channel_stats(node, topic, "past")
    assert (c["depth"], c["in_flight_count"], c["deferred_count"]) == (N, 0, 0)
    assert channel_stats(node, topic, "other")["depth"] == N  # an ordinary channel: unchanged

    # live messages during the replay are in the log behind it: counted once
    _publish(node, topic, 50, b"live")
    assert channel_stats(node, topic, "past")["depth"] == N + 50

    w = Wire(node.tcp_address, timeout=20)
    w.sub(topic, "past", 100)
    held = [w.read_message() for _ in range(100)]
    wait_for(lambda: channel_stats(node, topic, "past")["in_flight_count"] == 100, what="100 in flight")
    assert channel_stats(node, topic, "past")["depth"] == N + 50 - 100
    last = N + 50 - 100
    for m in held:
        w.cmd(b"FIN", m.id)
    got = len(held)
    while got < N + 50:
        m = w.read_message()
        w.cmd(b"FIN", m.id)
        got += 1
        if got % 1000 == 0:
            depth = channel_stats(node, topic, "past")["depth"]
            assert 0 <= depth <= last and depth <= N + 50 - got + 100  # at most one RDY ahead
            last = depth
    assert nothing_more(w)
    wait_for(lambda: (lambda c: (c["depth"], c["in_flight_count"]) == (0, 0))(
        channel_stats(node, topic, "past")), what="every replayed message FINished")
    w.close()


@pytest.mark.parametrize("n, flags", [
    (N, ["--retention-bytes=2000000"]),  # the point is at a segment's start: exact
    (30_000, []),  # one 64 MiB segment, the point 4 MiB into it: that segment is estimated
])
def test_depth_of_a_channel_rewound_to_a_time(nsqd_factory, n, flags):
    node = nsqd_factory("--retention=1h", *flags)
    topic = unique_name()
    assert call(node, "POST", f"/topic/create?topic={topic}")[0] == 200
    assert call(node, "POST", f"/channel/create?topic={topic}&channel=c")[0] == 200
    _publish(node, topic, n, b"m")
    kept = read(node, topic)
    point = -(-kept[n * 3 // 4].timestamp // 1_000_000)  # unix ms, after 3/4 of the messages
    expected = sum(1 for m in kept if m.timestamp >= point * 1_000_000)
    assert 0 < expected < n
    assert call(node, "POST", f"/channel/rewind?topic={topic}&channel=c&to={point}")[0] == 200
    depth = channel_stats(node, topic, "c")["depth"]
    if flags:
        assert depth == expected
    else:
        assert abs(depth - expected) <= expected // 20, (depth, expected)
    w = Wire(node.tcp_address, timeout=20)
    w.sub(topic, "c", 100)
    got = 0
    while got < expected:
        w.cmd(b"FIN", w.read_message().id)
        got += 1
        if got % 1000 == 0 and got < expected - 200:
            assert channel_stats(node, topic, "c")["depth"] > 0
    assert nothing_more(w)
    wait_for(lambda: channel_stats(node, topic, "c")["depth"] == 0, what="the replay delivered")
    w.close()
