"""Failover: when an origin stays unreachable, its peer delivers the origin's unfinished messages.

Why two signals: the replication link can drop while the origin is fine (a partition between two
nodes, a restart of the link), and adopting then would only make duplicates. So once the link is
down the peer also probes the origin's ``/ping`` every second; the origin is declared gone when
neither has answered for ``--replication-failover-timeout`` (docs/replication.md §5).

Adoption itself is in ``adopt.py``; an operator can also ask for it (``POST /replication/adopt``,
served from here).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from ...common.addr import split_host_port
from ...common.goweb import first_value
from ...common.http_api import v1_error, v1_json
from ..auth.needs import NODE
from ..http import Route

if TYPE_CHECKING:
    from ..nsqd import NSQD
    from .peer import Origin, ReplicaHost

PROBE_INTERVAL = 1.0


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


def adopt_request(nsqd: "NSQD", origin: str | None) -> Any:
    """``POST /replication/adopt?origin=HOST:PORT``: the operator knows the origin is gone."""
    host = nsqd.replicas
    if not origin:
        return v1_error(400, "MISSING_ARG_ORIGIN")
    keys = [k for k, o in host.origins.items() if o.address == origin]
    if not keys:
        return v1_error(404, "ORIGIN_NOT_FOUND")
    if any(host.origins[k].session is not None for k in keys):
        return v1_error(409, "ORIGIN_LINKED")
    return v1_json({"origin": origin, "adopted": sum(host.failover.adopt(k) for k in keys)})


def adopt_routes(api: Any) -> list[Route]:
    """nsqd's HTTP API gains ``POST /replication/adopt`` on a node that accepts replicas."""

    def adopt(request: Any) -> Any:
        return adopt_request(api.nsqd, first_value(api.query(request), "origin"))

    return [Route("POST", "/replication/adopt", adopt, auth=NODE)]  # (docs/security.md)
