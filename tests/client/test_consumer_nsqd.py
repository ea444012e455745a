"""Consumer against real nsqd processes: RDY budget as nsqd sees it, backoff, attempts,
reconnection, compression, manual answers, graceful close, and the low-level thread API."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from nsqpy.client import Consumer, Message, NSQConnection, Producer

from client.client_util import channel_stats, frozen_ready_counts, ready_counts, stats, unique, wait_for

pytestmark = pytest.mark.timeout(90)


async def fill(addr: str, topic: str, n: int, size: int = 20) -> None:
    async with Producer(addr) as p:
        batch = [b"%0*d" % (size, i) for i in range(n)]
        for i in range(0, n, 500):
            await p.mpub(topic, batch[i : i + 500])


async def test_rdy_spread_over_many_connections_never_exceeds_max_in_flight(servers):
    nodes = [servers.nsqd() for _ in range(3)]
    topic = unique()
    for node in nodes:
        await fill(node.tcp_address, topic, 600)
    seen = 0
    done = asyncio.Event()
    high_water = 0

    async def handler(msg: Message) -> None:
        nonlocal seen
        await asyncio.sleep(0.002)
        seen += 1
        if seen == 1800:
            done.set()

    http = [n.http_address for n in nodes]
    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[n.tcp_address for n in nodes], max_in_flight=10
    ) as c:
        assert len(c.connections) == 3
        while not done.is_set():
            counts = frozen_ready_counts(http, topic, "ch")
            high_water = max(high_water, sum(counts))
            assert sum(counts) <= 10, counts
            assert c.total_rdy() <= 10
            await asyncio.sleep(0.01)
        counts = await ready_counts(http, topic, "ch")
        assert sorted(counts) == [3, 3, 3]  # 10 // 3 each
    assert high_water == 9


async def test_more_connections_than_max_in_flight_rotates_rdy(servers):
    nodes = [servers.nsqd() for _ in range(3)]
    topic = unique()
    for node in nodes:
        await fill(node.tcp_address, topic, 20)
    got: list[str] = []
    done = asyncio.Event()

    def handler(msg: Message) -> None:
        got.append(msg.conn.address)
        if len(got) == 60:
            done.set()

    http = [n.http_address for n in nodes]
    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[n.tcp_address for n in nodes], max_in_flight=2,
        rdy_redistribute_interval=0.05, low_rdy_idle_timeout=0.1, low_rdy_timeout=0.2,
    ) as c:
        while not done.is_set():
            assert sum(frozen_ready_counts(http, topic, "ch")) <= 2
            assert c.total_rdy() <= 2
            await asyncio.sleep(0.01)
    assert len(set(got)) == 3  # every nsqd got its turn


async def test_backoff_entered_and_left(servers):
    node = servers.nsqd()
    topic = unique()
    await fill(node.tcp_address, topic, 30)
    failures = 3
    calls = 0
    levels: list[int] = []
    done = asyncio.Event()
    server_rdy_in_backoff: list[int] = []

    async def handler(msg: Message) -> None:
        nonlocal calls, failures
        calls += 1
        if failures > 0:
            failures -= 1
            raise RuntimeError("dependency down")
        if calls >= 33:
            done.set()

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], max_in_flight=5,
        backoff_multiplier=0.05, default_requeue_delay=0.0,
    ) as c:
        await wait_for(lambda: c.in_backoff)
        server_rdy_in_backoff = await ready_counts([node.http_address], topic, "ch")
        while not done.is_set():
            levels.append(c.backoff_level)
            await asyncio.sleep(0.005)
        await wait_for(lambda: not c.in_backoff)
        assert c.total_rdy() == 5
        assert await ready_counts([node.http_address], topic, "ch") == [5]
    assert max(levels) >= 1
    assert server_rdy_in_backoff[0] in (0, 1)  # RDY 0, or the RDY 1 probe


async def test_max_attempts_gives_up_and_finishes(servers):
    node = servers.nsqd()
    topic = unique()
    async with Producer(node.tcp_address) as p:
        await p.pub(topic, b"poison")
    given_up: list[Message] = []
    attempts: list[int] = []

    async def handler(msg: Message) -> None:
        attempts.append(msg.attempts)
        raise ValueError("always fails")

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], max_in_flight=1,
        max_attempts=3, on_giving_up=given_up.append, default_requeue_delay=0.0,
        backoff_multiplier=0.01,
    ):
        await wait_for(lambda: given_up, timeout=20)
        await asyncio.sleep(0.2)
    assert attempts == [1, 2, 3]
    assert [m.attempts for m in given_up] == [4]
    ch = channel_stats(await stats(node.http_address, topic), topic, "ch")
    assert ch["depth"] == 0 and ch["in_flight_count"] == 0 and ch["deferred_count"] == 0


async def test_requeue_delay_grows_with_attempts(servers):
    node = servers.nsqd()
    topic = unique()
    async with Producer(node.tcp_address) as p:
        await p.pub(topic, b"x")
    times: list[float] = []

    def handler(msg: Message) -> None:
        times.append(time.monotonic())
        if msg.attempts < 3:
            raise RuntimeError("again")

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address],
        default_requeue_delay=0.15, max_requeue_delay=0.25, max_backoff_duration=0,
    ):
        await wait_for(lambda: len(times) == 3, timeout=30)
    assert times[1] - times[0] >= 0.13  # 0.15 × 1
    assert times[2] - times[1] >= 0.23  # 0.15 × 2 = 0.30, capped at 0.25


async def test_consumer_reconnects_after_nsqd_restart(servers):
    node = servers.nsqd()
    topic = unique()
    got: list[bytes] = []

    async def handler(msg: Message) -> None:
        got.append(msg.body)

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], max_in_flight=10,
        reconnect_interval=0.05, max_reconnect_interval=0.2,
    ) as c:
        await fill(node.tcp_address, topic, 5)
        await wait_for(lambda: len(got) == 5)
        # restart only once nsqd has the FINs: messages still in flight at shutdown are kept
        # and delivered again (at-least-once), and got would pass 10
        await wait_for(lambda: _nothing_in_flight(node.http_address, topic), timeout=30)
        node = servers.restart(node)
        await wait_for(lambda: len(c.connections) == 1 and c.total_rdy() == 10, timeout=15)
        await fill(node.tcp_address, topic, 5)
        await wait_for(lambda: len(got) == 10)


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
async def test_compressed_consumer_answers_work(servers, codec):
    node = servers.nsqd()
    topic = unique()
    await fill(node.tcp_address, topic, 500, size=300)
    got = 0
    requeued: set[bytes] = set()

    async def handler(msg: Message) -> None:
        nonlocal got
        if msg.attempts == 1 and len(requeued) < 50:
            requeued.add(msg.id)
            msg.requeue(0, backoff=False)
            return
        msg.touch()
        got += 1

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], max_in_flight=100,
        **{codec: True},
    ) as c:
        conn = next(iter(c.connections.values()))
        assert conn.identify_response[codec] is True
        await wait_for(lambda: got == 500)
    ch = channel_stats(await stats(node.http_address, topic), topic, "ch")
    assert ch["requeue_count"] == 50
    assert ch["depth"] == 0 and ch["in_flight_count"] == 0
    client_list = ch.get("clients") or []
    assert client_list == []  # closed


async def test_manual_ack_mode(servers):
    node = servers.nsqd()
    topic = unique()
    await fill(node.tcp_address, topic, 10)
    held: list[Message] = []

    async def handler(msg: Message) -> None:
        held.append(msg)  # answered later, elsewhere

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], max_in_flight=10,
        auto_finish=False,
    ):
        await wait_for(lambda: len(held) == 10)
        ch = channel_stats(await stats(node.http_address, topic), topic, "ch")
        assert ch["in_flight_count"] == 10
        for m in held:
            m.touch()
            m.finish()
            m.finish()  # a second answer is ignored
        await wait_for(lambda: _nothing_in_flight(node.http_address, topic), timeout=30)


async def _nothing_in_flight(http: str, topic: str) -> bool:
    ch = channel_stats(await stats(http, topic), topic, "ch")
    return ch is not None and ch["in_flight_count"] == 0


async def test_close_drains_in_flight_messages(servers):
    node = servers.nsqd()
    topic = unique()
    await fill(node.tcp_address, topic, 20)
    started = asyncio.Event()
    finished: list[bytes] = []

    async def handler(msg: Message) -> None:
        started.set()
        await asyncio.sleep(0.3)
        finished.append(msg.body)

    c = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], max_in_flight=5)
    await c.start()
    await started.wait()
    await c.close()
    n = len(finished)
    assert n >= 5
    ch = channel_stats(await stats(node.http_address, topic), topic, "ch")
    assert ch["in_flight_count"] == 0  # all answered before the connection closed
    assert ch["depth"] == 20 - n
    assert ch["timeout_count"] == 0 and ch["requeue_count"] == 0


async def test_low_level_connection_answered_from_another_thread(servers):
    node = servers.nsqd()
    topic = unique()
    await fill(node.tcp_address, topic, 50)
    import queue

    inbox: queue.Queue = queue.Queue()
    conn = NSQConnection("127.0.0.1", node.tcp_port, on_message=inbox.put)
    await conn.connect()
    await conn.subscribe(topic, "spark")

    def worker() -> None:  # e.g. a Spark task: no event loop in this thread
        conn.ready_threadsafe(50)
        for _ in range(50):
            msg = inbox.get(timeout=10)
            msg.touch_threadsafe()
            msg.finish_threadsafe()

    t = threading.Thread(target=worker)
    t.start()
    await asyncio.to_thread(t.join, 20)
    await wait_for(lambda: conn.in_flight == 0)
    await conn.start_close()
    conn.close()
    await conn.wait_closed()
    ch = channel_stats(await stats(node.http_address, topic), topic, "spark")
    assert ch["depth"] == 0 and ch["in_flight_count"] == 0 and ch["message_count"] == 50


async def test_consumer_identify_options(servers):
    node = servers.nsqd()
    topic = unique()

    async def handler(msg: Message) -> None:
        pass

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], msg_timeout=7.0,
        client_id="worker-7", hostname="box.example", heartbeat_interval=2.0,
        output_buffer_timeout=0.05, output_buffer_size=4096,
    ) as c:
        conn = next(iter(c.connections.values()))
        assert conn.identify_response["msg_timeout"] == 7000
        ch = channel_stats(await stats(node.http_address, topic), topic, "ch")
        client = ch["clients"][0]
        assert client["client_id"] == "worker-7"
        assert client["hostname"] == "box.example"
        assert client["user_agent"].startswith("nsqpy/")


async def test_heartbeats_are_answered(servers):
    """nsqd drops a client silent for two heartbeat periods; an idle consumer must survive."""
    node = servers.nsqd()
    topic = unique()

    async def handler(msg: Message) -> None:
        pass

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], heartbeat_interval=1.0
    ) as c:
        conn = next(iter(c.connections.values()))
        await asyncio.sleep(3.5)
        assert not conn.is_closed
        assert list(c.connections.values()) == [conn]


async def test_set_max_in_flight_live_and_pause(servers):
    nodes = [servers.nsqd(), servers.nsqd()]
    topic = unique()

    def handler(msg: Message) -> None:
        pass

    http = [n.http_address for n in nodes]
    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[n.tcp_address for n in nodes], max_in_flight=100
    ) as c:
        await wait_for(lambda: _counts_are(http, topic, [50, 50]))
        c.set_max_in_flight(10)
        await wait_for(lambda: _counts_are(http, topic, [5, 5]))
        c.set_max_in_flight(0)  # pause
        await wait_for(lambda: _counts_are(http, topic, [0, 0]))
        c.set_max_in_flight(7)
        await wait_for(lambda: _counts_are(http, topic, [3, 3]))


async def _counts_are(http: list[str], topic: str, expected: list[int]) -> bool:
    return sorted(await ready_counts(http, topic, "ch")) == expected


async def test_sync_handler_exception_requeues(servers):
    node = servers.nsqd()
    topic = unique()
    async with Producer(node.tcp_address) as p:
        await p.pub(topic, b"x")
    seen: list[int] = []

    def handler(msg: Message) -> None:
        seen.append(msg.attempts)
        if msg.attempts == 1:
            raise RuntimeError("first time fails")

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address],
        default_requeue_delay=0.0, backoff_multiplier=0.01,
    ):
        await wait_for(lambda: seen == [1, 2])


async def test_close_without_start_and_twice():
    c = Consumer("t", "c", lambda m: None, nsqd_tcp_addresses=["127.0.0.1:1"])
    await c.close()
    await c.close()
    with pytest.raises(ValueError):
        Consumer("bad topic", "c", lambda m: None, nsqd_tcp_addresses=["127.0.0.1:1"])
    with pytest.raises(ValueError):
        Consumer("t", "c", lambda m: None)  # nowhere to connect


async def test_rdy_capped_by_nsqd_max_rdy_count(servers):
    node = servers.nsqd("--max-rdy-count=40")
    topic = unique()

    def handler(msg: Message) -> None:
        pass

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], max_in_flight=1000
    ) as c:
        conn = next(iter(c.connections.values()))
        assert conn.max_rdy_count == 40
        await wait_for(lambda: _counts_are([node.http_address], topic, [40]))
        assert c.total_rdy() == 40


async def test_add_and_remove_nsqd_at_run_time(servers):
    a, b = servers.nsqd(), servers.nsqd()
    topic = unique()

    def handler(msg: Message) -> None:
        pass

    http = [a.http_address, b.http_address]
    async with Consumer(topic, "ch", handler, nsqd_tcp_addresses=[a.tcp_address], max_in_flight=8) as c:
        await wait_for(lambda: _counts_are(http, topic, [8]))
        await c.connect_to_nsqd(b.tcp_address)
        assert set(c.connections) == {a.tcp_address, b.tcp_address}
        await wait_for(lambda: _counts_are(http, topic, [4, 4]))
        c.disconnect_from_nsqd(a.tcp_address)
        await wait_for(lambda: _counts_are(http, topic, [8]))
        assert set(c.connections) == {b.tcp_address}


async def test_pause_during_backoff_does_not_stall(servers):
    node = servers.nsqd()
    topic = unique()
    async with Producer(node.tcp_address) as p:
        await p.mpub(topic, [b"fail", b"ok1", b"ok2"])
    got: list[bytes] = []

    def handler(msg: Message) -> None:
        if msg.body == b"fail" and msg.attempts == 1:
            raise RuntimeError("x")
        got.append(msg.body)

    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], max_in_flight=1,
        backoff_multiplier=0.1, default_requeue_delay=0.0,
    ) as c:
        await wait_for(lambda: c.in_backoff)
        c.set_max_in_flight(0)  # paused while the backoff timer runs
        await asyncio.sleep(0.6)
        assert c.total_rdy() == 0
        c.set_max_in_flight(1)
        await wait_for(lambda: sorted(got) == [b"fail", b"ok1", b"ok2"], timeout=15)
        await wait_for(lambda: not c.in_backoff)
