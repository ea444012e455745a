"""Small helpers for the client integration tests."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable

import aiohttp
import orjson


def unique(prefix: str = "t") -> str:
    return f"{prefix}_{os.getpid()}_{time.monotonic_ns() % 10**10}"


async def stats(http_address: str, topic: str | None = None) -> dict[str, Any]:
    """nsqd's ``/stats?format=json`` (optionally filtered to one topic)."""
    url = f"http://{http_address}/stats?format=json"
    if topic:
        url += f"&topic={topic}"
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return orjson.loads(await resp.read())


def channel_stats(data: dict[str, Any], topic: str, channel: str) -> dict[str, Any] | None:
    for t in data.get("topics") or ():
        if t["topic_name"] == topic:
            for c in t.get("channels") or ():
                if c["channel_name"] == channel:
                    return c
    return None


async def ready_counts(http_addresses: list[str], topic: str, channel: str) -> list[int]:
    """``ready_count`` of every client subscribed to topic/channel, across the given nsqd."""
    counts: list[int] = []
    for addr in http_addresses:
        ch = channel_stats(await stats(addr, topic), topic, channel)
        if ch:
            counts += [c["ready_count"] for c in ch.get("clients") or ()]
    return counts


async def wait_for(pred: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


def frozen_ready_counts(http_addresses: list[str], topic: str, channel: str) -> list[int]:
    """Server-side RDY of every client, as one consistent picture.

    Deliberately blocking: called from a coroutine it freezes the event loop, so the consumer
    cannot move RDY between the reads of different nsqd; the short sleep lets each nsqd apply
    the RDY commands already on the wire. (Async reads taken one nsqd after another can catch
    a RDY move half-way and add a stale count to a fresh one.)
    """
    import urllib.request

    time.sleep(0.05)
    counts: list[int] = []
    for addr in http_addresses:
        url = f"http://{addr}/stats?format=json&topic={topic}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            ch = channel_stats(orjson.loads(resp.read()), topic, channel)
        if ch:
            counts += [c["ready_count"] for c in ch.get("clients") or ()]
    return counts
