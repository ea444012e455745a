"""Failover: when an origin stays unreachable, its peer delivers the origin's unfinished messages.

Why two signals: the replication link can drop while the origin is fine (a partition between two
nodes, a restart of the link), and adopting then would only make duplicates. So once the link is
down the peer also probes the origin's ``/ping`` every second; the origin is declared gone when
neither has answered for ``--replication-failover-timeout`` (docs/replication.md §5).

Adoption puts each live replicated message into the peer's *own* topic of the same name: into
each channel that still owes it (attempts kept, deferrals keep their due time), or into the topic
when it was still held there. Creating those topics and channels registers them with nsqlookupd,
so stock consumers that discover producers through lookupd find them here. A node that itself
replicates ships what it adopted to its own peer, like its own messages (a ring survives the
adopting node's loss too).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Iterable

from ..common.addr import split_host_port
from ..protocol.names import is_ephemeral

if TYPE_CHECKING:
    from .nsqd import NSQD
    from .replica_host import Origin, ReplicaHost
    from .replica_store import ReplicaStore

PROBE_INTERVAL = 1.0


def adopt_store(nsqd: "NSQD", store: "ReplicaStore") -> int:
    """Hand every live message of ``store`` to this node's topics/channels; returns the count."""
    return adopt_messages(nsqd, store.messages())


def adopt_messages(nsqd: "NSQD", messages: Iterable[tuple]) -> int:
    """Deliver replicated messages ``(record, owed, attempts, due_ns)`` from this node."""
    now_ns, now = time.time_ns(), time.monotonic()
    per_channel: dict[tuple[str, str], list[tuple]] = {}
    onward: list[tuple[str, tuple, frozenset[str], int]] = []
    n = 0
    for rec, owed, attempts, due_ns in messages:
        msg = (rec.id, rec.body, rec.timestamp, attempts)
        n += 1
        if owed is None:  # still queued at the origin's topic: every channel gets it
            topic = nsqd.get_topic(rec.topic)
            if due_ns > now_ns:
                topic.put_deferred(msg, (due_ns - now_ns) / 1e9)
            else:
                topic.put_many([msg], len(rec.body))
            continue
        durable = frozenset(name for name in owed if not is_ephemeral(name))
        if durable:
            onward.append((rec.topic, msg, durable, due_ns if due_ns > now_ns else 0))
        for name in owed:
            if due_ns > now_ns:
                channel = nsqd.get_topic(rec.topic).get_channel(name)
                channel.put_deferred(msg, now + (due_ns - now_ns) / 1e9)
            else:
                per_channel.setdefault((rec.topic, name), []).append(msg)
    for (topic_name, name), msgs in per_channel.items():
        channel = nsqd.get_topic(topic_name).get_channel(name)
        channel.put_many(msgs)
    if nsqd.replicator is not None:  # after the channels exist, so their CHAN_ADD go first
        for topic_name, msg, owed, due in onward:
            nsqd.replicator.adopted(topic_name, msg, owed, due)
    return n


class Failover:
    """Watches origins whose link is down; adopts them after the timeout."""

    def __init__(self, host: "ReplicaHost", timeout: float) -> None:
        self.host = host
        self.timeout = timeout
        self.last_alive: dict[str, float] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = self.host.nsqd.loop.create_task(self._run())

    async def _run(self) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=PROBE_INTERVAL)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while True:
                await asyncio.sleep(PROBE_INTERVAL)
                for key, origin in list(self.host.origins.items()):
                    if origin.session is not None:
                        self.last_alive[key] = time.monotonic()
                        continue
                    if await self._ping(http, origin):
                        self.last_alive[key] = time.monotonic()
                        continue
                    seen = max(self.last_alive.get(key, 0.0), origin.down_since)
                    if time.monotonic() - seen >= self.timeout and origin.session is None:
                        self.host.logger.error(
                            "REPLICA(%s): unreachable for %.0fs, failing over", origin.address,
                            time.monotonic() - seen)
                        self.adopt(key)

    async def _ping(self, http, origin: "Origin") -> bool:
        import aiohttp

        if not origin.http_port:
            return False
        try:
            host, _ = split_host_port(origin.address)
            async with http.get(f"http://{host}:{origin.http_port}/ping") as resp:
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
            return False

    def adopt(self, key: str) -> int:
        origin = self.host.origins.pop(key, None)
        if origin is None:
            return 0
        self.last_alive.pop(key, None)
        return self.host.adopt(origin)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def replication_acked(nsqd: "NSQD") -> None:
    """An HTTP publish in sync mode answers once the peer has stored the message."""
    fut = nsqd.replicator.acked()
    if fut is not None:
        await fut


def adopt_request(nsqd: "NSQD", origin: str | None) -> tuple[int, dict]:
    """``POST /replication/adopt?origin=HOST:PORT``: the operator knows the origin is gone."""
    host = nsqd.replicas
    if not origin:
        return 400, {"message": "MISSING_ARG_ORIGIN"}
    keys = [k for k, o in host.origins.items() if o.address == origin]
    if not keys:
        return 404, {"message": "ORIGIN_NOT_FOUND"}
    if any(host.origins[k].session is not None for k in keys):
        return 409, {"message": "ORIGIN_LINKED"}
    return 200, {"origin": origin, "adopted": sum(host.failover.adopt(k) for k in keys)}
