"""Failover with real processes: the origin is killed -9, its peer adopts what was unfinished, and
a stock consumer that finds producers through nsqlookupd receives every acknowledged message."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import time
import urllib.error
import urllib.request

import orjson
import pytest

from helpers.replication import get_json, linked, post, replica, wait_for
from helpers.servers import Nsqlookupd, unique_name
from helpers.wire import Wire
from nsqpy.client import Consumer


pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def lookupd(tmp_path):
    node = Nsqlookupd(tmp_path / "lookupd")
    yield node
    node.stop()


def publish_and_consume_some(a, b, topic: str) -> set[bytes]:
    """200 acknowledged messages; 50 FINished on the origin, 10 left in flight there."""
    assert post(a, f"/channel/create?topic={topic}&channel=c") == 200
    w = Wire(a.tcp_address)
    bodies = [b"m%03d" % i for i in range(200)]
    for i in range(0, 200, 20):
        w.mpub(topic, bodies[i:i + 20])
    c = Wire(a.tcp_address)
    c.sub(topic, "c", rdy=60)
    finished = set()
    for i in range(60):
        m = c.read_message()
        if i < 50:
            c.cmd(b"FIN", m.id)
            finished.add(m.body)
    wait_for(lambda: replica(b, topic).get("messages") == 150, what="FINs on the replica")
    return set(bodies) - finished


def wait_metadata_lists(node, topic: str, channel: str) -> None:
    """nsqd writes nsqd.dat after a topic or channel is created, asynchronously as upstream's
    Notify does; a kill -9 before the write leaves the topic out of it, and its disk queue then
    belongs to nothing after the restart (seen under load: an unrenamed nsqd.dat.*.tmp)."""
    def listed() -> bool:
        try:
            doc = orjson.loads((node.data_path / "nsqd.dat").read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return False
        return any(t["name"] == topic and any(c["name"] == channel for c in t["channels"] or ())
                   for t in doc["topics"] or ())  # Go writes an empty list as null
    wait_for(listed, timeout=30, what=f"nsqd.dat listing {topic}/{channel}")


def start_pair(nsqd_factory, lookupd, *origin_flags: str):
    """Peer b (failover after 2 s) and origin a replicating to it, both registered with lookupd."""
    lk = f"--lookupd-tcp-address={lookupd.tcp_address}"
    b = nsqd_factory("--accept-replicas", "--replication-failover-timeout=2s", lk)
    a = nsqd_factory(f"--replicate-to={b.tcp_address}", *origin_flags, lk)
    wait_for(lambda: linked(a), what="link up")
    return a, b, lk


def wait_adopted(node, topic: str) -> None:
    wait_for(lambda: any(t["topic_name"] == topic
                         for t in get_json(node, "/stats?format=json")["topics"]),
             timeout=60, what="adoption")


async def consume_all(lookupd, topic: str, expected: set[bytes], timeout: float) -> list[bytes]:
    got: list[bytes] = []

    async def handler(msg):
        got.append(msg.body)

    async with Consumer(topic, "c", handler, lookupd_http_addresses=[lookupd.http_address],
                        lookupd_poll_interval=0.5, lookupd_poll_jitter=0.1, max_in_flight=50,
                        reconnect_interval=0.2):
        deadline = asyncio.get_running_loop().time() + timeout
        while not expected <= set(got):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.1)
    return got


def test_kill9_origin_peer_adopts_after_timeout(nsqd_factory, lookupd):
    a, b, _ = start_pair(nsqd_factory, lookupd, "--sync-every=1")
    topic = unique_name()
    owed = publish_and_consume_some(a, b, topic)
    a.kill9()
    wait_adopted(b, topic)
    stats = get_json(b, f"/stats?format=json&topic={topic}")
    [t] = stats["topics"]
    assert [c["channel_name"] for c in t["channels"]] == ["c"]
    assert t["channels"][0]["depth"] == 150
    assert stats["replicas"] == []
    got = asyncio.run(consume_all(lookupd, topic, owed, 60))
    assert owed <= set(got), f"lost {len(owed - set(got))}"
    assert len(got) == len(set(got))  # nothing adopted twice


def test_operator_adopts_at_once(nsqd_factory, lookupd):
    lk = f"--lookupd-tcp-address={lookupd.tcp_address}"
    b = nsqd_factory("--accept-replicas", "--replication-failover-timeout=600s", lk)
    a = nsqd_factory(f"--replicate-to={b.tcp_address}", lk)
    wait_for(lambda: linked(a), what="link up")
    topic = unique_name()
    owed = publish_and_consume_some(a, b, topic)
    origin = replica(b)["origin"]
    adopt = f"http://{b.http_address}/replication/adopt?origin={origin}"
    with pytest.raises(urllib.error.HTTPError) as err:  # the origin is alive and linked
        urllib.request.urlopen(urllib.request.Request(adopt, method="POST"), timeout=5)
    assert err.value.code == 409
    a.kill9()
    wait_for(lambda: replica(b)["link"] == "down", what="link down")
    with urllib.request.urlopen(urllib.request.Request(adopt, method="POST"), timeout=10) as r:
        assert r.status == 200 and b'"adopted":150' in r.read()
    got = asyncio.run(consume_all(lookupd, topic, owed, 60))
    assert owed <= set(got)


@pytest.mark.parametrize("mem", ["10000", "0"], ids=["memory", "disk"])
def test_peer_loses_its_data_and_the_origin_re_replicates(nsqd_factory, lookupd, mem):
    a, b, lk = start_pair(nsqd_factory, lookupd, f"--mem-queue-size={mem}",
                          "--replication-degraded=accept")
    topic = unique_name()
    owed = publish_and_consume_some(a, b, topic)
    b.kill9()
    shutil.rmtree(b.data_path)
    w = Wire(a.tcp_address)
    more = [b"late%02d" % i for i in range(20)]
    w.mpub(topic, more)  # degraded (accept): answered at once, held once
    owed |= set(more)
    b2 = b.restart("--accept-replicas", "--replication-failover-timeout=2s", lk)
    try:
        wait_for(lambda: linked(a), timeout=60, what="relink")
        # everything the origin still holds (queued and in flight) is on the new peer again
        wait_for(lambda: replica(b2, topic).get("messages") == 170, what="re-replicated")
        a.kill9()
        wait_adopted(b2, topic)
        got = asyncio.run(consume_all(lookupd, topic, owed, 60))
        assert owed <= set(got), f"lost {len(owed - set(got))}"
    finally:
        b2.stop()


def test_origin_returning_after_failover_skips_what_the_peer_adopted(nsqd_factory, lookupd):
    a, b, lk = start_pair(nsqd_factory, lookupd, "--mem-queue-size=100")
    topic = unique_name()
    # 150 owed: 40 in memory and 10 in flight (gone with the kill -9), 100 on disk (kept)
    owed = publish_and_consume_some(a, b, topic)
    wait_metadata_lists(a, topic, "c")  # else the restarted origin holds none of the 100
    a.kill9()
    wait_adopted(b, topic)
    # the origin comes back with its data directory: its disk queue still holds 100
    a2 = a.restart(f"--replicate-to={b.tcp_address}", "--mem-queue-size=100", lk)
    try:
        wait_for(lambda: linked(a2), timeout=60, what="relink")
        rep = get_json(a2, "/stats?format=json")["replication"]
        # not handed out a second time (> 100 when the topic's own disk queue, whose read position
        # was not synced before the kill, hands the pumped ones out again after the restart)
        assert rep["skipped_adopted"] >= 100
        [t] = get_json(a2, f"/stats?format=json&topic={topic}")["topics"]
        assert t["channels"][0]["depth"] == 0
        got = asyncio.run(consume_all(lookupd, topic, owed, 60))
        assert owed <= set(got)
        assert len(got) == len(set(got)), "duplicates"
    finally:
        a2.stop()


def test_origin_restarted_before_the_timeout_gets_its_lost_messages_delivered(nsqd_factory,
                                                                                lookupd):
    """kill -9 loses the origin's memory queues; it is back before any failover, and what only
    the peer still holds is delivered by the peer."""
    lk = f"--lookupd-tcp-address={lookupd.tcp_address}"
    b = nsqd_factory("--accept-replicas", "--replication-failover-timeout=600s", lk)
    a = nsqd_factory(f"--replicate-to={b.tcp_address}", lk)
    wait_for(lambda: linked(a), what="link up")
    topic = unique_name()
    owed = publish_and_consume_some(a, b, topic)  # all 150 were in memory on a
    a.kill9()
    a2 = a.restart(f"--replicate-to={b.tcp_address}", lk)
    try:
        wait_for(lambda: linked(a2), timeout=60, what="relink")
        wait_adopted(b, topic)
        got = asyncio.run(consume_all(lookupd, topic, owed, 60))
        assert owed <= set(got), f"lost {len(owed - set(got))}"
        assert len(got) == len(set(got))
    finally:
        a2.stop()


def test_both_killed_the_peer_restarts_from_its_replica_log(nsqd_factory, lookupd):
    """Origin and peer both killed -9 (disks kept): the peer replays its replica log at start and,
    the origin staying away, delivers what it held (docs/replication.md §6: with a healthy sync
    link nothing acknowledged is lost as long as the peer's disk survives)."""
    a, b, lk = start_pair(nsqd_factory, lookupd)
    topic = unique_name()
    owed = publish_and_consume_some(a, b, topic)
    a.kill9()
    b.kill9()
    b2 = b.restart("--accept-replicas", "--replication-failover-timeout=2s", lk)
    try:
        rep = replica(b2)
        assert rep["link"] == "down" and rep["messages"] == 150  # replayed from disk
        wait_adopted(b2, topic)
        got = asyncio.run(consume_all(lookupd, topic, owed, 60))
        assert owed <= set(got), f"lost {len(owed - set(got))}"
    finally:
        b2.stop()


def test_peer_killed_with_unacked_batches_adopts_each_message_once(nsqd_factory, lookupd):
    """The peer killed -9 while batches were unacked (frozen first, so that some are), then
    restarted on its data: the origin resends those batches and re-ships everything it holds in
    the same batch, so the peer stores the unacked messages twice in one log entry. After the
    origin dies nothing had been consumed, so each is adopted, and delivered, once
    (docs/replication.md §6)."""
    lk = f"--lookupd-tcp-address={lookupd.tcp_address}"
    peer_flags = ("--accept-replicas", "--sync-every=1", "--replication-failover-timeout=2s", lk)
    b = nsqd_factory(*peer_flags)
    a = nsqd_factory(f"--replicate-to={b.tcp_address}", "--replication-sync-timeout=60s", lk)
    wait_for(lambda: linked(a), what="link up")
    topic = unique_name()
    assert post(a, f"/channel/create?topic={topic}&channel=c") == 200
    owed = {b"acked%02d" % i for i in range(20)}
    Wire(a.tcp_address).mpub(topic, sorted(owed))
    os.kill(b.pid, signal.SIGSTOP)  # a's next batches reach b's socket, never its log
    unacked = [b"unacked%02d" % i for i in range(30)]
    w = Wire(a.tcp_address, timeout=30)
    for body in unacked:  # pipelined: each OK waits for the peer's copy
        w.cmd(b"PUB", topic, body=body)
    wait_for(lambda: get_json(a, "/stats?format=json")["replication"]["unacked_batches"] > 0,
             what="batches shipped to the frozen peer")
    b.kill9()
    b2 = b.restart(*peer_flags)
    for _ in unacked:
        w.expect_ok()  # stored by b2: resent with the re-ship after the relink
    owed |= set(unacked)
    a.kill9()
    wait_adopted(b2, topic)
    [t] = get_json(b2, f"/stats?format=json&topic={topic}")["topics"]
    assert t["channels"][0]["depth"] == len(owed)
    got = asyncio.run(consume_all(lookupd, topic, owed, 30))
    assert owed <= set(got), f"lost {len(owed - set(got))}"
    assert len(got) == len(set(got)), "adopted twice"


def test_adopted_messages_are_replicated_onward_in_a_chain(nsqd_factory, lookupd):
    """a -> b -> c: a dies and b adopts; b ships what it adopted to c like its own, so when b
    dies too (data directory gone) before anyone consumed, c delivers every acknowledged one."""
    lk = f"--lookupd-tcp-address={lookupd.tcp_address}"
    c = nsqd_factory("--accept-replicas", "--replication-failover-timeout=2s", lk)
    b = nsqd_factory(f"--replicate-to={c.tcp_address}", "--replication-failover-timeout=2s", lk)
    a = nsqd_factory(f"--replicate-to={b.tcp_address}", lk)
    wait_for(lambda: linked(a) and linked(b), what="links up")
    topic = unique_name()
    owed = publish_and_consume_some(a, b, topic)
    a.kill9()
    wait_adopted(b, topic)
    wait_for(lambda: replica(c, topic).get("messages") == len(owed), timeout=60,
             what="b's adopted messages on c")
    b.kill9()
    shutil.rmtree(b.data_path)
    wait_adopted(c, topic)
    got = asyncio.run(consume_all(lookupd, topic, owed, 60))
    assert owed <= set(got), f"lost {len(owed - set(got))}"


def _returning_origin(nsqd_factory, lookupd, timeout: str):
    """a was adopted by b after a kill -9 and comes back with its 100 disk-queued messages
    (all adopted by b) while b is frozen (SIGSTOP: the link connects, RSUB gets no answer);
    a consumer is subscribed to a at once. Returns (a2, b, consumer)."""
    a, b, lk = start_pair(nsqd_factory, lookupd, "--mem-queue-size=100")
    topic = unique_name()
    publish_and_consume_some(a, b, topic)
    wait_metadata_lists(a, topic, "c")
    a.kill9()
    wait_adopted(b, topic)
    os.kill(b.pid, signal.SIGSTOP)
    a2 = a.restart(f"--replicate-to={b.tcp_address}", "--mem-queue-size=100",
                   f"--replication-failover-timeout={timeout}", lk)
    try:
        consumer = Wire(a2.tcp_address, timeout=2.0)
        consumer.sub(topic, "c", rdy=200)
    except BaseException:
        os.kill(b.pid, signal.SIGCONT)
        a2.stop()
        raise
    return a2, b, consumer


def test_returning_origin_delivers_nothing_until_reconciled(nsqd_factory, lookupd):
    a2, b, consumer = _returning_origin(nsqd_factory, lookupd, "60s")
    try:
        try:
            with pytest.raises(socket.timeout):  # held: its disk queue is not handed out yet
                consumer.read_message()
        finally:
            os.kill(b.pid, signal.SIGCONT)
        wait_for(lambda: linked(a2), timeout=60, what="relink")
        assert get_json(a2, "/stats?format=json")["replication"]["skipped_adopted"] >= 100
        with pytest.raises(socket.timeout):  # reconciled: b delivers all of them, a2 none
            consumer.read_message()
    finally:
        a2.stop()


def test_returning_origin_delivers_after_the_timeout_when_the_peer_stays_away(nsqd_factory,
                                                                               lookupd):
    a2, b, consumer = _returning_origin(nsqd_factory, lookupd, "3s")
    started = time.monotonic()
    try:
        consumer.sock.settimeout(60)  # the event is due at 3 s; a busy machine may be late
        consumer.read_message()  # availability wins after --replication-failover-timeout
        assert time.monotonic() - started >= 1.5
        assert "delivering without reconciling" in a2.log()
    finally:
        os.kill(b.pid, signal.SIGCONT)
        a2.stop()
