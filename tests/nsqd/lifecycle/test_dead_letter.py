"""Max attempts and dead letters (issue #13) with real processes and real clients: pynsq REQs a
poison message, timeouts, per-channel settings, and kill -9 in ``--sync-every=1`` mode."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from helpers.servers import Nsqd, unique_name
from helpers.wire import Wire
from interop.support import assert_server_healthy, wait_until
from nsqd.lifecycle.lifecycle_util import (
    channel_stats, make_channel, fin_all, http, http_json, topic_stats, wait_for,
)

pytestmark = pytest.mark.timeout(90)


def _collect(addr: str, topic: str, channel: str, quiet: float = 1.0) -> list:
    """Everything the channel delivers (FINed) until it is quiet for ``quiet`` seconds."""
    w = Wire(addr)
    w.sub(topic, channel, rdy=1000)
    got = fin_all(w, quiet)
    w.close()
    return got


def test_pynsq_poison_message_lands_in_dead_letter_topic_only(nsqd_factory, tornado_run):
    pytest.importorskip("nsq")
    from interop.pynsq_support import Delivery, Reader, connected_writer, publish

    node = nsqd_factory("--max-attempts=3")
    topic = unique_name("poison")
    make_channel(node, topic, "audit")  # a bystander channel
    seen: list[Delivery] = []
    dead: list[Delivery] = []

    def handler(message):
        seen.append(Delivery(message))
        if message.body == b"poison":
            message.enable_async()
            message.requeue(delay=0, backoff=False)
            return None
        return True

    def dead_handler(message):
        dead.append(Delivery(message))
        return True

    async def main():
        writer = await connected_writer(node.tcp_address)
        # max_tries=0: the client never gives up by itself, so the server's limit decides
        reader = Reader(topic, "work", handler, nsqd_tcp_addresses=[node.tcp_address],
                        max_in_flight=5, max_tries=0)
        dead_reader = Reader(f"{topic}.dead", "ops", dead_handler,
                             nsqd_tcp_addresses=[node.tcp_address], max_in_flight=5)
        try:
            await wait_until(lambda: any(c.connected() for c in reader.conns.values()), 5, "SUB")
            assert await publish(writer, "pub", topic, b"poison") == b"OK"
            assert await publish(writer, "pub", topic, b"fine") == b"OK"
            await wait_until(lambda: len(dead) == 1, 10, "the dead letter")
            await asyncio.sleep(1.0)  # nothing more may arrive anywhere
            assert [d.body for d in dead] == [b"poison"] and dead[0].attempts == 1
            poison = [d for d in seen if d.body == b"poison"]
            assert [d.attempts for d in poison] == [1, 2, 3]
            assert [d.body for d in seen if d.body != b"poison"] == [b"fine"]
            assert reader.errors == [] and dead_reader.errors == []
        finally:
            reader.close()
            dead_reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 40)
    work = channel_stats(node, topic, "work")
    assert work["dead_letter_count"] == 1 and work["depth"] == 0
    assert work["in_flight_count"] == 0 and work["requeue_count"] == 3
    audit = channel_stats(node, topic, "audit")
    assert audit["depth"] == 2 and audit["dead_letter_count"] == 0  # untouched
    assert topic_stats(node, f"{topic}.dead")["message_count"] == 1
    assert_server_healthy(node)


def test_timeouts_count_and_channel_setting_overrides_flag(nsqd_factory):
    node = nsqd_factory("--msg-timeout=1s")  # no --max-attempts: unlimited by default
    topic = unique_name()
    make_channel(node, topic, "ch")
    status, doc = http_json(node, "POST", f"/channel/config?topic={topic}&channel=ch",
                            {"max_attempts": 2, "dead_letter_topic": "parking_%s"})
    assert status == 200
    Wire(node.tcp_address).pub(topic, b"slow")
    c = Wire(node.tcp_address)
    c.sub(topic, "ch", rdy=1)
    first = c.read_message()  # never answered: times out after 1s
    second = c.read_message()
    assert (first.attempts, second.attempts) == (1, 2) and first.id == second.id
    wait_for(lambda: channel_stats(node, topic, "ch")["dead_letter_count"] == 1, 5,
             "the second timeout to dead-letter the message")
    ch = channel_stats(node, topic, "ch")
    assert ch["timeout_count"] == 2 and ch["depth"] == 0 and ch["in_flight_count"] == 0
    got = _collect(node.tcp_address, f"parking_{topic}", "x")
    assert [m.body for m in got] == [b"slow"]
    c.close()
    # REQ with a delay at the limit goes to the dead-letter topic at once, not to deferred
    Wire(node.tcp_address).pub(topic, b"again")
    c = Wire(node.tcp_address)
    c.sub(topic, "ch", rdy=1)
    m = c.read_message()
    c.cmd(b"REQ", m.id, "0")
    m = c.read_message()
    assert m.attempts == 2
    c.cmd(b"REQ", m.id, "60000")
    wait_for(lambda: channel_stats(node, topic, "ch")["dead_letter_count"] == 2, 5, "dead letter")
    assert channel_stats(node, topic, "ch")["deferred_count"] == 0
    c.close()
    assert_server_healthy(node)


def test_unusable_dead_letter_name_requeues_as_upstream(nsqd_factory):
    """A dead-letter name over 64 characters cannot exist: messages keep being requeued."""
    node = nsqd_factory("--max-attempts=1", "--dead-letter-topic=%s" + "x" * 60)
    topic = unique_name()
    Wire(node.tcp_address).pub(topic, b"m")
    c = Wire(node.tcp_address)
    c.sub(topic, "ch", rdy=1)
    for attempt in (1, 2, 3):
        m = c.read_message()
        assert m.attempts == attempt
        c.cmd(b"REQ", m.id, "0")
    c.close()
    assert channel_stats(node, topic, "ch")["dead_letter_count"] == 0
    assert_server_healthy(node)


def test_kill9_while_dead_lettering_loses_only_what_was_in_flight(tmp_path):
    """``--mem-queue-size=0 --sync-every=1``: a message is in the channel's queue, in flight
    (held by the one consumer), or in the dead-letter topic. A kill -9 may lose only what was
    in flight at that moment (as upstream loses in-flight messages) and may duplicate a dead
    letter (at-least-once); after the crashes every message is in the dead-letter topic."""
    flags = ("--mem-queue-size=0", "--sync-every=1", "--max-attempts=3")
    node = Nsqd(tmp_path / "d", *flags)
    topic = unique_name()
    dead = f"{topic}.dead"
    n = 150
    bodies = [b"m%04d" % i for i in range(n)]
    rng = random.Random(1313)
    possibly_lost: set[bytes] = set()
    try:
        make_channel(node, topic, "ch")
        make_channel(node, dead, "dl")
        Wire(node.tcp_address).mpub(topic, bodies)
        for _round in range(4):
            c = Wire(node.tcp_address)
            c.sub(topic, "ch", rdy=1)
            stop = time.monotonic() + rng.uniform(0.2, 0.8)
            last = None
            try:
                while time.monotonic() < stop:
                    m = c.read_message()
                    last = m.body
                    c.cmd(b"REQ", m.id, "0")
            except OSError:
                pass
            if last is not None:
                possibly_lost.add(last)  # its REQ may not have been processed yet
            node.kill9()
            node = node.restart(*flags)
            c.close()
        # no more crashes: REQ everything until the channel is empty
        c = Wire(node.tcp_address)
        c.sub(topic, "ch", rdy=1)
        c.sock.settimeout(2.0)
        try:
            while True:
                m = c.read_message()
                c.cmd(b"REQ", m.id, "0")
        except OSError:
            pass
        c.close()
        ch = channel_stats(node, topic, "ch")
        assert ch["depth"] == 0 and ch["in_flight_count"] == 0 and ch["deferred_count"] == 0
        letters = [m.body for m in _collect(node.tcp_address, dead, "dl", quiet=2.0)]
        missing = set(bodies) - set(letters)
        assert missing <= possibly_lost, (missing, possibly_lost)
        assert set(letters) <= set(bodies)
        # a duplicate needs a crash between a read and its metadata write: at most one per kill
        assert len(letters) - len(set(letters)) <= 4
        assert len(set(letters)) >= n - 4
        assert not list(node.data_path.glob("*.bad"))
    finally:
        node.stop()
