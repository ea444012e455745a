"""nsqlookupd's HTTP API (reference §3.4, conventions §1.4) on :mod:`nsqpy.httpserver`.

Upstream routes with ``julienschmidt/httprouter`` v1.3.0, which is method-strict; the shared
:mod:`nsqpy.common.router` decides as httprouter does (redirects, ``OPTIONS``, 405 with
``Allow``, 404). Query strings are parsed as Go's ``url.ParseQuery`` (a bad escape or a ``;`` →
400 ``INVALID_REQUEST``; first value wins). The handlers that take arguments read the whole body
first, as upstream's ``http_api.NewReqParams`` does (we drain it without keeping it): a malformed
body is ``INVALID_REQUEST`` too. Every request is logged at INFO, as upstream's ``Log``
decorator does.

The ``/debug/pprof`` family is Go-runtime specific and is not served (404).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .. import NSQ_COMPAT_VERSION
from ..common.addr import join_host_port
from ..common.goweb import ApiError, first_value, go_json, parse_query, topic_channel_args
from ..common.http_api import OK_JSON, OK_PLAIN, OK_V1, v1_error
from ..common.log import RequestLog
from ..common.prometheus import CONTENT_TYPE as METRICS_TYPE
from ..common.router import Router, unrouted_answer
from ..httpserver import DRAIN, IGNORE, Endpoint, Head, Request, Response
from ..protocol.names import is_valid_name
from .registration_db import (
    GO_ZERO_TIME_UNIX_NANO, PeerInfo, filter_active, keys, next_change, subkeys,
)
from .state import LookupdState

#: Prometheus' text format (its ``version`` parameter tells scrapers which parser to use)
OK_METRICS = Head(200, (("Content-Type", METRICS_TYPE),))

#: topics whose /lookup answers are kept (the table is emptied when full)
_LOOKUP_CACHE_SIZE = 1024


def peer_json(peer: PeerInfo) -> bytes:
    """A producer's ``PeerInfo`` JSON, encoded once per peer."""
    data = peer.json
    if data is None:
        data = peer.json = go_json(peer.to_json())
    return data


_QUERIES: dict[str, dict[str, list[str]]] = {}


def _params(request: Request) -> dict[str, list[str]]:
    """``http_api.NewReqParams``: the query, then the body read to its end. Parsed queries are
    kept (pollers repeat theirs); the handlers only read them."""
    query = request.query
    params = _QUERIES.get(query)
    if params is None:
        try:
            params = parse_query(query)
        except ValueError:
            raise ApiError(400, "INVALID_REQUEST") from None
        if len(_QUERIES) >= _LOOKUP_CACHE_SIZE:
            _QUERIES.clear()
        _QUERIES[query] = params
    if request.body is None:
        raise ApiError(400, "INVALID_REQUEST")
    return params


# --- the API ------------------------------------------------------------------------------------

Handler = Callable[[Request], Any]
#: how a handler's data is answered: upstream's V1 (JSON or empty) or PlainText decorators
_PLAIN, _V1, _METRICS = 0, 1, 2


class LookupdHTTP:
    """nsqlookupd's routes as an :class:`~nsqpy.httpserver.App`."""

    def __init__(self, lookupd: LookupdState) -> None:
        self.lookupd = lookupd
        self.db = lookupd.db
        self.logger = lookupd.logger
        self.request_log = RequestLog(lookupd.logger)
        self.router: Router[Endpoint] = Router()
        for method, path, handler, kind, body in (
            ("GET", "/ping", self.ping, _PLAIN, IGNORE),
            ("GET", "/info", self.info, _V1, IGNORE),
            ("GET", "/debug", self.debug, _V1, IGNORE),
            ("GET", "/lookup", self.lookup, _V1, DRAIN),
            ("GET", "/topics", self.topics, _V1, IGNORE),
            ("GET", "/channels", self.channels, _V1, DRAIN),
            ("GET", "/nodes", self.nodes, _V1, IGNORE),
            ("POST", "/topic/create", self.create_topic, _V1, DRAIN),
            ("POST", "/topic/delete", self.delete_topic, _V1, DRAIN),
            ("POST", "/channel/create", self.create_channel, _V1, DRAIN),
            ("POST", "/channel/delete", self.delete_channel, _V1, DRAIN),
            ("POST", "/topic/tombstone", self.tombstone_topic_producer, _V1, DRAIN),
            *((("GET", "/metrics", self.metrics, _METRICS, IGNORE),)
              if lookupd.opts.metrics else ()),
        ):
            self.router.add(method, path, Endpoint(self._logged(handler, kind), body))
        self._static = self.router.static
        self._unrouted = Endpoint(self._logged(self._unrouted_answer, -1))
        self._info_body = go_json({"version": NSQ_COMPAT_VERSION})
        #: topic -> (DB version, valid until (unix ns), /lookup body)
        self._lookups: dict[str, tuple[int, int, bytes]] = {}

    # --- routing --------------------------------------------------------------------------------

    def resolve(self, request: Request) -> Endpoint:
        routes = self._static.get(request.method)
        if routes is not None:
            endpoint = routes.get(request.path)
            if endpoint is not None:
                return endpoint
        hit = self.router.match(request.method, request.path)
        return hit[0] if hit is not None else self._unrouted

    def _unrouted_answer(self, request: Request) -> Response:
        return unrouted_answer(self.router, request.method, request.path, request.target,
                               request.query, v1_error)

    def _logged(self, handler: Handler, kind: int) -> Callable[[Request], Response]:
        """Upstream's decorators around a handler: its answer as V1/PlainText, a panic as
        500 INTERNAL_ERROR, and the request's log line."""
        lookupd = self.lookupd
        log = self.request_log.request
        logger = self.logger
        clock = time.perf_counter_ns
        head = {_PLAIN: OK_PLAIN, _METRICS: OK_METRICS}.get(kind)

        def endpoint(request: Request) -> Response:
            start = clock()
            try:
                data = handler(request)
                if kind == _V1:
                    response = (OK_V1, b"") if data is None else (OK_JSON, data)
                elif head is not None:
                    response = (head, data)
                else:
                    response = data
            except ApiError as err:
                response = v1_error(err.status, err.message)
            except Exception as err:  # upstream's PanicHandler
                logger.error("panic in HTTP handler - %s", err)
                response = v1_error(500, "INTERNAL_ERROR")
            if lookupd.log_info and (kind >= 0 or response[0].status in (404, 405)):
                # httprouter answers redirects and OPTIONS itself, unlogged
                log(response[0].status, request.method, request.target, request.conn.remote_addr,
                    clock() - start)
            return response

        return endpoint

    # --- handlers: return bytes (JSON) / None (empty 200) or raise ApiError -------------------

    def ping(self, request: Request) -> bytes:
        return b"OK"

    def info(self, request: Request) -> bytes:
        return self._info_body

    def topics(self, request: Request) -> bytes:
        return go_json({"topics": keys(self.db.find_registrations("topic", "*", ""))})

    def channels(self, request: Request) -> bytes:
        params = _params(request)
        topic = first_value(params, "topic")
        if topic is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        return go_json({"channels": subkeys(self.db.find_registrations("channel", topic, "*"))})

    def lookup(self, request: Request) -> bytes:
        params = _params(request)
        topic = first_value(params, "topic")
        if topic is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        db = self.db
        now = time.time_ns()
        cached = self._lookups.get(topic)
        if cached is not None and cached[0] == db.version and now < cached[1]:
            return cached[2]
        if not db.find_registrations("topic", topic, ""):
            raise ApiError(404, "TOPIC_NOT_FOUND")
        lookupd = self.lookupd
        channels = subkeys(db.find_registrations("channel", topic, "*"))
        candidates = db.find_producers("topic", topic, "")
        producers = filter_active(candidates, lookupd.inactive_timeout_ns,
                                  lookupd.tombstone_lifetime_ns, now)
        # {"channels":[...],"producers":[...]} assembled from each peer's cached encoding
        body = b'{"channels":%s,"producers":[%s]}' % (
            go_json(channels), b",".join([peer_json(p.peer) for p in producers]))
        # consumers poll /lookup: the answer stands until the DB changes or a producer's
        # activity or tombstone runs out
        if len(self._lookups) >= _LOOKUP_CACHE_SIZE:
            self._lookups.clear()
        self._lookups[topic] = (db.version, next_change(
            candidates, lookupd.inactive_timeout_ns, lookupd.tombstone_lifetime_ns, now), body)
        return body

    def nodes(self, request: Request) -> bytes:
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
                peer_json(peer)[:-1], go_json(tombstones), go_json(topics)))
        return b'{"producers":[%s]}' % b",".join(nodes)

    def debug(self, request: Request) -> bytes:
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

    def create_topic(self, request: Request) -> None:
        params = _params(request)
        topic = first_value(params, "topic")
        if topic is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(topic):
            raise ApiError(400, "INVALID_ARG_TOPIC")
        self.logger.info("DB: adding topic(%s)", topic)
        self.db.add_registration(("topic", topic, ""))

    def delete_topic(self, request: Request) -> None:
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

    def tombstone_topic_producer(self, request: Request) -> None:
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
                self.db.touch()

    def create_channel(self, request: Request) -> None:
        topic, channel = topic_channel_args(_params(request))
        self.logger.info("DB: adding channel(%s) in topic(%s)", channel, topic)
        self.db.add_registration(("channel", topic, channel))
        self.logger.info("DB: adding topic(%s)", topic)
        self.db.add_registration(("topic", topic, ""))

    def delete_channel(self, request: Request) -> None:
        topic, channel = topic_channel_args(_params(request))
        regs = self.db.find_registrations("channel", topic, channel)
        if not regs:
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        self.logger.info("DB: removing channel(%s) from topic(%s)", channel, topic)
        for reg in regs:
            self.db.remove_registration(reg)


    def metrics(self, request: Request) -> bytes:
        from .metrics import render  # the exposition code is loaded on the first scrape

        return render(self.lookupd)
