"""Publishing through nsqd's HTTP API from asyncio code (``/pub`` and ``/mpub``).

Useful where only port 4151 is reachable or a TCP connection per publisher is not wanted. The
blocking twins live in :mod:`nsqpy.client.sync`.
"""

from __future__ import annotations

from typing import Sequence
from urllib.parse import urlencode

import aiohttp

from ..common.gotls import shared_context
from .connection import _as_bytes
from .errors import HTTPPublishError
from .sync import Body, _error_message, _http_base, mpub_binary_body


async def _post(session: aiohttp.ClientSession | None, url: str, data: bytes, timeout: float) -> None:
    own = session is None
    if session is None:
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout),
                                        connector=aiohttp.TCPConnector(ssl=shared_context()))
    try:
        async with session.post(url, data=data) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise HTTPPublishError(resp.status, _error_message(body))
    finally:
        if own:
            await session.close()


async def http_pub(
    address: str,
    topic: str,
    body: Body,
    *,
    delay: float | None = None,
    session: aiohttp.ClientSession | None = None,
    timeout: float = 5.0,
) -> None:
    """``POST /pub?topic=T[&defer=ms]``; pass a ``session`` to reuse connections."""
    query = {"topic": topic}
    if delay is not None:
        query["defer"] = str(int(round(delay * 1000)))
    await _post(session, f"{_http_base(address)}/pub?{urlencode(query)}", _as_bytes(body), timeout)


async def http_mpub(
    address: str,
    topic: str,
    bodies: Sequence[Body],
    *,
    session: aiohttp.ClientSession | None = None,
    timeout: float = 5.0,
) -> None:
    """``POST /mpub?topic=T&binary=true`` (binary, so bodies may hold newlines)."""
    if not bodies:
        raise ValueError("mpub needs at least one message")
    url = f"{_http_base(address)}/mpub?{urlencode({'topic': topic, 'binary': 'true'})}"
    await _post(session, url, mpub_binary_body(bodies), timeout)
