"""Discovering the nsqd that carry a topic by polling nsqlookupd's HTTP ``/lookup``.

nsqlookupd instances never talk to each other, so every answer is partial and possibly stale.
We ask all of them in each round (concurrently) and take the union: a node counts as gone only
when no lookupd that answered still lists it. A round where none answered says nothing, and the
caller keeps what it has. ``404 TOPIC_NOT_FOUND`` is an answer ("nobody produces it yet").
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp
import orjson

from ..common.gotls import shared_context
from .addr import format_address

log = logging.getLogger("nsqpy.client")

ACCEPT = "application/vnd.nsq; version=1.0"


def lookup_url(address: str, topic: str) -> str:
    """As go-nsq: add ``http://`` when missing, ``/lookup`` when the path is empty, and the topic."""
    if "://" not in address:
        address = "http://" + address
    parts = urlsplit(address)
    if parts.port is None:
        raise ValueError(f"lookupd address {address!r} has no port")
    path = parts.path if parts.path not in ("", "/") else "/lookup"
    query = parts.query + ("&" if parts.query else "") + urlencode({"topic": topic})
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def producers_from_answer(data: object) -> set[str]:
    """``host:port`` of every producer in a /lookup answer (1.x, or the pre-1.0 envelope)."""
    if not isinstance(data, dict):
        raise ValueError("lookup answer is not an object")
    if "status_code" in data and isinstance(data.get("data"), dict):
        data = data["data"]  # nsqlookupd < 1.0 wrapped answers in {status_code, data}
    assert isinstance(data, dict)
    out: set[str] = set()
    for producer in data.get("producers") or ():
        host = producer.get("broadcast_address") or producer.get("address")
        port = producer.get("tcp_port")
        if host and isinstance(port, int):
            out.add(format_address(host, port))
    return out


class LookupdPoller:
    """Asks every configured nsqlookupd for a topic's producers."""

    def __init__(
        self,
        addresses: list[str],
        topic: str,
        *,
        timeout: float = 60.0,
        auth_secret: str | None = None,
    ) -> None:
        self.urls = [lookup_url(a, topic) for a in addresses]
        self.timeout = timeout
        self._headers = {"Accept": ACCEPT}
        if auth_secret:
            self._headers["Authorization"] = f"Bearer {auth_secret}"
        self._session: aiohttp.ClientSession | None = None

    async def query(self) -> set[str] | None:
        """The union of all answers, or None when no lookupd answered."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout), headers=self._headers,
                connector=aiohttp.TCPConnector(ssl=shared_context()),  # https: as Go verifies
            )
        results = await asyncio.gather(*(self._one(u) for u in self.urls))
        answered = [r for r in results if r is not None]
        if not answered:
            return None
        return set().union(*answered)

    async def _one(self, url: str) -> set[str] | None:
        assert self._session is not None
        try:
            async with self._session.get(url) as resp:
                body = await resp.read()
                if resp.status == 404:
                    return set()
                if resp.status != 200:
                    log.warning("lookupd %s: HTTP %d %s", url, resp.status, body[:200])
                    return None
                return producers_from_answer(orjson.loads(body))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as err:
            log.warning("lookupd %s: %s", url, err or type(err).__name__)
            return None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
