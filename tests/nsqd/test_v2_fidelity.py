"""Upstream v1.3.0's exact answers on the TCP protocol's edges (issue #10 items 1, 2 and 7), each
over a real socket to a real nsqd process.

The MPUB tests send a bad header and then *wait* with the rest of the declared body unsent:
upstream answers as soon as the bad field is readable, so must we.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from helpers.servers import unique_name
from helpers.wire import Wire, pack_i32

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def addr(shared_nsqd):
    return shared_nsqd.tcp_address


def _topic_depth(nsqd, topic: str) -> int | None:
    """The topic's message count from /stats, None if it does not exist."""
    with urllib.request.urlopen(f"http://{nsqd.http_address}/stats?format=json&topic={topic}") as r:
        stats = json.load(r)
    for t in stats.get("topics") or []:
        if t["topic_name"] == topic:
            return t["message_count"]
    return None


# --- issue #10 item 1: MPUB is validated as it streams ------------------------------------------

@pytest.mark.parametrize("header,error", [
    (pack_i32(1000) + pack_i32(0), b"E_BAD_BODY MPUB invalid message count 0"),
    (pack_i32(1000) + pack_i32(-4), b"E_BAD_BODY MPUB invalid message count -4"),
    (pack_i32(1000) + pack_i32(1048576), b"E_BAD_BODY MPUB invalid message count 1048576"),
    (pack_i32(1000) + pack_i32(3) + pack_i32(0), b"E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
    (pack_i32(1000) + pack_i32(3) + pack_i32(2) + b"ok" + pack_i32(-1),
     b"E_BAD_MESSAGE MPUB invalid message(1) body size -1"),
    (pack_i32(1000) + pack_i32(3) + pack_i32(2000000),
     b"E_BAD_MESSAGE MPUB message too big 2000000 > 1048576"),
])
def test_bad_mpub_header_is_answered_before_the_rest_of_the_body(shared_nsqd, header, error):
    topic = unique_name()
    w = Wire(shared_nsqd.tcp_address)
    w.send(b"MPUB " + topic.encode() + b"\n" + header)  # and nothing more: the client waits
    w.expect_error(error)
    assert w.is_closed()
    # upstream creates the topic before reading the body; nothing of the bad batch is published
    assert _topic_depth(shared_nsqd, topic) == 0


def test_bad_mpub_message_after_good_ones_publishes_nothing(shared_nsqd):
    topic = unique_name()
    sub = Wire(shared_nsqd.tcp_address)
    sub.sub(topic, "ch", rdy=10)
    w = Wire(shared_nsqd.tcp_address)
    w.send(b"MPUB " + topic.encode() + b"\n" + pack_i32(1000) + pack_i32(3)
           + pack_i32(3) + b"one" + pack_i32(3) + b"two" + pack_i32(0))
    w.expect_error(b"E_BAD_MESSAGE MPUB invalid message(2) body size 0")
    assert w.is_closed()
    assert sub.is_closed(0.5) is False and not sub.pending  # no message reached the consumer
    assert _topic_depth(shared_nsqd, topic) == 0


def test_mpub_read_from_the_stream_like_upstream(addr):
    # a declared size of 4 with a count of 3: upstream takes the next bytes as a message size
    w = Wire(addr)
    w.send(b"MPUB " + unique_name().encode() + b"\n" + pack_i32(4) + pack_i32(3) + b"PUB t\n")
    w.expect_error(b"E_BAD_MESSAGE MPUB message too big 1347764768 > 1048576")
    assert w.is_closed()


def test_good_mpub_sent_in_pieces(addr):
    topic = unique_name()
    w = Wire(addr)
    w.send(b"MPUB " + topic.encode() + b"\n" + pack_i32(4 + 2 * 7) + pack_i32(2))
    time.sleep(0.05)
    w.send(pack_i32(3) + b"one")
    time.sleep(0.05)
    w.send(pack_i32(3) + b"two")
    w.expect_ok()
    sub = Wire(addr)
    sub.sub(topic, "ch", rdy=2)
    assert sorted([sub.read_message().body, sub.read_message().body]) == [b"one", b"two"]
