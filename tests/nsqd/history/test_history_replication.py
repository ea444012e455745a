"""History meets replication (docs/history.md §5): per node; a replica's copies are not its
history; adoption through the topic appends with the original id and timestamp, adoption straight
into a channel does not."""

from __future__ import annotations

import pytest

from helpers.replication import linked, post, replica, wait_for
from helpers.servers import unique_name
from helpers.wire import Wire

from .history_util import error, read, segments

pytestmark = pytest.mark.timeout(120)


def test_replicas_keep_no_history_and_adoption_through_the_topic_does(nsqd_factory):
    b = nsqd_factory("--accept-replicas", "--replication-failover-timeout=2s", "--retention=1h")
    a = nsqd_factory(f"--replicate-to={b.tcp_address}", "--retention=1h")
    wait_for(lambda: linked(a), what="link up")
    held, owed = unique_name("held"), unique_name("owed")
    assert post(a, f"/channel/create?topic={owed}&channel=c") == 200
    w = Wire(a.tcp_address)
    w.mpub(held, [b"h%02d" % i for i in range(20)])  # no channel: held at the topic
    w.mpub(owed, [b"o%02d" % i for i in range(20)])  # given to channel c
    origin_log = read(a, held)
    assert [m.body for m in origin_log] == [b"h%02d" % i for i in range(20)]
    wait_for(lambda: replica(b, held).get("messages") == 20, what="copies on the peer")
    # the peer holds copies in its replica store, not in a topic, so not in any history
    assert error(b, "GET", f"/history/segments?topic={held}") == (404, "TOPIC_NOT_FOUND")

    a.kill9()
    wait_for(lambda: segments(b, held)["messages"] == 20 if _has_topic(b, held) else False,
             timeout=20, what="adoption")
    adopted = read(b, held)
    assert [(m.id, m.timestamp, m.body) for m in adopted] == [
        (m.id, m.timestamp, m.body) for m in origin_log]
    wait_for(lambda: _has_topic(b, owed), timeout=20, what="channel adoption")
    assert segments(b, owed)["messages"] == 0  # straight into channel c: the origin's log has them


def _has_topic(node, topic: str) -> bool:
    from helpers.replication import get_json

    return any(t["topic_name"] == topic for t in get_json(node, "/stats?format=json")["topics"])
