"""Helpers for the Spark tests (no fixtures here, so the kill -9 driver script can use them too)."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from typing import Callable

import orjson

from nsqpy.client import Consumer, SyncPublisher


def publish_n(address: str, topic: str, n: int, start: int = 0, chunk: int = 1000, size: int = 0) -> list[bytes]:
    """Publish bodies ``m-<i>`` (padded to ``size`` bytes) for i in [start, start+n); return them."""
    bodies = [(b"m-%d" % i).ljust(size, b".") for i in range(start, start + n)]
    with SyncPublisher(address) as pub:
        for i in range(0, n, chunk):
            pub.mpub(topic, bodies[i : i + chunk])
    return bodies


def stats(http_address: str, topic: str) -> dict:
    with urllib.request.urlopen(f"http://{http_address}/stats?format=json&topic={topic}", timeout=5) as resp:
        data = orjson.loads(resp.read())
    for t in data.get("topics") or ():
        if t["topic_name"] == topic:
            return t
    return {}


def channel_stats(http_address: str, topic: str, channel: str) -> dict:
    for c in stats(http_address, topic).get("channels") or ():
        if c["channel_name"] == channel:
            return c
    return {}


def create_channel(http_address: str, topic: str, channel: str) -> None:
    """Create topic and channel (as upstream, /channel/create wants an existing topic)."""
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel={channel}"):
        req = urllib.request.Request(f"http://{http_address}{path}", data=b"", method="POST")
        urllib.request.urlopen(req, timeout=5).read()


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.2, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def drain(address: str, topic: str, n: int, channel: str = "verify", timeout: float = 30.0, settle: float = 0.5) -> list[bytes]:
    """Consume (and FIN) what ``topic`` has for ``channel``: at least ``n`` messages or until timeout,
    then ``settle`` seconds more to catch any extra copies."""
    bodies: list[bytes] = []

    async def main() -> None:
        done = asyncio.Event()

        def handle(msg) -> None:
            bodies.append(msg.body)
            if len(bodies) >= n:
                done.set()

        async with Consumer(topic, channel, handle, nsqd_tcp_addresses=[address], max_in_flight=2500):
            try:
                async with asyncio.timeout(timeout):
                    await done.wait()
            except TimeoutError:
                pass
            await asyncio.sleep(settle)

    asyncio.run(main())
    return bodies
