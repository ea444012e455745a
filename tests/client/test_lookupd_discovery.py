"""Discovery through nsqlookupd: nodes that appear, disappear (tombstoned or dead), and a
lookupd that is down; plus the URL and answer parsing on their own."""

from __future__ import annotations

import asyncio
import struct
import urllib.request

import orjson

import pytest

from nsqpy.client import Consumer, Message, Producer
from nsqpy.client.lookupd import LookupdPoller, lookup_url, producers_from_answer

from client.client_util import unique, wait_for

pytestmark = pytest.mark.timeout(90)


def test_lookup_url_like_go_nsq():
    assert lookup_url("127.0.0.1:4161", "t") == "http://127.0.0.1:4161/lookup?topic=t"
    assert lookup_url("http://h:4161/", "t") == "http://h:4161/lookup?topic=t"
    assert lookup_url("https://h:4161/custom?x=1", "a b") == "https://h:4161/custom?x=1&topic=a+b"
    with pytest.raises(ValueError):
        lookup_url("h", "t")


def test_producers_from_answer_formats():
    v1 = {"channels": [], "producers": [
        {"broadcast_address": "10.0.0.1", "tcp_port": 4150, "http_port": 4151},
        {"broadcast_address": "::1", "tcp_port": 4150},
    ]}
    assert producers_from_answer(v1) == {"10.0.0.1:4150", "[::1]:4150"}
    legacy = {"status_code": 200, "status_txt": "OK", "data": v1}
    assert producers_from_answer(legacy) == producers_from_answer(v1)
    assert producers_from_answer({"producers": None}) == set()


def _post(url: str) -> None:
    req = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


async def _lookup(lookupd, topic: str) -> set[str] | None:
    poller = LookupdPoller([lookupd.http_address], topic, timeout=2)
    try:
        return await poller.query()
    finally:
        await poller.close()


class Registrant:
    """Registers a (real) nsqd's TCP port with nsqlookupd over the V1 protocol, the way nsqd
    does, so discovery can be tested whatever state nsqd's own registration loop is in."""

    def __init__(self, lookupd, nsqd) -> None:
        self.lookupd, self.nsqd = lookupd, nsqd
        self.writer: asyncio.StreamWriter | None = None

    async def register(self, topic: str) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", self.lookupd.tcp_port)
        body = orjson.dumps({
            "broadcast_address": "127.0.0.1", "tcp_port": self.nsqd.tcp_port,
            "http_port": self.nsqd.http_port, "version": "1.3.0", "hostname": "test",
        })
        self.writer.write(b"  V1IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        self.writer.write(b"REGISTER %s\n" % topic.encode())
        for _ in range(2):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)

    async def leave(self) -> None:
        assert self.writer is not None
        self.writer.close()  # lookupd drops every registration of a peer that disconnects


async def test_discovery_follows_registrations(servers):
    lookupd = servers.nsqlookupd()
    a, b = servers.nsqd(), servers.nsqd()
    topic = unique()
    reg_a, reg_b = Registrant(lookupd, a), Registrant(lookupd, b)
    await reg_a.register(topic)
    got: list[str] = []

    def handler(msg: Message) -> None:
        got.append(msg.conn.address)

    async with Consumer(
        topic, "ch", handler, lookupd_http_addresses=[lookupd.http_address],
        lookupd_poll_interval=0.1, lookupd_poll_jitter=0.5, max_in_flight=8,
    ) as c:
        assert set(c.connections) == {a.tcp_address}  # the first query happens in start()
        await reg_b.register(topic)
        await wait_for(lambda: set(c.connections) == {a.tcp_address, b.tcp_address})
        assert c.total_rdy() == 8
        for node in (a, b):
            async with Producer(node.tcp_address) as p:
                await p.pub(topic, b"x")
        await wait_for(lambda: sorted(got) == sorted([a.tcp_address, b.tcp_address]))
        await reg_a.leave()  # a is gone from lookupd while still running: let go of it
        await wait_for(lambda: set(c.connections) == {b.tcp_address})
        assert c.total_rdy() == 8
        await reg_a.register(topic)  # and back
        await wait_for(lambda: set(c.connections) == {a.tcp_address, b.tcp_address})
        await reg_b.leave()
        await reg_a.leave()
        await wait_for(lambda: not c.connections)
        assert c.total_rdy() == 0


async def _registered_by_nsqd(lookupd, topic: str) -> bool:
    for _ in range(50):
        if await _lookup(lookupd, topic):
            return True
        await asyncio.sleep(0.1)
    return False


async def test_nodes_come_and_go(servers):
    lookupd = servers.nsqlookupd()
    flag = f"--lookupd-tcp-address={lookupd.tcp_address}"
    a, b = servers.nsqd(flag), servers.nsqd(flag)
    topic = unique()
    async with Producer(a.tcp_address) as p:
        await p.pub(topic, b"from a")
    assert await _registered_by_nsqd(lookupd, topic), "nsqd did not register the topic with lookupd"

    got: list[tuple[str, bytes]] = []

    async def handler(msg: Message) -> None:
        got.append((msg.conn.address, msg.body))

    async with Consumer(
        topic, "ch", handler, lookupd_http_addresses=[lookupd.http_address],
        lookupd_poll_interval=0.2, lookupd_poll_jitter=0.1, max_in_flight=10,
    ) as c:
        await wait_for(lambda: got)
        assert set(c.connections) == {a.tcp_address}
        # a second nsqd starts carrying the topic: found on a later poll
        async with Producer(b.tcp_address) as p:
            await p.pub(topic, b"from b")
        await wait_for(lambda: set(c.connections) == {a.tcp_address, b.tcp_address}, timeout=30)
        await wait_for(lambda: len(got) == 2)
        assert c.total_rdy() == 10
        # b is tombstoned for the topic: lookupd hides it, the consumer lets go of it
        _post(f"http://{lookupd.http_address}/topic/tombstone?topic={topic}&node=127.0.0.1:{b.http_port}")
        await wait_for(lambda: set(c.connections) == {a.tcp_address}, timeout=30)
        assert c.total_rdy() == 10  # the whole budget is back on a
        # a dies: its connection goes, and lookupd stops listing it
        a.stop()
        await wait_for(lambda: not c.connections, timeout=30)
        assert c.total_rdy() == 0


async def test_lookupd_down_keeps_existing_connections(servers):
    lookupd = servers.nsqlookupd()
    node = servers.nsqd()
    topic = unique()
    reg = Registrant(lookupd, node)  # keep the registration connection open
    await reg.register(topic)
    async with Producer(node.tcp_address) as p:
        await p.pub(topic, b"x")
    got: list[bytes] = []

    async def handler(msg: Message) -> None:
        got.append(msg.body)

    async with Consumer(
        topic, "ch", handler, lookupd_http_addresses=[lookupd.http_address],
        lookupd_poll_interval=0.1, lookupd_poll_jitter=0.0, lookupd_poll_timeout=0.5,
    ) as c:
        await wait_for(lambda: got)
        lookupd.stop()
        await asyncio.sleep(0.5)  # several failed polls
        assert set(c.connections) == {node.tcp_address}
        async with Producer(node.tcp_address) as p:
            await p.pub(topic, b"y")
        await wait_for(lambda: len(got) == 2)


async def test_unknown_topic_is_an_empty_answer(servers):
    lookupd = servers.nsqlookupd()
    assert await _lookup(lookupd, unique()) == set()


async def test_discovered_node_restarts(servers):
    lookupd = servers.nsqlookupd()
    flag = f"--lookupd-tcp-address={lookupd.tcp_address}"
    node = servers.nsqd(flag)
    topic = unique()
    async with Producer(node.tcp_address) as p:
        await p.pub(topic, b"before")
    assert await _registered_by_nsqd(lookupd, topic)
    got: list[bytes] = []

    async def handler(msg: Message) -> None:
        got.append(msg.body)

    async with Consumer(
        topic, "ch", handler, lookupd_http_addresses=[lookupd.http_address],
        lookupd_poll_interval=0.2, lookupd_poll_jitter=0.1, max_in_flight=4,
    ) as c:
        await wait_for(lambda: got == [b"before"])
        old = c.connections[node.tcp_address]
        node = servers.restart(node, flag)  # same ports; topic comes back from nsqd.dat
        await wait_for(lambda: old.is_closed)
        await wait_for(lambda: node.tcp_address in c.connections, timeout=15)
        assert c.connections[node.tcp_address] is not old
        await wait_for(lambda: c.total_rdy() == 4)
        async with Producer(node.tcp_address) as p:
            await p.pub(topic, b"after")
        await wait_for(lambda: got == [b"before", b"after"])
