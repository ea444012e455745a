"""A real cluster on loopback: 2 nsqlookupd + 3 nsqd, found and consumed by an unchanged pynsq."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from helpers.servers import Nsqd, Nsqlookupd, unique_name
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(90)


def get_json(addr: str, path: str):
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=5) as r:
            return json.load(r)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def post(addr: str, path: str, body: bytes | None = None) -> None:
    urllib.request.urlopen(urllib.request.Request(f"http://{addr}{path}", data=body, method="POST"),
                           timeout=5)


def producers(lookupd: Nsqlookupd, topic: str) -> set[int]:
    doc = get_json(lookupd.http_address, f"/lookup?topic={topic}")
    return {p["tcp_port"] for p in (doc or {}).get("producers", [])}


def wait_until(cond, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def cluster(tmp_path):
    # upstream's default --inactive-producer-timeout (5m): /lookup lists a producer for that
    # long after its IDENTIFY or last PING (every 15 s), and a REGISTER does not renew it. A
    # short timeout made "every node listed at once" a race with the nodes' start times.
    lookupds = [Nsqlookupd(tmp_path / f"lookupd{i}", "--tombstone-lifetime=30s") for i in range(2)]
    flags = [f"--lookupd-tcp-address={l.tcp_address}" for l in lookupds]
    nodes = [Nsqd(tmp_path / f"nsqd{i}", *flags) for i in range(3)]
    yield lookupds, nodes, flags
    for node in nodes:
        node.stop()
    for l in lookupds:
        l.stop()


def test_pynsq_reader_via_lookupd_gets_messages_from_all_nodes(cluster, tornado_run):
    import nsq

    lookupds, nodes, _ = cluster
    topic = unique_name()
    for i, node in enumerate(nodes):
        Wire(node.tcp_address).mpub(topic, [b"node%d-%d" % (i, j) for j in range(10)])
    for l in lookupds:  # every independent lookupd knows every producer
        wait_until(lambda l=l: producers(l, topic) == {n.tcp_port for n in nodes}, what="registration")
    got: list[bytes] = []

    def handler(message):
        got.append(message.body)
        return True

    async def main():
        import asyncio
        reader = nsq.Reader(topic=topic, channel="ch", message_handler=handler, max_in_flight=10,
                            lookupd_http_addresses=[f"http://{l.http_address}" for l in lookupds],
                            lookupd_poll_interval=1)
        while len(got) < 30:
            await asyncio.sleep(0.05)
        reader.close()

    tornado_run(main, 30)
    assert sorted(got) == sorted(b"node%d-%d" % (i, j) for i in range(3) for j in range(10))


def test_channels_are_registered_and_precreated_on_new_topics(cluster):
    lookupds, nodes, _ = cluster
    topic = unique_name()
    w = Wire(nodes[0].tcp_address)
    w.sub(topic, "archive")
    wait_until(lambda: get_json(lookupds[1].http_address, f"/channels?topic={topic}") ==
               {"channels": ["archive"]}, what="channel registration")
    # a message published on another node for a topic new there reaches "archive": as upstream's
    # publish blocks in GetTopic on the lookupd query, the OK comes once the channel exists
    Wire(nodes[1].tcp_address).pub(topic, b"first")
    post(nodes[2].http_address, f"/pub?topic={topic}", b"second")

    for node in nodes[1:]:
        chans = get_json(node.http_address, f"/stats?format=json&topic={topic}")["topics"][0]["channels"]
        assert [(c["channel_name"], c["depth"]) for c in chans] == [("archive", 1)]


def test_clean_stop_leaves_at_once_and_kill9_leaves_too(cluster):
    lookupds, nodes, _ = cluster
    topic = unique_name()
    for node in nodes:
        Wire(node.tcp_address).pub(topic, b"x")
    wait_until(lambda: producers(lookupds[0], topic) == {n.tcp_port for n in nodes}, what="registration")
    nodes[0].stop()
    wait_until(lambda: nodes[0].tcp_port not in producers(lookupds[0], topic),
               what="clean stop to unregister")
    nodes[1].kill9()
    # the OS closes the killed node's connection, and nsqlookupd drops what it registered
    # (the inactive timeout, 5 minutes, is far beyond the wait)
    wait_until(lambda: nodes[1].tcp_port not in producers(lookupds[0], topic),
               what="killed node to leave /lookup")
    assert producers(lookupds[1], topic) == {nodes[2].tcp_port}


def test_tombstone_stops_new_consumer_connections(cluster, tornado_run):
    import nsq

    lookupds, nodes, _ = cluster
    topic = unique_name()
    for node in nodes:
        Wire(node.tcp_address).pub(topic, b"x")
    for l in lookupds:
        wait_until(lambda l=l: len(producers(l, topic)) == 3, what="registration")
        post(l.http_address, f"/topic/tombstone?topic={topic}&node=127.0.0.1:{nodes[0].http_port}")
        assert nodes[0].tcp_port not in producers(l, topic)
    got: list[bytes] = []

    def handler(message):
        got.append(message.body)
        return True

    async def main():
        import asyncio
        reader = nsq.Reader(topic=topic, channel="ch", message_handler=handler, max_in_flight=10,
                            lookupd_http_addresses=[f"http://{l.http_address}" for l in lookupds],
                            lookupd_poll_interval=1)
        while len(got) < 2:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # another poll: still no connection to the tombstoned node
        reader.close()

    tornado_run(main, 30)
    assert len(got) == 2
    channels = get_json(nodes[0].http_address, f"/stats?format=json&topic={topic}")["topics"][0]["channels"]
    assert channels == []  # nobody ever subscribed on the tombstoned node


def test_lookupd_restart_is_healed_by_reregistration(cluster):
    lookupds, nodes, _ = cluster
    topic = unique_name()
    sub = Wire(nodes[2].tcp_address)
    sub.sub(topic, "c1")
    wait_until(lambda: nodes[2].tcp_port in producers(lookupds[0], topic), what="registration")
    lookupds[0] = lookupds[0].restart()
    assert get_json(lookupds[0].http_address, f"/lookup?topic={topic}") is None  # fresh, empty
    wait_until(lambda: nodes[2].tcp_port in producers(lookupds[0], topic), timeout=60,
               what="re-registration after the lookupd restart")
    assert get_json(lookupds[0].http_address, f"/channels?topic={topic}") == {"channels": ["c1"]}


def test_config_put_changes_lookupd_peers_live(tmp_path):
    extra = Nsqlookupd(tmp_path / "extra")
    node = Nsqd(tmp_path / "n")
    try:
        topic = unique_name()
        Wire(node.tcp_address).pub(topic, b"x")
        req = urllib.request.Request(f"http://{node.http_address}/config/nsqlookupd_tcp_addresses",
                                     data=json.dumps([extra.tcp_address]).encode(), method="PUT")
        with urllib.request.urlopen(req, timeout=5) as r:
            assert json.load(r) == [extra.tcp_address]
        wait_until(lambda: node.tcp_port in producers(extra, topic), what="registration with the new peer")
    finally:
        node.stop()
        extra.stop()


def test_a_topic_made_while_a_lookupd_is_being_added_still_gets_its_channels(tmp_path):
    """The lookupd is put back with ``PUT /config/nsqlookupd_tcp_addresses`` and a publish to a
    topic new on the node follows in the same read (pipelined on one connection): the topic
    asks that lookupd for its channels once it has answered IDENTIFY, as upstream's lookup loop
    connects a peer before it uses it, so the registered channel gets the message."""
    lookupd = Nsqlookupd(tmp_path / "lookupd")
    node = Nsqd(tmp_path / "nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}")
    try:
        topic = unique_name()
        post(node.http_address, f"/topic/create?topic={topic}")
        post(node.http_address, f"/channel/create?topic={topic}&channel=archive")
        wait_until(lambda: get_json(lookupd.http_address, f"/channels?topic={topic}") ==
                   {"channels": ["archive"]}, what="channel registration")
        post(node.http_address, f"/topic/delete?topic={topic}")  # lookupd keeps the channel's name
        put = urllib.request.Request(f"http://{node.http_address}/config/nsqlookupd_tcp_addresses",
                                     data=b'["127.0.0.1:1"]', method="PUT")
        urllib.request.urlopen(put, timeout=5).read()
        back = json.dumps([lookupd.tcp_address]).encode()
        requests = (b"PUT /config/nsqlookupd_tcp_addresses HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(back), back) +
                    b"POST /pub?topic=%s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst"
                    % topic.encode())
        with socket.create_connection(("127.0.0.1", node.http_port), timeout=10) as sock:
            sock.sendall(requests)
            answers = b""
            while answers.count(b"HTTP/1.1 200 OK") < 2:
                chunk = sock.recv(65536)
                assert chunk, f"connection closed after {answers!r}"
                answers += chunk
        wait_until(lambda: [(c["channel_name"], c["depth"]) for c in get_json(
            node.http_address, f"/stats?format=json&topic={topic}")["topics"][0]["channels"]]
            == [("archive", 1)], what="the channel pre-created with the message")
    finally:
        node.stop()
        lookupd.stop()
