"""Whole segments dropped at the retention time and at the byte cap, oldest first."""

from __future__ import annotations

import time

import pytest

from helpers.polling import wait_for
from helpers.servers import unique_name
from helpers.wire import Wire

from .history_util import read, segments

pytestmark = pytest.mark.timeout(60)


def test_expiry_at_the_byte_cap(nsqd_factory):
    cap = 80_000  # segments of cap/8 = 10,000 bytes
    node = nsqd_factory(f"--retention-bytes={cap}")
    topic = unique_name()
    w = Wire(node.tcp_address)
    sent = []
    for i in range(120):
        body = b"%05d" % i + b"x" * 995  # a record of 1,032 bytes, a block of 1,040
        w.pub(topic, body)
        sent.append(body)
        doc = segments(node, topic)
        assert doc["bytes"] <= cap, (i, doc["bytes"])
        if len(sent) * 1040 > cap:  # full: dropping one segment at a time keeps most of it
            assert doc["bytes"] > cap - 10_000 - 1040, (i, doc["bytes"])
    kept = [m.body for m in read(node, topic)]
    assert kept == sent[-len(kept):]  # a suffix: the oldest went first
    assert 60 <= len(kept) < 80


def test_expiry_at_the_retention_time(nsqd_factory):
    node = nsqd_factory("--retention=2s")  # a segment spans at most max(2s/8, 1s) = 1 s
    topic = unique_name()
    w = Wire(node.tcp_address)
    w.mpub(topic, [b"a1", b"a2"])
    a_time = time.time_ns()
    time.sleep(1.1)
    w.pub(topic, b"b")
    b_time = time.time_ns()
    assert [m.body for m in read(node, topic)] == [b"a1", b"a2", b"b"]
    wait_for(lambda: [m.body for m in read(node, topic)] == [b"b"], timeout=30, interval=0.02,
             what="a1, a2 dropped")
    gone = time.time_ns()
    assert gone - a_time >= 2_000_000_000  # not before its time (and not never: the wait)
    assert time.time_ns() - b_time < 2_000_000_000 or read(node, topic) == []
    wait_for(lambda: segments(node, topic)["messages"] == 0, timeout=30, what="b dropped")
    assert time.time_ns() - b_time >= 2_000_000_000
    doc = segments(node, topic)
    assert doc["oldest_timestamp"] == 0 and doc["segments"] == []
    w.pub(topic, b"c")  # the log goes on in a new segment
    assert [m.body for m in read(node, topic)] == [b"c"]
