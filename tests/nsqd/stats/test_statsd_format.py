"""nsqd's statsd formatting on bytes: keys, types, deltas, prefix and datagram packing (§2.9)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from nsqpy.nsqd.stats.statsd import (
    host_key, index_topics, mem_lines, pack_datagrams, resolve_prefix, send_spread, stat_lines,
)

P = "nsq.h_1."


def _latency(*pairs):
    return {"count": 1, "percentiles": [{"quantile": q, "value": v} for q, v in pairs]} if pairs \
        else {"count": 0, "percentiles": None}


def _channel(name, **kw):
    base = {"channel_name": name, "depth": 0, "backend_depth": 0, "in_flight_count": 0,
            "deferred_count": 0, "message_count": 0, "requeue_count": 0, "timeout_count": 0,
            "client_count": 0, "clients": None, "paused": False,
            "e2e_processing_latency": _latency()}
    base.update(kw)
    return base


def _topic(name, channels=(), **kw):
    base = {"topic_name": name, "channels": list(channels), "depth": 0, "backend_depth": 0,
            "message_count": 0, "message_bytes": 0, "paused": False,
            "e2e_processing_latency": _latency()}
    base.update(kw)
    return base


def test_prefix_host_replacement_and_trailing_dot():
    assert host_key("127.0.0.1:4151") == "127_0_0_1_4151"
    assert resolve_prefix("nsq.%s", "127.0.0.1", 4151) == "nsq.127_0_0_1_4151."
    assert resolve_prefix("a.%s.b.%s", "h.local", 1) == "a.h_local_1.b.h_local_1."
    assert resolve_prefix("fixed.", "h", 1) == "fixed."
    assert resolve_prefix("", "h", 1) == ""
    # IPv6 goes through Go's JoinHostPort: brackets stay, colons become underscores
    assert resolve_prefix("nsq.%s", "::1", 4151) == "nsq.[__1]_4151."


def test_every_upstream_key_with_its_type_in_order():
    topics = [_topic("t", [_channel("c", depth=3, backend_depth=1, in_flight_count=2,
                                    deferred_count=4, message_count=9, requeue_count=5,
                                    timeout_count=6, client_count=7,
                                    e2e_processing_latency=_latency((1.0, 2500.7), (0.99, 2000)))],
                     depth=8, backend_depth=2, message_count=10, message_bytes=100,
                     e2e_processing_latency=_latency((1.0, 3000), (0.99, 1999.9)))]
    lines = stat_lines(P, topics, {}, False)
    assert b"".join(lines).decode().splitlines() == [
        "nsq.h_1.topic.t.message_count:10|c",
        "nsq.h_1.topic.t.message_bytes:100|c",
        "nsq.h_1.topic.t.depth:8|g",
        "nsq.h_1.topic.t.backend_depth:2|g",
        "nsq.h_1.topic.t.e2e_processing_latency_100:3000|g",
        "nsq.h_1.topic.t.e2e_processing_latency_99:1999|g",
        "nsq.h_1.topic.t.channel.c.message_count:9|c",
        "nsq.h_1.topic.t.channel.c.depth:3|g",
        "nsq.h_1.topic.t.channel.c.backend_depth:1|g",
        "nsq.h_1.topic.t.channel.c.in_flight_count:2|g",
        "nsq.h_1.topic.t.channel.c.deferred_count:4|g",
        "nsq.h_1.topic.t.channel.c.requeue_count:5|c",
        "nsq.h_1.topic.t.channel.c.timeout_count:6|c",
        "nsq.h_1.topic.t.channel.c.clients:7|g",
        "nsq.h_1.topic.t.channel.c.e2e_processing_latency_100:2500|g",
        "nsq.h_1.topic.t.channel.c.e2e_processing_latency_99:2000|g",
    ]
    assert all(line.endswith(b"\n") for line in lines)


def test_counters_are_deltas_gauges_are_values():
    first = [_topic("t", [_channel("c", message_count=4, requeue_count=1, timeout_count=1,
                                   depth=4)], message_count=4, message_bytes=40, depth=4)]
    second = [_topic("t", [_channel("c", message_count=10, requeue_count=1, timeout_count=3,
                                    depth=2), _channel("new", message_count=2)],
                     message_count=10, message_bytes=100, depth=2),
              _topic("u", message_count=1, message_bytes=1)]
    text = b"".join(stat_lines(P, second, index_topics(first), False)).decode()
    for expected in ("topic.t.message_count:6|c", "topic.t.message_bytes:60|c", "topic.t.depth:2|g",
                     "topic.t.channel.c.message_count:6|c", "topic.t.channel.c.requeue_count:0|c",
                     "topic.t.channel.c.timeout_count:2|c", "topic.t.channel.c.depth:2|g",
                     "topic.t.channel.new.message_count:2|c", "topic.u.message_count:1|c"):
        assert f"{P}{expected}\n" in text
    # a recreated topic (its counter went down) reports a negative delta, as upstream does
    text = b"".join(stat_lines(P, first, index_topics(second), False)).decode()
    assert f"{P}topic.t.message_count:-6|c\n" in text


def test_exclude_ephemeral_skips_topics_and_channels():
    topics = [_topic("e#ephemeral", [_channel("c")]),
              _topic("t", [_channel("x#ephemeral"), _channel("c")])]
    kept = b"".join(stat_lines(P, topics, {}, True)).decode()
    assert "ephemeral" not in kept and "topic.t.channel.c.depth" in kept
    assert "e#ephemeral" in b"".join(stat_lines(P, topics, {}, False)).decode()


def test_mem_lines():
    mem = {"heap_objects": 1, "heap_idle_bytes": 2, "heap_in_use_bytes": 3,
           "heap_released_bytes": 4, "gc_pause_usec_100": 5, "gc_pause_usec_99": 6,
           "gc_pause_usec_95": 7, "next_gc_bytes": 8, "gc_total_runs": 30}
    assert b"".join(mem_lines("p.", mem, 12)).decode().splitlines() == [
        "p.mem.heap_objects:1|g", "p.mem.heap_idle_bytes:2|g", "p.mem.heap_in_use_bytes:3|g",
        "p.mem.heap_released_bytes:4|g", "p.mem.gc_pause_usec_100:5|g",
        "p.mem.gc_pause_usec_99:6|g", "p.mem.gc_pause_usec_95:7|g", "p.mem.next_gc_bytes:8|g",
        "p.mem.gc_runs:18|c"]


def test_packing_keeps_lines_whole_and_within_size():
    lines = [b"a" * 9 + b"\n", b"b" * 4 + b"\n", b"c" * 4 + b"\n", b"d" * 30 + b"\n", b"e\n"]
    assert pack_datagrams(lines, 20) == [b"a" * 9 + b"\n" + b"b" * 4 + b"\n" + b"c" * 4 + b"\n",
                                         b"d" * 30 + b"\n", b"e\n"]
    # exactly full stays in the buffer until the next line needs room
    assert pack_datagrams([b"x" * 9 + b"\n", b"y" * 9 + b"\n", b"z\n"], 20) == [
        b"x" * 9 + b"\n" + b"y" * 9 + b"\n", b"z\n"]
    assert pack_datagrams([], 508) == []
    # a size <= 0 is bufio's default of 4096
    many = [b"k" * 99 + b"\n"] * 100
    assert [len(d) for d in pack_datagrams(many, 0)] == [4000, 4000, 2000]


def test_spread_over_the_interval_and_flush_on_cancel():
    async def main():
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.connect(rx.getsockname())
        loop = asyncio.get_running_loop()
        try:
            start = loop.time()
            await send_spread(tx, [b"1\n", b"2\n", b"3\n", b"4\n"], 0.4)
            assert loop.time() - start >= 0.39
            got = [rx.recv(100) for _ in range(4)]
            assert got == [b"1\n", b"2\n", b"3\n", b"4\n"]
            # nsqd exiting: the rest goes out at once instead of being lost
            task = loop.create_task(send_spread(tx, [b"a\n", b"b\n", b"c\n"], 30.0))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert [rx.recv(100) for _ in range(3)] == [b"a\n", b"b\n", b"c\n"]
        finally:
            rx.close()
            tx.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_stall_does_not_turn_into_a_burst():
    """Like Go's ticker: after the loop was blocked, one buffered tick is taken at once and the
    missed ones are dropped, so at most two datagrams go out back to back."""
    import threading
    import time

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5)
    arrivals: list[float] = []

    def read():
        for _ in range(10):
            rx.recv(100)
            arrivals.append(time.monotonic())

    reader = threading.Thread(target=read)
    reader.start()

    async def main():
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.connect(rx.getsockname())
        loop = asyncio.get_running_loop()
        loop.call_later(0.25, time.sleep, 0.5)  # the event loop stalls for 0.5s mid-spread
        try:
            await send_spread(tx, [b"%d\n" % i for i in range(10)], 1.0)
        finally:
            tx.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 10))
        reader.join(10)
    finally:
        rx.close()
    assert len(arrivals) == 10
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    close = [g < 0.03 for g in gaps]
    assert not any(a and b for a, b in zip(close, close[1:])), gaps  # never 3 in a row
    assert arrivals[-1] - arrivals[0] >= 1.0  # the stall lengthened the spread, as in Go
