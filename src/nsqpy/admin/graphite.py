"""nsqadmin's Graphite side, as upstream: ``GET /api/graphite`` (one rate) and the ``/render`` proxy.

Upstream's pages draw graphite images straight from ``--graphite-url`` (or, with
``--proxy-graphite``, through nsqadmin's own ``/render`` so the browser needs no route to graphite
and credentials in the URL stay on the server). ``/api/graphite?metric=rate&target=T`` asks graphite
for the counter ``T`` over the last full statsd interval and answers it per second, which is what
the pages' rate columns show. Graphite keys are built the way nsqd's statsd client names them
(``--statsd-prefix``, ``--statsd-counter-format``, ``--statsd-gauge-format``).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
from aiohttp import web

from ..common.goweb import ApiError
from .respond import v1_response
from .v1client import RequestError, V1Client

#: request headers a reverse proxy must not forward (RFC 7230 §6.1, as Go's ReverseProxy)
HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host"}


def render_query(target: str, interval_s: int) -> str:
    """The query upstream's rate handler sends: Go's ``url.Values.Encode`` sorts the keys."""
    params = {"format": "json", "from": f"-{interval_s * 2}sec", "target": target,
              "until": f"-{interval_s}sec"}
    return urlencode(sorted(params.items()))


def rate_from_render(doc: object, interval_s: int) -> str:
    """``"12.34"`` per second from graphite's JSON, ``"N/A"`` for a negative value.

    ValueError where upstream's handler would panic (no series, no point, a null value)."""
    try:
        value = doc[0]["datapoints"][0][0]  # type: ignore[index]
    except (LookupError, TypeError):
        raise ValueError("graphite returned no datapoint") from None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError("graphite returned a null datapoint")
    if value < 0:
        return "N/A"
    return f"{value / interval_s:.2f}"


class Graphite:
    """The two graphite routes; options are read per request (``PUT /config`` swaps them)."""

    def __init__(self, opts: Any, logger: logging.Logger, client: V1Client) -> None:
        self.opts = opts
        self.logger = logger
        self.client = client  # rates: the API client, with --http-client-tls-* (as upstream)

    async def rate(self, request: web.Request, _: dict[str, str]) -> web.Response:
        query = request.query
        if query.get("metric") != "rate":
            raise ApiError(400, "INVALID_ARG_METRIC")
        if "target" not in query:
            raise ApiError(400, "INVALID_ARG_TARGET")
        opts = self.opts
        interval_s = int(opts.statsd_interval)
        url = opts.graphite_url + "/render?" + render_query(query["target"], interval_s)
        logger = self.logger
        logger.info("GRAPHITE: %s", url)
        try:
            doc = await self.client.get_v1(url)
            rate = rate_from_render(doc, max(interval_s, 1))
        except (RequestError, ValueError) as err:
            logger.error("graphite request failed - %s", err)
            raise ApiError(500, "INTERNAL_ERROR") from None
        return v1_response({"rate": rate})

    async def render(self, request: web.Request, _: dict[str, str]) -> web.StreamResponse:
        """``--proxy-graphite``: the request goes to graphite's host with its path and query
        unchanged; user:password in ``--graphite-url`` becomes basic auth."""
        opts = self.opts
        target = urlsplit(opts.graphite_url)
        url = f"{target.scheme}://{target.hostname}"
        if target.port:
            url += f":{target.port}"
        url += request.rel_url.raw_path
        if request.rel_url.raw_query_string:
            url += "?" + request.rel_url.raw_query_string
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            prior = request.headers.get("X-Forwarded-For")
            headers["X-Forwarded-For"] = f"{prior}, {peer[0]}" if prior else peer[0]
        auth = None
        if target.username is not None:
            auth = aiohttp.BasicAuth(target.username, target.password or "")
            headers.pop("Authorization", None)
        # the proxy: a plain client, without the API client's TLS settings (as upstream)
        session = self.client.session
        try:
            async with session.get(url, headers=headers, auth=auth,
                                   allow_redirects=False) as resp:
                body = await resp.read()
                out = web.Response(status=resp.status, body=body)
                for key, value in resp.headers.items():
                    if key.lower() not in HOP_BY_HOP | {"content-length", "content-encoding"}:
                        out.headers.add(key, value)
                return out
        except (aiohttp.ClientError, TimeoutError) as err:
            # Go's ReverseProxy logs and answers 502 with an empty body
            self.logger.error("http: proxy error: %s", err)
            return web.Response(status=502)
