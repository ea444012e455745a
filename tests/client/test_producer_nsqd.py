"""Producer and blocking publishers against real nsqd processes."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from nsqpy.client import (
    ConnectionClosedError,
    Consumer,
    NotConnectedError,
    NSQConnection,
    NSQErrorResponse,
    Producer,
    SyncPublisher,
    publish,
)

from client.client_util import unique, wait_for

pytestmark = pytest.mark.timeout(60)


async def collect(addr: str, topic: str, n: int, timeout: float = 10.0, **kw) -> list:
    got: list = []
    done = asyncio.Event()

    async def handler(msg):
        got.append(msg)
        if len(got) >= n:
            done.set()

    async with Consumer(topic, "c", handler, nsqd_tcp_addresses=[addr], max_in_flight=200, **kw):
        await asyncio.wait_for(done.wait(), timeout)
        await asyncio.sleep(0.05)
    return got


async def test_pub_mpub_dpub_round_trip(servers):
    node = servers.nsqd()
    topic = unique()
    async with Producer(node.tcp_address) as p:
        await p.pub(topic, b"one")
        await p.pub(topic, "two")  # str bodies are sent as UTF-8
        await p.mpub(topic, [b"three", b"four", bytearray(b"five")])
        start = time.monotonic()
        await p.dpub(topic, 0.5, b"deferred")
    got = await collect(node.tcp_address, topic, 6)
    bodies = [m.body for m in got]
    assert sorted(bodies[:5]) == sorted([b"one", b"two", b"three", b"four", b"five"])
    assert bodies[5] == b"deferred"
    assert time.monotonic() - start >= 0.45
    assert all(m.attempts == 1 for m in got)
    assert all(len(m.id) == 16 for m in got)


async def test_pipelined_publishes_share_one_connection(servers):
    node = servers.nsqd()
    topic = unique()
    async with Producer(node.tcp_address) as p:
        await asyncio.gather(*(p.pub(topic, b"%d" % i) for i in range(5000)))
        assert len(p.connections) == 1
    got = await collect(node.tcp_address, topic, 5000)
    assert sorted(int(m.body) for m in got) == list(range(5000))


async def test_error_frame_raises_code_and_neighbours_survive(servers):
    node = servers.nsqd()
    topic = unique()
    async with Producer(node.tcp_address, reconnect_interval=0.05) as p:
        with pytest.raises(NSQErrorResponse) as info:
            await p.pub("bad!topic", b"x")
        assert info.value.code == "E_BAD_TOPIC" and info.value.fatal
        with pytest.raises(NSQErrorResponse) as info:
            await p.pub(topic, b"")
        assert info.value.code == "E_BAD_MESSAGE"
        # a bad publish in the middle of a pipeline: only it fails; the ones queued behind it
        # were never executed by nsqd, so the producer re-sends them on a new connection
        results = await asyncio.gather(
            *(p.pub(topic if i != 10 else "bad!", b"%d" % i) for i in range(40)),
            return_exceptions=True,
        )
        failed = [i for i, r in enumerate(results) if r is not None]
        assert failed == [10], results
        assert results[10].code == "E_BAD_TOPIC"
    got = await collect(node.tcp_address, topic, 39)
    assert sorted(int(m.body) for m in got) == [i for i in range(40) if i != 10]


async def test_reconnects_after_nsqd_restart(servers):
    node = servers.nsqd()
    topic = unique()
    async with Producer(node.tcp_address, reconnect_interval=0.05, max_reconnect_interval=0.2) as p:
        await p.pub(topic, b"before")
        node = servers.restart(node)
        for _ in range(100):  # the first publish may meet the dead connection
            try:
                await p.pub(topic, b"after")
                break
            except (ConnectionClosedError, NotConnectedError):
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("producer never came back")
    got = await collect(node.tcp_address, topic, 2)
    assert sorted(m.body for m in got) == [b"after", b"before"]


async def test_round_robin_over_several_nsqd_and_failover(servers):
    a, b = servers.nsqd(), servers.nsqd()
    topic = unique()
    async with Producer([a.tcp_address, b.tcp_address], reconnect_interval=0.05) as p:
        await wait_for(lambda: len(p.connections) == 2)
        await asyncio.gather(*(p.pub(topic, b"x") for i in range(100)))
        a.stop()
        await wait_for(lambda: len(p.connections) == 1, timeout=30)
        for _ in range(20):
            await p.pub(topic, b"y")
    # b got about half of the first 100 and all 20 after the failover
    assert len(await collect(b.tcp_address, topic, 70)) >= 70


async def test_connect_to_nothing_raises_not_connected():
    from helpers.servers import free_port

    p = Producer(f"127.0.0.1:{free_port()}", connect_timeout=0.3, reconnect_interval=0.05)
    with pytest.raises(NotConnectedError):
        await p.connect(timeout=0.5)
    await p.close()


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
async def test_compressed_producer_and_consumer(servers, codec):
    node = servers.nsqd()
    topic = unique()
    body = b"compress me " * 200
    async with Producer(node.tcp_address, **{codec: True}) as p:
        conn = p.connections[0]
        assert conn.identify_response[codec] is True
        await asyncio.gather(*(p.pub(topic, body + b"%d" % i) for i in range(300)))
        await p.mpub(topic, [body] * 50)
    got = await collect(node.tcp_address, topic, 350, **{codec: True})
    assert sum(1 for m in got if m.body == body) == 50


async def test_identify_options_reach_nsqd(servers):
    node = servers.nsqd()
    conn = NSQConnection(*node.tcp_address.split(":")[:1], int(node.tcp_port))
    conn.options.msg_timeout = 12.5
    conn.options.client_id = "cid"
    resp = await conn.connect()
    assert resp["msg_timeout"] == 12500
    assert resp["max_rdy_count"] > 0
    assert resp["version"]
    conn.close()
    await conn.wait_closed()


def test_blocking_publish(servers):
    node = servers.nsqd()
    topic = unique()
    publish(topic, b"a", node.tcp_address)
    publish(topic, [b"b", b"c"], node.tcp_address)
    publish(topic, b"d", node.tcp_address, delay=0.1)
    with pytest.raises(NSQErrorResponse) as info:
        publish("bad!", b"x", node.tcp_address)
    assert info.value.code == "E_BAD_TOPIC"
    with SyncPublisher(node.tcp_address) as sp:
        for i in range(100):
            sp.pub(topic, b"%d" % i)
    # no event loop involved: works from any thread
    t = threading.Thread(target=publish, args=(topic, b"thread", node.tcp_address))
    t.start()
    t.join(10)
    got = asyncio.run(collect(node.tcp_address, topic, 105))
    assert len(got) == 105


async def test_http_publish_helpers(servers):
    from nsqpy.client import HTTPPublishError, http_mpub, http_mpublish, http_pub, http_publish

    node = servers.nsqd()
    topic = unique()
    await asyncio.to_thread(http_publish, node.http_address, topic, b"h1")
    await asyncio.to_thread(http_mpublish, node.http_address, topic, [b"h2\nwith newline", b"h3"])
    await asyncio.to_thread(http_mpublish, node.http_address, topic, [b"h4", b"h5"], binary=False)
    await http_pub(node.http_address, topic, b"h6")
    await http_pub(node.http_address, topic, b"h7", delay=0.05)
    await http_mpub(f"http://{node.http_address}", topic, [b"h8", b"h9"])
    with pytest.raises(HTTPPublishError) as info:
        await http_pub(node.http_address, "bad!", b"x")
    assert (info.value.status, info.value.message) == (400, "INVALID_TOPIC")
    with pytest.raises(HTTPPublishError) as info:
        await asyncio.to_thread(http_publish, node.http_address, topic, b"")
    assert info.value.message == "MSG_EMPTY"
    got = await collect(node.tcp_address, topic, 9)
    assert sorted(m.body for m in got) == sorted(
        [b"h1", b"h2\nwith newline", b"h3", b"h4", b"h5", b"h6", b"h7", b"h8", b"h9"]
    )


async def test_tls_requested_never_falls_back_to_clear_text(servers):
    """An nsqd without TLS must not get our traffic in clear when we asked for TLS."""
    import ssl

    from nsqpy.client import IdentifyError, NotConnectedError

    node = servers.nsqd()
    ctx = ssl.create_default_context()
    producer = Producer(node.tcp_address, tls=ctx, retries=0)
    with pytest.raises((IdentifyError, NotConnectedError)):
        await asyncio.wait_for(producer.connect(), 10)
    await producer.close()
