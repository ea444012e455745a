"""nsqlookupd's HTTP API on aiohttp (reference §3.4, conventions §1.4).

Upstream routes with ``julienschmidt/httprouter`` v1.3.0, which is method-strict; one catch-all
aiohttp route feeds the shared :mod:`nsqpy.common.router`, which decides as httprouter does
(redirects, ``OPTIONS``, 405 with ``Allow``, 404). Query strings are parsed as
Go's ``url.ParseQuery`` (a bad escape or a ``;`` → 400 ``INVALID_REQUEST``; first value wins).

The ``/debug/pprof`` family is Go-runtime specific and is not served (404).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import orjson
from aiohttp import web

from .. import NSQ_COMPAT_VERSION
from ..common.addr import join_host_port
from ..common.goweb import ApiError, first_value, go_json, parse_query, topic_channel_args
from ..common.router import Router, unrouted_response
from ..common.flags import format_duration
from ..protocol.names import is_valid_name
from .metrics import routes as metrics_routes
from .registration_db import GO_ZERO_TIME_UNIX_NANO, PeerInfo, filter_active, keys, subkeys

if TYPE_CHECKING:
    from .main import NSQLookupd

V1_HEADER = "X-NSQ-Content-Type"
V1_VALUE = "nsq; version=1.0"
JSON_TYPE = "application/json; charset=utf-8"


def peer_json(peer: PeerInfo) -> bytes:
    """A producer's ``PeerInfo`` JSON, encoded once per peer."""
    data = peer.json
    if data is None:
        data = peer.json = go_json(peer.to_json())
    return data


def _params(request: web.Request) -> dict[str, list[str]]:
    try:
        return parse_query(request.rel_url.raw_query_string)
    except ValueError:
        raise ApiError(400, "INVALID_REQUEST") from None


# --- the server ---------------------------------------------------------------------------------

Handler = Callable[[web.Request], Any]
_PLAIN, _V1 = 0, 1


class HTTPServer:
    def __init__(self, lookupd: "NSQLookupd") -> None:
        self.lookupd = lookupd
        self.db = lookupd.db
        self.logger = lookupd.logger
        self.router: Router[tuple[Handler, int]] = Router()
        for method, path, handler, kind in (
            ("GET", "/ping", self.ping, _PLAIN),
            ("GET", "/info", self.info, _V1),
            ("GET", "/debug", self.debug, _V1),
            ("GET", "/lookup", self.lookup, _V1),
            ("GET", "/topics", self.topics, _V1),
            ("GET", "/channels", self.channels, _V1),
            ("GET", "/nodes", self.nodes, _V1),
            ("POST", "/topic/create", self.create_topic, _V1),
            ("POST", "/topic/delete", self.delete_topic, _V1),
            ("POST", "/channel/create", self.create_channel, _V1),
            ("POST", "/channel/delete", self.delete_channel, _V1),
            ("POST", "/topic/tombstone", self.tombstone_topic_producer, _V1),
            *metrics_routes(lookupd, _PLAIN),
        ):
            self.router.add(method, path, (handler, kind))
        self._info_body = go_json({"version": NSQ_COMPAT_VERSION})

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    # --- routing --------------------------------------------------------------------------------

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        method = request.method
        path = request.path
        hit = self.router.match(method, path)
        if hit is not None:
            response = self._call(hit[0], request)
        else:
            response = unrouted_response(self.router, request, v1_error)
        if self.lookupd.log_info:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            remote = f"{peer[0]}:{peer[1]}" if peer else "?"
            self.logger.info("%d %s %s (%s) %s", response.status, method, request.raw_path,
                             remote, format_duration(time.perf_counter() - start))
        return response

    def _call(self, entry: tuple[Handler, int], request: web.Request) -> web.Response:
        handler, kind = entry
        try:
            data = handler(request)
        except ApiError as err:
            return v1_error(err.status, err.message)
        except Exception as err:  # upstream's PanicHandler
            self.logger.error("panic in HTTP handler - %s", err)
            return v1_error(500, "INTERNAL_ERROR")
        if kind == _PLAIN:
            return web.Response(body=data, headers={"Content-Type": "text/plain; charset=utf-8"})
        if data is None:
            return web.Response(headers={V1_HEADER: V1_VALUE})
        return web.Response(body=data, headers={V1_HEADER: V1_VALUE, "Content-Type": JSON_TYPE})

    # --- handlers: return bytes (JSON) / None (empty 200) or raise ApiError -------------------

    def ping(self, request: web.Request) -> bytes:
        return b"OK"

    def info(self, request: web.Request) -> bytes:
        return self._info_body

    def topics(self, request: web.Request) -> bytes:
        return go_json({"topics": keys(self.db.find_registrations("topic", "*", ""))})

    def channels(self, request: web.Request) -> bytes:
        params = _params(request)
        topic = first_value(params, "topic")
        if topic is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        return go_json({"channels": subkeys(self.db.find_registrations("channel", topic, "*"))})

    def lookup(self, request: web.Request) -> bytes:
        params = _params(request)
        topic = first_value(params, "topic")
        if topic is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        db = self.db
        if not db.find_registrations("topic", topic, ""):
            raise ApiError(404, "TOPIC_NOT_FOUND")
        lookupd = self.lookupd
        channels = subkeys(db.find_registrations("channel", topic, "*"))
        producers = filter_active(db.find_producers("topic", topic, ""),
                                  lookupd.inactive_timeout_ns, lookupd.tombstone_lifetime_ns)
        # {"channels":[...],"producers":[...]} assembled from each peer's cached encoding
        return b'{"channels":%s,"producers":[%s]}' % (
            orjson.dumps(channels), b",".join([peer_json(p.peer) for p in producers]))

    def nodes(self, request: web.Request) -> bytes:
        db = self.db
        lookupd = self.lookupd
        now = time.time_ns()
        lifetime = lookupd.tombstone_lifetime_ns
        # tombstoned producers are listed (lifetime 0), with their tombstones per topic
        producers = filter_active(db.find_producers("client", "", ""),
                                  lookupd.inactive_timeout_ns, 0, now)
        nodes = []
        for p in producers:
            peer = p.peer
            memberships = db.topic_memberships(peer.id)
            topics = [topic for topic, _ in memberships]
            tombstones = [tp.tombstoned and now - tp.tombstoned_at < lifetime
                          for _, tp in memberships]
            # a node is the PeerInfo fields followed by "tombstones" and "topics" (valid names
            # never need Go's HTML escaping)
            nodes.append(b'%s,"tombstones":%s,"topics":%s}' % (
                peer_json(peer)[:-1], orjson.dumps(tombstones), orjson.dumps(topics)))
        return b'{"producers":[%s]}' % b",".join(nodes)

    def debug(self, request: web.Request) -> bytes:
        data: dict[str, list[dict[str, Any]]] = {}
        for reg, producers in self.db.items():
            if not producers:
                continue  # upstream only creates a key when appending a producer
            data[f"{reg[0]}:{reg[1]}:{reg[2]}"] = [
                {
                    "id": p.peer.id,
                    "hostname": p.peer.hostname,
                    "broadcast_address": p.peer.broadcast_address,
                    "tcp_port": p.peer.tcp_port,
                    "http_port": p.peer.http_port,
                    "version": p.peer.version,
                    **p.peer.topology(),
                    "last_update": p.peer.last_update,
                    "tombstoned": p.tombstoned,
                    "tombstoned_at": p.tombstoned_at if p.tombstoned else GO_ZERO_TIME_UNIX_NANO,
                }
                for p in producers.values()
            ]
        return go_json(data, sort_keys=True)

    def create_topic(self, request: web.Request) -> None:
        params = _params(request)
        topic = first_value(params, "topic")
        if topic is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(topic):
            raise ApiError(400, "INVALID_ARG_TOPIC")
        self.logger.info("DB: adding topic(%s)", topic)
        self.db.add_registration(("topic", topic, ""))

    def delete_topic(self, request: web.Request) -> None:
        params = _params(request)
        topic = first_value(params, "topic")
        if topic is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        db = self.db
        for reg in db.find_registrations("channel", topic, "*"):
            self.logger.info("DB: removing channel(%s) from topic(%s)", reg[2], topic)
            db.remove_registration(reg)
        for reg in db.find_registrations("topic", topic, ""):
            self.logger.info("DB: removing topic(%s)", topic)
            db.remove_registration(reg)

    def tombstone_topic_producer(self, request: web.Request) -> None:
        params = _params(request)
        topic = first_value(params, "topic")
        if topic is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        node = first_value(params, "node")
        if node is None:
            raise ApiError(400, "MISSING_ARG_NODE")
        self.logger.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
        now = time.time_ns()
        for p in self.db.find_producers("topic", topic, ""):
            # upstream compares "%s:%d"; nsqadmin sends "[v6]:port" for an IPv6 nsqd, so
            # that form is matched too (upstream would never tombstone it)
            if node in (f"{p.peer.broadcast_address}:{p.peer.http_port}",
                        join_host_port(p.peer.broadcast_address, p.peer.http_port)):
                p.tombstone(now)

    def create_channel(self, request: web.Request) -> None:
        topic, channel = topic_channel_args(_params(request))
        self.logger.info("DB: adding channel(%s) in topic(%s)", channel, topic)
        self.db.add_registration(("channel", topic, channel))
        self.logger.info("DB: adding topic(%s)", topic)
        self.db.add_registration(("topic", topic, ""))

    def delete_channel(self, request: web.Request) -> None:
        topic, channel = topic_channel_args(_params(request))
        regs = self.db.find_registrations("channel", topic, channel)
        if not regs:
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        self.logger.info("DB: removing channel(%s) from topic(%s)", channel, topic)
        for reg in regs:
            self.db.remove_registration(reg)


def v1_error(code: int, text: str) -> web.Response:
    return web.Response(status=code, body=go_json({"message": text}),
                        headers={V1_HEADER: V1_VALUE, "Content-Type": JSON_TYPE})
