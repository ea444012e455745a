"""Channels that start in the past: ordinary MSG frames with the original ids, timestamps and
bodies, attempts starting over, then live messages, each once."""

from __future__ import annotations

import time

import pytest

from helpers.polling import wait_for
from helpers.servers import unique_name
from helpers.wire import Wire

from .history_util import call, channel_stats, consume, nothing_more, read

pytestmark = pytest.mark.timeout(90)


def _publish(node, topic: str, n: int, prefix: bytes = b"m", batch: int = 100) -> None:
    w = Wire(node.tcp_address)
    for i in range(0, n, batch):
        w.mpub(topic, [prefix + b"%06d" % j for j in range(i, min(n, i + batch))])
    w.close()


@pytest.mark.parametrize("mem", ["10000", "0"])
def test_create_from_earliest_then_live_each_once(nsqd_factory, mem):
    node = nsqd_factory("--retention=1h", f"--mem-queue-size={mem}")
    topic = unique_name()
    _publish(node, topic, 3000)
    kept = read(node, topic)
    assert call(node, "POST", f"/channel/create?topic={topic}&channel=past&from=earliest")[0] == 200
    w = Wire(node.tcp_address, timeout=20)
    w.sub(topic, "past", 50)
    got = consume(node, topic, "past", 1500, wire=w)
    _publish(node, topic, 500, prefix=b"live")  # arrives while the replay is under way
    got += consume(node, topic, "past", 2000, wire=w)
    assert [(m.id, m.timestamp, m.body) for m in got[:3000]] == [
        (m.id, m.timestamp, m.body) for m in kept]
    assert all(m.attempts == 1 for m in got)
    assert [m.body for m in got[3000:]] == [b"live%06d" % i for i in range(500)]
    assert nothing_more(w)
    _publish(node, topic, 10, prefix=b"after")  # caught up: an ordinary live channel
    assert [m.body for m in consume(node, topic, "past", 10, wire=w)] == [b"after%06d" % i for i in range(10)]
    assert nothing_more(w)


@pytest.mark.parametrize("mem", ["10000", "0"])
def test_rewind_while_consumers_are_connected(nsqd_factory, mem):
    node = nsqd_factory("--retention=1h", f"--mem-queue-size={mem}")
    topic = unique_name()
    a, b = Wire(node.tcp_address, timeout=20), Wire(node.tcp_address, timeout=20)
    a.sub(topic, "c", 20)
    b.sub(topic, "c", 20)
    _publish(node, topic, 400, prefix=b"old")
    time.sleep(0.01)
    cut = time.time_ns()
    time.sleep(0.01)
    _publish(node, topic, 600, prefix=b"new")
    first = _drain_two(a, b, 1000)
    assert sorted(m.body for m in first) == sorted([b"old%06d" % i for i in range(400)] +
                                                   [b"new%06d" % i for i in range(600)])
    assert call(node, "POST", f"/channel/rewind?topic={topic}&channel=c&to={cut // 1_000_000}")[0] == 200
    again = _drain_two(a, b, 600)
    assert sorted(m.body for m in again) == [b"new%06d" % i for i in range(600)]
    by_body = {m.body: m for m in first}
    for m in again:
        assert (m.id, m.timestamp) == (by_body[m.body].id, by_body[m.body].timestamp)
        assert m.attempts == 1
    assert nothing_more(a, 0.3) and nothing_more(b, 0.3)
    wait_for(lambda: channel_stats(node, topic, "c")["depth"] == 0, what="empty channel")


def _drain_two(a: Wire, b: Wire, n: int) -> list:
    """n messages from two consumers of one channel (FINished as they come)."""
    import select

    got = []
    while len(got) < n:
        ready, _, _ = select.select([a.sock, b.sock], [], [], 20)
        assert ready, f"only {len(got)} of {n} messages"
        for w in (a, b):
            if w.sock in ready or w.pending:
                w.sock.settimeout(0.05)
                try:
                    while len(got) < n:
                        m = w.read_message()
                        got.append(m)
                        w.cmd(b"FIN", m.id)
                        if not w.pending:
                            break
                except OSError:
                    pass
                finally:
                    w.sock.settimeout(20)
    return got


def test_a_requeued_replayed_message_comes_again_and_dpub_keeps_its_delay(nsqd_factory):
    node = nsqd_factory("--retention=1h")
    topic = unique_name()
    w = Wire(node.tcp_address)
    w.pub(topic, b"one")
    w.cmd(b"DPUB", topic, "1500", body=b"later")
    w.expect_ok()
    published = time.monotonic()
    assert call(node, "POST", f"/channel/create?topic={topic}&channel=c&from=earliest")[0] == 200
    c = Wire(node.tcp_address, timeout=10)
    c.sub(topic, "c", 5)
    m = c.read_message()
    assert m.body == b"one" and m.attempts == 1
    c.cmd(b"REQ", m.id, "0")
    m2 = c.read_message()
    assert (m2.id, m2.body, m2.attempts) == (m.id, b"one", 2)
    c.cmd(b"FIN", m2.id)
    later = c.read_message()
    assert later.body == b"later" and time.monotonic() - published >= 1.3


def test_pynsq_reads_a_rewound_channel(nsqd_factory, tornado_run):
    import asyncio

    import nsq

    node = nsqd_factory("--retention=1h")
    topic = unique_name()
    _publish(node, topic, 200)
    first: list[bytes] = []
    again: list[bytes] = []
    target = first

    def handler(message):
        target.append(message.body)
        return True

    async def main():
        nonlocal target
        reader = nsq.Reader(topic=topic, channel="c", message_handler=handler, max_in_flight=20,
                            nsqd_tcp_addresses=[node.tcp_address])
        # the channel exists once pynsq subscribed: rewind it to the beginning
        while not first:
            await asyncio.sleep(0.05)
        while len(first) < 200:
            await asyncio.sleep(0.05)
        target = again
        status, _ = await asyncio.get_running_loop().run_in_executor(
            None, call, node, "POST", f"/channel/rewind?topic={topic}&channel=c&to=earliest")
        assert status == 200
        while len(again) < 200:
            await asyncio.sleep(0.05)
        reader.close()

    # the channel is made by SUB: messages published before it wait at the topic
    tornado_run(main, 40)
    assert sorted(first) == sorted(again) == [b"m%06d" % i for i in range(200)]


@pytest.mark.parametrize("stop", ["clean", "kill9"])
def test_a_replay_under_way_goes_on_after_a_restart(nsqd_factory, stop):
    node = nsqd_factory("--retention=1h")
    topic = unique_name()
    assert call(node, "POST", f"/topic/create?topic={topic}")[0] == 200
    assert call(node, "POST", f"/channel/create?topic={topic}&channel=c")[0] == 200
    _publish(node, topic, 3000, prefix=b"old")
    assert len(consume(node, topic, "c", 3000)) == 3000
    assert call(node, "POST", f"/channel/rewind?topic={topic}&channel=c&to=earliest")[0] == 200
    w = Wire(node.tcp_address, timeout=20)
    w.sub(topic, "c", 5)
    first = consume(node, topic, "c", 300, wire=w)
    w.close()
    _publish(node, topic, 100, prefix=b"live")  # behind the replay, not queued on the channel
    time.sleep(0.6)  # a tick saved the replay's position
    if stop == "kill9":
        node.kill9()
    node = node.restart("--retention=1h")
    w = Wire(node.tcp_address, timeout=20)
    w.sub(topic, "c", 100)
    want = {b"old%06d" % i for i in range(300, 3000)} | {b"live%06d" % i for i in range(100)}
    got = []
    while not want <= {m.body for m in got}:
        got += consume(node, topic, "c", 1, wire=w)
    assert len(got) - len(want) <= 5000  # at most the chunk it was in comes again
    assert {m.body for m in first} <= {b"old%06d" % i for i in range(3000)}
    # caught up: the channel is live again and nothing is left to resume
    wait_for(lambda: not (node.data_path / f"{topic}.history" / "replays.json").exists(),
             what="replays.json removed")
