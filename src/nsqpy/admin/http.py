"""nsqadmin's HTTP server: the JSON API (reference §4.3), the single-page UI and ``/config``.

Routes, status codes and ``{"message": ...}`` texts follow upstream's ``nsqadmin/http.go``. Every
route lives under ``--base-path``. Routing is method-strict as with upstream's httprouter: a path
that exists for another method gets 405 ``METHOD_NOT_ALLOWED`` with ``Allow``, a path differing
by a trailing slash, case or ``//``/``..`` is redirected, anything else is 404 ``NOT_FOUND``
(the shared :mod:`nsqpy.common.router`). Responses are
compressed when the client accepts gzip or deflate (upstream's ``CompressHandler``).

The UI is plain HTML/CSS/JS from ``static/``; ``index.html`` gets the base path and whether the
requester is an admin (so it can hide the action buttons), as upstream's template does.
"""

from __future__ import annotations

import ipaddress
import logging
import mimetypes
import posixpath
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import hdrs, web

from .. import NSQ_COMPAT_VERSION
from ..common.flags import format_duration
from ..common.router import Router, unrouted_response
from ..common.log import parse_level, set_level
from ..protocol.gojson import GoJSONError, decode_strings
from ..common.goweb import ApiError, go_json
from ..common.prometheus import http_response as metrics_response
from ..protocol.names import is_valid_name
from .body import decode_body
from .clusterinfo import ClusterInfo, UpstreamError, qs_escape
from .graphite import Graphite
from .live import LiveSampler, live_document
from .metrics import render as render_metrics
from .notify import Notifier, action_document, remote_addr
from .options import Options, config_flags, config_value
from .respond import V1_HEADERS, v1_error, v1_response, warn_message
from .stats import Producer, TopicStats, sort_clients_by_node_topology

STATIC_DIR = Path(__file__).parent / "static"
ACTIONS = ("pause", "unpause", "empty")


# --- routing -----------------------------------------------------------------------------------

Handler = Callable[[web.Request, dict[str, str]], Awaitable[web.StreamResponse]]


# --- the server --------------------------------------------------------------------------------

class HTTPServer:
    """The routes over what the daemon built and hands in: the options (one object, changed in
    place by ``PUT /config``), the logger, the cluster client, the graphite side, the
    notifier and, with ``--live-interval``, the live sampler."""

    def __init__(self, opts: Options, logger: logging.Logger, ci: ClusterInfo,
                 graphite: Graphite, notifier: Notifier, live: LiveSampler | None) -> None:
        self.opts = opts
        self.logger = logger
        self.ci = ci
        self.graphite = graphite
        self.notifier = notifier
        self.live = live
        self.router: Router[Handler] = Router()  # the shared httprouter (common/router.py)
        self.lookupd_null = False  # PUT /config/nsqlookupd_http_addresses null
        bp = self.bp
        r = self.router.add
        for page in ("/", "/topics", "/topics/:topic", "/topics/:topic/:channel", "/nodes",
                     "/nodes/:node", "/counter", "/lookup"):
            r("GET", bp(page), self.index)
        r("GET", bp("/ping"), self.ping)
        r("GET", bp("/static/:asset"), self.static_asset)
        r("GET", bp("/fonts/:asset"), self.static_asset)
        r("GET", bp("/api/topics"), self.topics)
        r("GET", bp("/api/topics/:topic"), self.topic)
        r("GET", bp("/api/topics/:topic/:channel"), self.channel)
        r("GET", bp("/api/nodes"), self.nodes)
        r("GET", bp("/api/nodes/:node"), self.node)
        r("POST", bp("/api/topics"), self.create_topic_channel)
        r("POST", bp("/api/topics/:topic"), self.topic_action)
        r("POST", bp("/api/topics/:topic/:channel"), self.channel_action)
        r("DELETE", bp("/api/nodes/:node"), self.tombstone_node_for_topic)
        r("DELETE", bp("/api/topics/:topic"), self.delete_topic)
        r("DELETE", bp("/api/topics/:topic/:channel"), self.delete_channel)
        r("GET", bp("/api/counter"), self.counter)
        r("GET", bp("/api/history/:topic"), self.rewind_preview)  # nsqpy: nsqd's history
        r("GET", bp("/api/graphite"), self.graphite.rate)
        if live is not None:
            r("GET", bp("/api/live"), self.live_api)
        if self.opts.proxy_graphite:
            r("GET", bp("/render"), self.graphite.render)
        r("GET", bp("/config/:opt"), self.config)
        r("PUT", bp("/config/:opt"), self.config)
        if self.opts.metrics:
            r("GET", bp("/metrics"), self.metrics)

    def bp(self, p: str) -> str:
        """Go's ``path.Join(basePath, p)``."""
        return posixpath.normpath(posixpath.join(self.opts.base_path, p.lstrip("/"))) \
            if p != "/" else self.opts.base_path

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        method, path = request.method, request.path
        hit = self.router.match(method, path)
        if hit is not None:
            handler, params = hit
            try:
                response = await handler(request, params)
            except ApiError as err:
                response = v1_error(err.status, err.message)
            except Exception as err:  # upstream's panic handler
                self.logger.exception("panic in HTTP handler - %s", err)
                response = v1_error(500, "INTERNAL_ERROR")
        else:
            response = unrouted_response(self.router, request, v1_error)
        self.logger.info("%d %s %s (%s) %s", response.status, method, request.raw_path,
                         remote_addr(request), format_duration(time.perf_counter() - start))
        if isinstance(response, web.Response) and response.body:
            accept = request.headers.get(hdrs.ACCEPT_ENCODING, "").lower()
            if "gzip" in accept or "deflate" in accept:
                response.enable_compression()
        return response

    # --- helpers -------------------------------------------------------------------------------

    def is_admin(self, request: web.Request) -> bool:
        users = self.opts.admin_user
        if not users:
            return True
        return request.headers.get(self.opts.acl_http_header, "") in users

    def require_admin(self, request: web.Request) -> None:
        if not self.is_admin(request):
            raise ApiError(403, "FORBIDDEN")

    def upstream_failed(self, what: str, err: UpstreamError) -> ApiError:
        self.logger.error("failed to %s - %s", what, err)
        return ApiError(502, f"UPSTREAM_ERROR: {err}")

    def partial(self, messages: list[str], errors: list[str]) -> None:
        if errors:
            text = "\n".join(errors)
            self.logger.warning("%s", text)
            messages.append(text)

    def notify(self, action: str, topic: str, channel: str, node: str,
               request: web.Request) -> None:
        if self.opts.notification_http_endpoint:
            self.notifier.send(action_document(action, topic, channel, node, request))

    # --- pages ---------------------------------------------------------------------------------

    async def index(self, request: web.Request, _: dict[str, str]) -> web.Response:
        page = self._read_asset("index.html")
        if page is None:
            raise ApiError(500, "INTERNAL_ERROR")
        base = self.opts.base_path
        config = {
            "version": NSQ_COMPAT_VERSION,
            "basePath": base,
            "isAdmin": self.is_admin(request),
            "nsqlookupd": list(self.opts.lookupd_http_address),
            "nsqd": list(self.opts.nsqd_http_address),
            # upstream's template variables for its graphite graphs
            "graphEnabled": bool(self.opts.graphite_url),
            "graphiteUrl": "" if self.opts.proxy_graphite else self.opts.graphite_url,
            "proxyGraphite": self.opts.proxy_graphite,
            "statsdInterval": int(self.opts.statsd_interval),
            "statsdCounterFormat": self.opts.statsd_counter_format,
            "statsdGaugeFormat": self.opts.statsd_gauge_format,
            "statsdPrefix": self.opts.statsd_prefix,
            "liveInterval": self.opts.live_interval,
        }
        html = (page.decode("utf-8")
                .replace("{{STATIC}}", self.bp("/static"))
                .replace("{{CONFIG_JSON}}", go_json(config).decode()))
        return web.Response(text=html, content_type="text/html", charset="utf-8")

    async def ping(self, request: web.Request, _: dict[str, str]) -> web.Response:
        return web.Response(text="OK")

    def _read_asset(self, name: str) -> bytes | None:
        if not name or name.startswith(".") or "/" in name or "\\" in name:
            return None
        base = Path(self.opts.dev_static_dir) if self.opts.dev_static_dir else STATIC_DIR
        try:
            return (base / name).read_bytes()
        except OSError:
            return None

    async def static_asset(self, request: web.Request, params: dict[str, str]) -> web.Response:
        name = params["asset"]
        data = self._read_asset(name)
        if data is None:  # upstream's PlainText decorator: the bare text, sniffed as text/plain
            return web.Response(status=404, body=b"NOT_FOUND",
                                headers={"Content-Type": "text/plain; charset=utf-8"})
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype in ("application/javascript", "text/javascript"):
            ctype += "; charset=utf-8"
        return web.Response(body=data, headers={"Content-Type": ctype})

    # --- read API ------------------------------------------------------------------------------

    async def topics(self, request: web.Request, _: dict[str, str]) -> web.Response:
        messages: list[str] = []
        opts = self.opts
        try:
            if opts.lookupd_http_address:
                found = await self.ci.lookupd_topics(opts.lookupd_http_address)
            else:
                found = await self.ci.nsqd_topics(opts.nsqd_http_address)
        except UpstreamError as err:
            raise self.upstream_failed("get topics", err) from None
        self.partial(messages, found.errors)
        if request.query.get("inactive") == "true":
            inactive: dict[str, list[str] | None] = {}
            if opts.lookupd_http_address:
                for name in found.value or ():
                    try:
                        producers = await self.ci.lookupd_topic_producers(
                            name, opts.lookupd_http_address)
                        if producers.value:
                            continue
                    except UpstreamError:
                        pass
                    try:
                        channels = (await self.ci.lookupd_topic_channels(
                            name, opts.lookupd_http_address)).value
                    except UpstreamError:
                        channels = None
                    inactive[name] = channels
            return v1_response({"topics": dict(sorted(inactive.items())),
                                "message": warn_message(messages)})
        return v1_response({"topics": found.value, "message": warn_message(messages)})

    async def _topic_producers(self, topic: str, messages: list[str]) -> list[Producer]:
        opts = self.opts
        try:
            found = await self.ci.topic_producers(topic, opts.lookupd_http_address,
                                                  opts.nsqd_http_address)
        except UpstreamError as err:
            raise self.upstream_failed("get topic producers", err) from None
        self.partial(messages, found.errors)
        producers: list[Producer] = found.value
        return producers

    async def topic(self, request: web.Request, params: dict[str, str]) -> web.Response:
        messages: list[str] = []
        name = params["topic"]
        producers = await self._topic_producers(name, messages)
        try:
            stats = await self.ci.nsqd_stats(producers, name, "", include_clients=False)
        except UpstreamError as err:
            raise self.upstream_failed("get topic metadata", err) from None
        self.partial(messages, stats.errors)
        total = TopicStats("", "", name)
        for ts in stats.value[0]:
            total.add(ts)
        return v1_response({**total.to_json(), "message": warn_message(messages)})

    async def channel(self, request: web.Request, params: dict[str, str]) -> web.Response:
        messages: list[str] = []
        topic, channel = params["topic"], params["channel"]
        producers = await self._topic_producers(topic, messages)
        try:
            stats = await self.ci.nsqd_stats(producers, topic, channel, include_clients=True)
        except UpstreamError as err:
            raise self.upstream_failed("get channel metadata", err) from None
        self.partial(messages, stats.errors)
        agg = stats.value[1].get(channel)
        if agg is None:
            # upstream embeds a nil *ChannelStats: Go's encoder leaves its fields out
            return v1_response({"message": warn_message(messages)})
        if agg.clients:
            agg.clients = sort_clients_by_node_topology(agg.clients)
        return v1_response({**agg.to_json(), "message": warn_message(messages)})

    async def _producers(self, messages: list[str], what: str) -> list[Producer]:
        try:
            found = await self.ci.producers(self.opts.lookupd_http_address,
                                            self.opts.nsqd_http_address)
        except UpstreamError as err:
            raise self.upstream_failed(what, err) from None
        self.partial(messages, found.errors)
        producers: list[Producer] = found.value
        return producers

    async def nodes(self, request: web.Request, _: dict[str, str]) -> web.Response:
        messages: list[str] = []
        producers = await self._producers(messages, "get nodes")
        return v1_response({"nodes": [p.to_json() for p in producers],
                            "message": warn_message(messages)})

    async def node(self, request: web.Request, params: dict[str, str]) -> web.Response:
        messages: list[str] = []
        node = params["node"]
        producers = await self._producers(messages, "get producers")
        producer = next((p for p in producers if p.http_address == node), None)
        if producer is None:
            raise ApiError(404, "NODE_NOT_FOUND")
        try:
            stats = await self.ci.nsqd_stats([producer], "", "", include_clients=True)
        except UpstreamError as err:
            self.logger.error("failed to get nsqd stats - %s", err)
            raise ApiError(502, f"UPSTREAM_ERROR: {err}") from None
        topics = stats.value[0]
        total_clients = sum(len(cs.clients or ()) for ts in topics for cs in ts.channels or ())
        total_messages = sum(ts.counts["message_count"] for ts in topics)
        return v1_response({"node": node, "topics": [t.to_json() for t in topics] or None,
                            "total_messages": total_messages, "total_clients": total_clients,
                            **stats.replication.get(node, {}),  # nsqpy replication, if on
                            "message": warn_message(messages)})

    async def counter(self, request: web.Request, _: dict[str, str]) -> web.Response:
        messages: list[str] = []
        producers = await self._producers(messages, "get counter producer list")
        try:
            stats = await self.ci.nsqd_stats(producers, "", "", include_clients=False)
        except UpstreamError as err:
            raise self.upstream_failed("get nsqd stats", err) from None
        self.partial(messages, stats.errors)
        out: dict[str, dict[str, Any]] = {}
        for agg in stats.value[1].values():
            for ns in agg.nodes or ():
                key = f"{agg.topic_name}:{agg.channel_name}:{ns.node}"
                entry = out.setdefault(key, {"node": ns.node, "topic_name": agg.topic_name,
                                             "channel_name": agg.channel_name,
                                             "message_count": 0})
                entry["message_count"] += ns.counts["message_count"]
        return v1_response({"stats": dict(sorted(out.items())),
                            "message": warn_message(messages)})

    async def live_api(self, request: web.Request, _: dict[str, str]) -> web.Response:
        assert self.live is not None  # routed only with --live-interval
        return v1_response(live_document(self.live, request.query))

    async def metrics(self, request: web.Request, _: dict[str, str]) -> web.Response:
        return metrics_response(await render_metrics(self.opts, self.ci))

    # --- admin actions -------------------------------------------------------------------------

    async def _body(self, request: web.Request, fields: tuple[str, ...]) -> dict[str, str]:
        try:
            return decode_body(await request.read(), fields)
        except ValueError as err:
            raise ApiError(400, str(err)) from None

    def _done(self, messages: list[str], errors: list[str]) -> web.Response:
        self.partial(messages, errors)
        return v1_response({"message": warn_message(messages)})

    async def create_topic_channel(self, request: web.Request, _: dict[str, str]) -> web.Response:
        self.require_admin(request)
        body = await self._body(request, ("topic", "channel"))
        topic, channel = body["topic"], body["channel"]
        if not is_valid_name(topic):
            raise ApiError(400, "INVALID_TOPIC")
        if channel and not is_valid_name(channel):
            raise ApiError(400, "INVALID_CHANNEL")
        try:
            errors = await self.ci.create_topic_channel(topic, channel,
                                                        self.opts.lookupd_http_address)
        except UpstreamError as err:
            raise self.upstream_failed("create topic/channel", err) from None
        self.notify("create_topic", topic, "", "", request)
        if channel:
            self.notify("create_channel", topic, channel, "", request)
        return self._done([], errors)

    async def topic_action(self, request: web.Request, params: dict[str, str]) -> web.Response:
        return await self._action(request, params["topic"], "")

    async def channel_action(self, request: web.Request, params: dict[str, str]) -> web.Response:
        return await self._action(request, params["topic"], params["channel"])

    async def _action(self, request: web.Request, topic: str, channel: str) -> web.Response:
        self.require_admin(request)
        action, extra = (await self._body(request, ("action",)))["action"], ""
        if action == "rewind" and channel:  # nsqd's history (docs/history.md): point it at `to`
            to = (await self._body(request, ("action", "to")))["to"]
            if not to:
                raise ApiError(400, "MISSING_ARG_TO")
            extra = f"&to={qs_escape(to)}"
        elif action not in ACTIONS:
            raise ApiError(400, "INVALID_ACTION")
        try:
            errors = await self.ci.topic_channel_action(
                topic, channel, action, self.opts.lookupd_http_address,
                self.opts.nsqd_http_address, extra)
        except UpstreamError as err:
            self.notify(f"{action}_{'channel' if channel else 'topic'}", topic, channel, "",
                        request)
            self.logger.error("failed to %s topic/channel - %s", action, err)
            raise ApiError(502, f"UPSTREAM_ERROR: {err}") from None
        # upstream notifies once the action was attempted, whatever its outcome
        self.notify(f"{action}_{'channel' if channel else 'topic'}", topic, channel, "", request)
        return self._done([], errors)

    async def rewind_preview(self, request: web.Request, params: dict[str, str]) -> web.Response:
        """What rewinding a channel of the topic to ``from`` would replay, summed over its nsqd
        (:mod:`.rewind`): the channel page's confirmation says it before anything moves."""
        from .rewind import format_point, parse_rewind_point, summary

        try:
            point = parse_rewind_point(request.query.get("from", "earliest"))
        except ValueError as err:
            raise ApiError(400, f"INVALID_FROM: {err}") from None
        messages: list[str] = []
        producers = await self._topic_producers(params["topic"], messages)
        try:
            found = await self.ci.history_segments(producers, params["topic"], format_point(point))
        except UpstreamError as err:
            raise self.upstream_failed("get topic history", err) from None
        self.partial(messages, found.errors)
        return v1_response({**summary(point, found.value), "message": warn_message(messages)})

    async def delete_topic(self, request: web.Request, params: dict[str, str]) -> web.Response:
        self.require_admin(request)
        topic = params["topic"]
        try:
            errors = await self.ci.delete_topic(topic, self.opts.lookupd_http_address,
                                                self.opts.nsqd_http_address)
        except UpstreamError as err:
            raise self.upstream_failed("delete topic", err) from None
        self.notify("delete_topic", topic, "", "", request)
        return self._done([], errors)

    async def delete_channel(self, request: web.Request, params: dict[str, str]) -> web.Response:
        self.require_admin(request)
        topic, channel = params["topic"], params["channel"]
        try:
            errors = await self.ci.delete_channel(topic, channel, self.opts.lookupd_http_address,
                                                  self.opts.nsqd_http_address)
        except UpstreamError as err:
            raise self.upstream_failed("delete channel", err) from None
        self.notify("delete_channel", topic, channel, "", request)
        return self._done([], errors)

    async def tombstone_node_for_topic(self, request: web.Request, params: dict[str, str]) -> web.Response:
        self.require_admin(request)
        node = params["node"]
        try:
            topic = decode_body(await request.read(), ("topic",))["topic"]
        except ValueError:
            raise ApiError(400, "INVALID_BODY") from None
        if not is_valid_name(topic):
            raise ApiError(400, "INVALID_TOPIC")
        try:
            errors = await self.ci.tombstone_node_for_topic(topic, node,
                                                            self.opts.lookupd_http_address)
        except UpstreamError as err:
            raise self.upstream_failed("tombstone node for topic", err) from None
        self.notify("tombstone_topic_producer", topic, "", node, request)
        return self._done([], errors)

    # --- /config -------------------------------------------------------------------------------

    def _config_allowed(self, request: web.Request) -> None:
        cidr = self.opts.allow_config_from_cidr
        if not cidr:
            return
        peer = request.transport.get_extra_info("peername") if request.transport else None
        try:
            ip = ipaddress.ip_address(peer[0].split("%")[0]) if peer else None
        except ValueError:
            ip = None
        if ip is None:
            self.logger.error("failed to parse RemoteAddr %s", remote_addr(request))
            raise ApiError(400, "INVALID_REMOTE_ADDR")
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if ip not in ipaddress.ip_network(cidr, strict=False):
            raise ApiError(403, "FORBIDDEN")

    async def config(self, request: web.Request, params: dict[str, str]) -> web.Response:
        opt = params["opt"]
        self._config_allowed(request)
        opts = self.opts
        if request.method == "PUT":
            read_max = 1024 * 1024 + 1
            body = b""
            while len(body) < read_max:
                chunk = await request.content.read(read_max - len(body))
                if not chunk:
                    break
                body += chunk
            if len(body) == read_max or not body:
                raise ApiError(413, "INVALID_VALUE")
            if opt == "nsqlookupd_http_addresses":
                try:  # Go's json.Unmarshal into a []string
                    addrs = decode_strings(body)
                except GoJSONError:
                    raise ApiError(400, "INVALID_VALUE") from None
                # Go stores JSON null as a nil list: no lookupd, answered as null
                self.lookupd_null = addrs is None
                opts.lookupd_http_address = addrs or []
            elif opt == "log_level":
                try:
                    level = parse_level(body.decode("utf-8", "replace"))
                except ValueError:
                    raise ApiError(400, "INVALID_VALUE") from None
                opts.log_level = level
                set_level(self.logger, level)
            else:
                raise ApiError(400, "INVALID_OPTION")
        flag = config_flags().get(opt)
        if flag is None:
            raise ApiError(400, "INVALID_OPTION")
        value = config_value(opts, flag)
        if opt == "nsqlookupd_http_addresses" and self.lookupd_null:
            value = None
        if isinstance(value, str):
            # upstream's RespondV1 writes a string as is; Go sniffs text/plain unless empty
            headers = dict(V1_HEADERS)
            if value:
                headers["Content-Type"] = "text/plain; charset=utf-8"
            return web.Response(body=value.encode(), headers=headers)
        return v1_response(value)
