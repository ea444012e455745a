"""pynsq 0.9.1 (tornado 6.0.4) against our nsqd: Writer PUB/MPUB/DPUB, Reader FIN/REQ/TOUCH,
heartbeats, and snappy/deflate negotiated with messages flowing in both directions.

The clients are used exactly as an application would use them (handlers, ``message.requeue``,
``message.touch``); a few hooks are overridden only to *observe* what the client saw (IDENTIFY
responses, heartbeats, error frames).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

import pytest

from helpers.servers import unique_name
from interop.support import assert_server_healthy, wait_until

pytest.importorskip("nsq")

from nsq.deflate_socket import DeflateSocket  # noqa: E402
from nsq.snappy_socket import SnappySocket  # noqa: E402

from interop.pynsq_support import Delivery, Reader, connected_writer, publish  # noqa: E402


@pytest.mark.timeout(30)
def test_writer_pub_mpub_dpub(nsqd, tornado_run):
    topic = unique_name("pypub")
    bodies = [b"single", b"m1", b"m2 with\nnewline and \x00 nul", b"x" * 200_000]
    deliveries: list[Delivery] = []

    def handler(message):
        deliveries.append(Delivery(message))
        return True

    async def main():
        reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=10)
        writer = await connected_writer(nsqd.tcp_address)
        try:
            assert await publish(writer, "pub", topic, b"probe") == b"OK"
            await wait_until(lambda: len(deliveries) == 1, 5, "the probe message")
            assert await publish(writer, "pub", topic, bodies[0]) == b"OK"
            assert await publish(writer, "mpub", topic, bodies[1:]) == b"OK"
            dpub_at = time.monotonic()
            assert await publish(writer, "dpub", topic, 1500, b"deferred") == b"OK"
            await wait_until(lambda: len(deliveries) == 1 + len(bodies), 5, "pub+mpub messages")
            assert deliveries[-1].at - dpub_at < 1.0, "PUB/MPUB messages were slow"
            assert b"deferred" not in [d.body for d in deliveries], "DPUB delivered before its delay"
            await wait_until(lambda: len(deliveries) == 2 + len(bodies), 6, "the deferred message")
            deferred = deliveries[-1]
            assert deferred.body == b"deferred"
            assert 1.4 <= deferred.at - dpub_at <= 4.0, deferred.at - dpub_at
            await asyncio.sleep(0.5)  # nothing else may arrive (no duplicates)
            assert [d.body for d in deliveries] == [b"probe", *bodies, b"deferred"]
            assert all(d.attempts == 1 for d in deliveries)
            assert len({d.id for d in deliveries}) == len(deliveries)
            assert reader.errors == [] and writer.errors == []
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert_server_healthy(nsqd)


@pytest.mark.timeout(30)
def test_reader_fin_is_final(nsqd_factory, tornado_run):
    """Handler returns True => FIN; with a 1s msg timeout nothing may come back afterwards."""
    node = nsqd_factory("--msg-timeout=1s")
    topic = unique_name("pyfin")
    deliveries: list[Delivery] = []

    def handler(message):
        deliveries.append(Delivery(message))
        return True

    async def main():
        writer = await connected_writer(node.tcp_address)
        reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address], max_in_flight=7)
        try:
            sent = [f"msg-{i}".encode() for i in range(60)]
            assert await publish(writer, "mpub", topic, sent[:40]) == b"OK"
            for body in sent[40:]:
                assert await publish(writer, "pub", topic, body) == b"OK"
            await wait_until(lambda: len(deliveries) >= len(sent), 10, "60 messages")
            await asyncio.sleep(2.0)  # two msg timeouts: an un-FINed message would be redelivered
            assert sorted(d.body for d in deliveries) == sorted(sent)
            assert {d.attempts for d in deliveries} == {1}
            assert reader.errors == [], reader.errors  # e.g. E_FIN_FAILED
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert_server_healthy(node)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["handler_false", "explicit_delay", "zero_delay"])
def test_reader_requeue(nsqd, tornado_run, mode):
    """REQ: the message comes back with attempts 2, not before the requested delay."""
    topic = unique_name("pyreq")
    deliveries: list[Delivery] = []
    expected_delay = {"handler_false": 1.0, "explicit_delay": 2.0, "zero_delay": 0.0}[mode]

    def handler(message):
        deliveries.append(Delivery(message))
        if message.attempts > 1:
            return True
        if mode == "handler_false":
            return False  # pynsq: REQ with requeue_delay * attempts = 1s, and backoff
        message.enable_async()
        message.requeue(delay=int(expected_delay), backoff=False)
        return None

    node_addr = nsqd.tcp_address

    async def main():
        writer = await connected_writer(node_addr)
        # requeue_delay=1 => handler-False REQs for 1000ms; tiny max_backoff so RDY comes back fast
        reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[node_addr], max_in_flight=1,
                        requeue_delay=1, max_backoff_duration=0.5)
        try:
            assert await publish(writer, "pub", topic, b"retry me") == b"OK"
            await wait_until(lambda: len(deliveries) >= 2, 8, "the requeued message")
            await asyncio.sleep(0.6)
            first, second = deliveries[0], deliveries[1]
            assert len(deliveries) == 2, deliveries
            assert first.body == second.body == b"retry me"
            assert first.id == second.id
            assert (first.attempts, second.attempts) == (1, 2)
            gap = second.at - first.at
            if expected_delay:
                assert expected_delay - 0.1 <= gap <= expected_delay + 1.5, gap
            else:
                assert gap < 0.5, gap
            assert reader.errors == [], reader.errors
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert_server_healthy(nsqd)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("timeout_from", ["server_flag", "identify"])
def test_reader_touch_keeps_message_alive(nsqd_factory, tornado_run, timeout_from):
    """Two messages with a 1s msg timeout: the touched one is held 3s and delivered once; the
    untouched one times out and is redelivered with attempts 2 (proves the timeout is real)."""
    if timeout_from == "server_flag":
        node = nsqd_factory("--msg-timeout=1s")
        reader_kwargs = {}
    else:
        node = nsqd_factory()  # default 60s; the client asks for 1s in IDENTIFY
        reader_kwargs = {"msg_timeout": 1}
    topic = unique_name("pytouch")
    deliveries: list[Delivery] = []
    touches: list[float] = []
    loop_holder: list[asyncio.AbstractEventLoop] = []

    def touch_then_finish(message, started: float):
        if message.has_responded():
            return
        if time.monotonic() - started >= 3.0:
            message.finish()
            return
        message.touch()
        touches.append(time.monotonic())
        loop_holder[0].call_later(0.3, touch_then_finish, message, started)

    def handler(message):
        deliveries.append(Delivery(message))
        message.enable_async()
        if message.body == b"touched":
            touch_then_finish(message, time.monotonic())
        elif message.attempts > 1:
            message.finish()
        # the first delivery of "untouched" is left to time out
        return None

    async def main():
        loop_holder.append(asyncio.get_running_loop())
        writer = await connected_writer(node.tcp_address)
        reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address],
                        max_in_flight=2, **reader_kwargs)
        try:
            assert await publish(writer, "mpub", topic, [b"touched", b"untouched"]) == b"OK"
            await wait_until(lambda: len(deliveries) >= 3, 6, "the untouched message's redelivery")
            await wait_until(lambda: deliveries[0].message.has_responded(), 6, "the touched FIN")
            await asyncio.sleep(1.6)  # past another msg timeout: a lost TOUCH/FIN would redeliver
            by_body: dict[bytes, list[Delivery]] = {}
            for d in deliveries:
                by_body.setdefault(d.body, []).append(d)
            assert [d.attempts for d in by_body[b"touched"]] == [1], deliveries
            assert [d.attempts for d in by_body[b"untouched"]] == [1, 2], deliveries
            timed_out_after = by_body[b"untouched"][1].at - by_body[b"untouched"][0].at
            assert 0.9 <= timed_out_after <= 2.5, timed_out_after
            assert len(touches) >= 8
            assert reader.identify_responses[0]["msg_timeout"] == 1000
            assert reader.errors == [], reader.errors  # E_TOUCH_FAILED would show up here
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert_server_healthy(node)


@pytest.mark.timeout(30)
def test_heartbeats_keep_idle_connections_alive(nsqd, tornado_run):
    """heartbeat_interval=1s: reader and writer both get ~1 heartbeat/s while idle, answer NOP,
    and their connections survive several intervals (nsqd drops clients silent for 2 intervals)."""
    topic = unique_name("pyhb")
    deliveries: list[Delivery] = []

    def handler(message):
        deliveries.append(Delivery(message))
        return True

    async def main():
        writer = await connected_writer(nsqd.tcp_address, heartbeat_interval=1)
        reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], heartbeat_interval=1)
        try:
            await wait_until(lambda: reader.conns, 5, "the reader connection")
            reader_conn = next(iter(reader.conns.values()))
            writer_conn = next(iter(writer.conns.values()))
            idle_from = time.monotonic()
            await asyncio.sleep(4.5)
            for who, client in (("reader", reader), ("writer", writer)):
                beats = [t for t in client.heartbeats if t >= idle_from]
                assert 3 <= len(beats) <= 6, (who, len(beats))
                gaps = [b - a for a, b in zip(beats, beats[1:])]
                assert all(0.7 <= g <= 1.6 for g in gaps), (who, gaps)
            assert reader_conn.connected() and writer_conn.connected()
            assert next(iter(reader.conns.values())) is reader_conn  # no reconnect happened
            assert await publish(writer, "pub", topic, b"still alive") == b"OK"
            await wait_until(lambda: deliveries, 5, "a message after the idle period")
            assert deliveries[0].body == b"still alive"
            assert reader.identify_responses and reader.errors == [] and writer.errors == []
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert "i/o timeout" not in nsqd.log()
    assert_server_healthy(nsqd)


@pytest.mark.timeout(40)
@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_compression_both_ways(nsqd_factory, tornado_run, codec):
    """snappy / deflate negotiated for both a Writer (client->server compressed PUB/MPUB/DPUB) and
    a Reader (server->client compressed messages and heartbeats, client->server FIN/REQ/RDY/NOP)."""
    node = nsqd_factory("--msg-timeout=2s")
    topic = unique_name(f"py{codec}")
    # compressible, incompressible (snappy falls back to raw chunks) and > 64 KiB (several chunks)
    rnd = os.urandom(150_000)
    bodies = [f"small-{i}".encode() for i in range(150)]
    bodies += [b"abc" * 50_000, rnd, rnd[:70_000] + b"z" * 70_000, b"\x00" * 1000]
    deliveries: list[Delivery] = []

    def handler(message):
        deliveries.append(Delivery(message))
        if message.body == b"small-7" and message.attempts == 1:
            message.enable_async()
            message.requeue(delay=0, backoff=False)
            return None
        return True

    kwargs = {codec: True, "heartbeat_interval": 1}
    if codec == "deflate":
        kwargs["deflate_level"] = 9  # above --max-deflate-level (6): nsqd must clamp

    async def main():
        writer = await connected_writer(node.tcp_address, **kwargs)
        reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address],
                        max_in_flight=50, **kwargs)
        try:
            for client in (writer, reader):
                await wait_until(lambda: client.identify_responses, 5, "IDENTIFY response")
                resp = client.identify_responses[0]
                assert resp[codec] is True, resp
                assert resp["snappy" if codec == "deflate" else "deflate"] is False, resp
                if codec == "deflate":
                    assert resp["deflate_level"] == 6, resp
            await wait_until(lambda: reader.conns and writer.conns, 5, "connections")
            sock_type = SnappySocket if codec == "snappy" else DeflateSocket
            assert isinstance(next(iter(writer.conns.values())).socket, sock_type)

            assert await publish(writer, "mpub", topic, bodies[:100]) == b"OK"
            for body in bodies[100:]:
                assert await publish(writer, "pub", topic, body) == b"OK"
            assert await publish(writer, "dpub", topic, 300, b"deferred") == b"OK"
            await wait_until(lambda: reader.conns, 5, "the reader connection")
            assert isinstance(next(iter(reader.conns.values())).socket, sock_type)
            await wait_until(lambda: len(deliveries) >= len(bodies) + 2, 15, "all messages")
            await asyncio.sleep(2.5)  # idle: compressed heartbeats; un-FINed messages would time out
            got = [d.body for d in deliveries]
            assert len(got) == len(bodies) + 2, (len(got), len(bodies) + 2)
            digest = lambda bs: sorted(hashlib.sha1(b).hexdigest() for b in bs)  # noqa: E731
            assert digest(got) == digest(bodies + [b"small-7", b"deferred"])
            requeued = [d for d in deliveries if d.body == b"small-7"]
            assert [d.attempts for d in requeued] == [1, 2]
            assert all(d.attempts == 1 for d in deliveries if d.body != b"small-7")
            assert len(reader.heartbeats) >= 2 and len(writer.heartbeats) >= 2
            assert reader.errors == [] and writer.errors == [], (reader.errors, writer.errors)
            assert all(c.connected() for c in reader.conns.values())
            assert all(c.connected() for c in writer.conns.values())
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 35)
    assert_server_healthy(node)
