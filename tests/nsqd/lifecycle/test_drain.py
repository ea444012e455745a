"""Drain mode (issue #13): POST /drain and SIGUSR2 with real nsqd and nsqlookupd processes."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request

import pytest

from helpers.servers import Nsqd, Nsqlookupd, unique_name
from helpers.wire import Wire
from nsqd.lifecycle.lifecycle_util import channel_stats, make_channel, fin_all, http, wait_for

pytestmark = pytest.mark.timeout(90)


def _producers(lookupd: Nsqlookupd, topic: str) -> list:
    try:
        with urllib.request.urlopen(f"http://{lookupd.http_address}/lookup?topic={topic}",
                                    timeout=5) as resp:
            return json.load(resp).get("producers") or []
    except urllib.error.HTTPError as err:
        assert err.code == 404
        return []


def test_drain_with_consumers_and_lookupd(tmp_path):
    lookupd = Nsqlookupd(tmp_path / "l")
    node = Nsqd(tmp_path / "d", f"--lookupd-tcp-address={lookupd.tcp_address}")
    topic = unique_name()
    try:
        make_channel(node, topic, "ch")
        Wire(node.tcp_address).mpub(topic, [b"m%03d" % i for i in range(200)])
        wait_for(lambda: _producers(lookupd, topic), 10, "the topic to be registered")
        consumer = Wire(node.tcp_address)
        consumer.sub(topic, "ch", rdy=5)
        held = [consumer.read_message() for _ in range(5)]  # in flight while the drain starts
        publisher = Wire(node.tcp_address)

        assert http(node, "POST", "/drain") == (200, b"")
        assert http(node, "GET", "/ping") == (503, b"DRAINING")
        assert http(node, "POST", f"/pub?topic={topic}", b"x") == (503, b'{"message":"DRAINING"}')
        assert http(node, "POST", f"/mpub?topic={topic}", b"x\ny\n") == (
            503, b'{"message":"DRAINING"}')
        publisher.cmd(b"PUB", topic, body=b"late")
        publisher.expect_error(b"E_PUB_FAILED PUB failed draining")
        for cmd, params, err in ((b"MPUB", (), b"E_MPUB_FAILED MPUB failed draining"),
                                 (b"DPUB", ("10",), b"E_DPUB_FAILED DPUB failed draining")):
            p = Wire(node.tcp_address)
            if cmd == b"MPUB":
                p.send(b"MPUB " + topic.encode() + b"\n\x00\x00\x00\x0b\x00\x00\x00\x01"
                       b"\x00\x00\x00\x03abc")
            else:
                p.cmd(cmd, topic, *params, body=b"late")
            p.expect_error(err)
            p.close()
        wait_for(lambda: not _producers(lookupd, topic), 10, "nsqlookupd to forget the node")
        assert node.proc.poll() is None  # still delivering

        for m in held:
            consumer.cmd(b"FIN", m.id)
        got = held + fin_all(consumer, 3.0)
        assert sorted(m.body for m in got) == [b"m%03d" % i for i in range(200)]
        assert node.proc.wait(10) == 0
        log = node.log()
        assert "DRAIN: every channel is empty" in log and "Traceback" not in log
    finally:
        node.stop()
        lookupd.stop()
    # nothing was left behind, and the node starts normally again (not draining)
    node = node.restart()
    try:
        assert http(node, "GET", "/ping") == (200, b"OK")
        assert channel_stats(node, topic, "ch")["depth"] == 0
    finally:
        node.stop()


def test_sigusr2_with_drain_timeout_keeps_the_rest_on_disk(tmp_path):
    node = Nsqd(tmp_path / "d", "--drain-timeout=1s")
    topic = unique_name()
    try:
        make_channel(node, topic, "nobody")
        Wire(node.tcp_address).mpub(topic, [b"a", b"b", b"c"])
        start = time.monotonic()
        node.proc.send_signal(signal.SIGUSR2)
        assert node.proc.wait(60) == 0  # the drain timeout ends it (the channel has nobody)
        assert time.monotonic() - start >= 0.9  # not before the timeout
        assert "--drain-timeout reached" in node.log()
    finally:
        node.stop()
    node = node.restart()
    try:
        assert channel_stats(node, topic, "nobody")["depth"] == 3
        c = Wire(node.tcp_address)
        c.sub(topic, "nobody", rdy=10)
        assert sorted(m.body for m in fin_all(c, 1.0)) == [b"a", b"b", b"c"]
    finally:
        node.stop()


def test_drain_of_an_idle_node_exits_at_once(tmp_path):
    node = Nsqd(tmp_path / "d")
    try:
        http(node, "POST", f"/topic/create?topic={unique_name()}")  # no channel: not waited for
        assert http(node, "POST", "/drain")[0] == 200
        assert node.proc.wait(10) == 0
    finally:
        node.stop()
