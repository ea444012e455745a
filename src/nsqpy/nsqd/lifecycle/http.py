"""HTTP routes of the lifecycle controls (issue #13), registered next to upstream's in http.py.

* ``GET|POST /topic/config?topic=T``, ``GET|POST /channel/config?topic=T&channel=C``: the
  effective settings; POST takes a JSON object of settings to change (``null`` clears one, so it
  inherits again) and answers with the new effective settings.
* ``GET /topic/peek``, ``GET /channel/peek``: see :mod:`peek`.
* ``POST /drain``: see :mod:`drain`.

Errors follow upstream's API: ``{"message": "..."}`` with MISSING_ARG_*/INVALID_* (400),
TOPIC_NOT_FOUND/CHANNEL_NOT_FOUND (404).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from . import config as ec
from ...common.goweb import ApiError, first_value
from .drain import start_drain
from ..http import Route, _empty, _json, _query, _read_bounded
from .peek import MAX_PEEK, STATES, peek_channel, peek_topic

if TYPE_CHECKING:
    from ..http import HttpApi

MAX_CONFIG_BODY = 1 << 16


async def _read_update(request: web.Request) -> dict:
    body = await _read_bounded(request, MAX_CONFIG_BODY + 1)
    if len(body) > MAX_CONFIG_BODY:
        raise ApiError(413, "BODY_TOO_BIG")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ApiError(400, "INVALID_BODY") from None
    try:
        return ec.parse_update(doc)
    except ec.ConfigError as err:
        raise ApiError(400, err.message) from None


def _peek_args(request: web.Request) -> tuple[int, str | None]:
    query = _query(request)
    raw_n = first_value(query, "n")
    n = 10
    if raw_n is not None:
        if not raw_n.isdigit() or not 1 <= int(raw_n) <= MAX_PEEK:
            raise ApiError(400, "INVALID_ARG_N")
        n = int(raw_n)
    state = first_value(query, "state")
    if state is not None and state not in STATES:
        raise ApiError(400, "INVALID_ARG_STATE")
    return n, state


def lifecycle_routes(api: "HttpApi") -> list[Route]:
    """The routes, as closures over the API object (its argument helpers and persistence)."""

    async def configure(request: web.Request, owner, apply, effective) -> web.Response:
        if request.method == "POST":
            update = await _read_update(request)
            owner.config = ec.merged(owner.config, update)
            apply(owner)
            api._persist_metadata()  # at once, so a crash cannot undo an acknowledged change
        return _json(ec.render(effective(owner)))

    async def topic_config(request: web.Request, _: str) -> web.Response:
        topic = api._existing_topic(api._topic_arg(_query(request)))
        return await configure(request, topic, ec.apply_topic, ec.effective_topic)

    async def channel_config(request: web.Request, _: str) -> web.Response:
        topic, name = api._topic_and_channel_args(request)
        channel = api._existing_channel(topic, name)
        return await configure(request, channel, ec.apply_channel, ec.effective_channel)

    async def topic_peek(request: web.Request, _: str) -> web.Response:
        topic = api._existing_topic(api._topic_arg(_query(request)))
        n, state = _peek_args(request)
        return _json(peek_topic(topic, n, state))

    async def channel_peek(request: web.Request, _: str) -> web.Response:
        topic, name = api._topic_and_channel_args(request)
        channel = api._existing_channel(topic, name)
        n, state = _peek_args(request)
        return _json(peek_channel(channel, n, state))

    async def drain(request: web.Request, _: str) -> web.Response:
        if api.nsqd.exiting:
            raise ApiError(503, "EXITING")
        start_drain(api.nsqd)
        return _empty()

    return [
        Route("GET", "/topic/config", topic_config),
        Route("POST", "/topic/config", topic_config),
        Route("GET", "/channel/config", channel_config),
        Route("POST", "/channel/config", channel_config),
        Route("GET", "/topic/peek", topic_peek),
        Route("GET", "/channel/peek", channel_peek),
        Route("POST", "/drain", drain),
    ]
