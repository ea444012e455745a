"""nsqd's HTTP API on :mod:`nsqpy.httpserver`, served on nsqd's own event loop.

Dashboards, scripts and client libraries talk to nsqd over this API, so it answers the way
upstream v1.3.0 does (``nsqd/http.go`` with ``julienschmidt/httprouter`` and
``internal/http_api``): the same routes and methods, status codes, ``{"message": ...}`` error
texts, the order in which a request's problems are reported, the headers of each kind of answer
and the request log lines. In particular:

* Routing is method-strict, with httprouter's redirects, ``OPTIONS`` and 405 answers
  (:mod:`nsqpy.common.router`).
* Bodies are never buffered beyond the limit that applies: ``/pub`` holds at most
  ``--max-msg-size`` + 1 bytes and refuses a larger Content-Length before the body is invited
  (no ``100 Continue``); ``/mpub`` is parsed as it streams (:mod:`.http_mpub`), text bounded by
  ``--max-body-size`` + 1, binary with each size checked before its bytes are awaited.
  The routes whose upstream handler reads the whole body (``NewReqParams``) read it to its end
  without keeping it.
* ``X-NSQ-Content-Type: nsq; version=1.0`` on upstream's V1 answers only (not ``/ping``,
  ``OPTIONS``, redirects).

Go-runtime endpoints (``/debug/pprof/*``) have no Python meaning and are not routed: they get
404 ``NOT_FOUND``.

With ``--tls-cert``/``--tls-key`` the same API is also served over HTTPS (``--https-address``);
with ``--tls-required=true`` the plain listener answers every request with upstream's
``403 {"message": "TLS_REQUIRED", "https_port": N}`` (``tcp-https`` leaves it open).

Features add routes through ``nsqd.http_routes``: each provider gets this API object and returns
:class:`Route`\\ s, whose handlers take a :class:`~nsqpy.httpserver.Request` and return a
response (``(Head, body)``; see :func:`v1_json` and friends), an awaitable of one, or raise
:class:`~nsqpy.common.goweb.ApiError`.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import itertools
import logging
import socket
import time
from typing import TYPE_CHECKING, Any, Callable, NamedTuple


from .. import NSQ_COMPAT_VERSION, version_string
from ..common.addr import is_unix_socket, listen_socket, listener_name, unix_listen_socket
from ..protocol.gojson import GoJSONError, decode_strings
from ..common.goweb import ApiError, first_value, go_json, parse_query, topic_channel_args
from ..common.http_api import OK_JSON, OK_V1, plain_text, v1_error, v1_json, v1_text
from ..common.log import NSQ_LEVEL_NUMBERS, RequestLog, set_level
from ..common.router import Router, unrouted_answer
from ..httpserver import DRAIN, IGNORE, STREAM, Endpoint, Head, HTTPServer, Request, Response
from ..protocol.commands import go_quote, ms_to_duration_ns
from ..protocol.message import text_run_lines
from ..protocol.names import is_valid_name
from .auth.needs import (
    ADMIN, ANY_STRICT, NODE, NODE_STRICT, OPEN, PUBLISH, PUBLISH_OR_SUBSCRIBE, STATS_STRICT,
    SUBSCRIBE, Need, applies, on_channel, on_topic,
)
from .hooks import PublishRefused
from .http_mpub import BinaryMpub, TextMpub
from .options import _TLS_VERSIONS, config_key_map, topology_set
from .stats import snapshot as nsq_stats
from .stats.prometheus import routes as metrics_routes

if TYPE_CHECKING:
    import ssl

    from .channel import Channel
    from .nsqd import NSQD
    from .topic import Topic

_BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}
_TLS_REQUIRED = {"false": 0, "tcp-https": 1, "true": 2}
# deprecated no-op flags: upstream's Options struct has no field for them, so /config has no key
_CONFIG_HIDDEN = frozenset({"verbose", "worker_id"})
# A failed disk write makes upstream's Topic.PutMessage return an error, which doPUB/doMPUB
# report as 503 EXITING (they cannot tell it apart from a topic that is shutting down).
_PUT_FAILED = (503, "EXITING")
# nsqpy's sync replication found no second copy in time (opt-in; a 5xx as above: retry elsewhere)
_NO_COPY = (503, "REPLICA_UNAVAILABLE")
#: parsed query strings kept per API (publishers and pollers repeat theirs)
_QUERY_CACHE_SIZE = 1024

#: ``RespondV1`` with no data
EMPTY: Response = (OK_V1, b"")
#: ``/pub`` and ``/mpub``'s ``"OK"`` (a string: Go sniffs it as text)
OK_PUBLISHED: Response = (OK_V1, b"OK")
_PING_OK = plain_text("OK")


class Route(NamedTuple):
    """A route of nsqd's API: ``handler(request)`` returns a response, an awaitable of one,
    a :class:`~nsqpy.httpserver.BodyReader` (``body=STREAM``), or raises ApiError. ``body`` is
    the :mod:`nsqpy.httpserver` body policy; ``refuse(request)`` may answer from the head
    alone; ``logged``: upstream's ``Log`` decorator is on the route. ``auth``: what the
    caller's secret must be granted once an auth server is set (docs/security.md); a route
    without one needs :data:`~.auth.needs.NODE`, so a new route is never open by mistake."""

    method: str
    path: str  # a trailing ":name" segment is a parameter, as in httprouter
    handler: Callable[[Request], Any]
    body: int = IGNORE
    logged: bool = True
    refuse: Callable[[Request], Response | None] | None = None
    auth: Need | None = None


class NsqdHTTP:
    """nsqd's routes as an :class:`~nsqpy.httpserver.App`; one per listener (HTTP, HTTPS)."""

    def __init__(self, nsqd: "NSQD", tls_enabled: bool = False) -> None:
        self.nsqd = nsqd
        opts = nsqd.options
        # upstream's httpServer.tlsRequired: plain HTTP refused when --tls-required=true
        self.refuse_plain = not tls_enabled and opts.tls_required == "true"
        self.logger = nsqd.logger
        self.request_log = RequestLog(nsqd.logger)
        self.max_msg = opts.max_msg_size
        self.max_body = opts.max_body_size
        self._queries: dict[str, dict[str, list[str]]] = {}
        # upstream v1.3.0's Options fields: not its deprecated no-ops, not the flags of its
        # unreleased master we accept hidden (topology, auth method, experiments)
        self.config_flags = {k: f for k, f in config_key_map().items()
                             if k not in _CONFIG_HIDDEN and not f.extension and not f.hidden}
        too_big = v1_error(413, "MSG_TOO_BIG")
        max_msg = self.max_msg
        R = Route
        # upstream's routes: open as upstream's unless --http-auth-required (docs/security.md)
        publish = on_topic(PUBLISH, strict=True)
        topic_admin = on_topic(ADMIN, strict=True)
        channel_admin = on_channel(ADMIN, strict=True)
        routes = [
            R("GET", "/ping", self.ping, auth=OPEN),
            R("GET", "/info", self.info, auth=ANY_STRICT),
            R("POST", "/pub", self.pub, max_msg + 1, logged=False,
              refuse=lambda r: too_big if (r.content_length or 0) > max_msg else None,
              auth=publish),
            R("POST", "/mpub", self.mpub, STREAM, logged=False, auth=publish),
            R("GET", "/stats", self.stats, DRAIN, auth=STATS_STRICT),
            R("POST", "/topic/create", self.topic_create,
              auth=on_topic(PUBLISH_OR_SUBSCRIBE, strict=True)),
            R("POST", "/topic/delete", self.topic_delete, DRAIN, auth=topic_admin),
            R("POST", "/topic/empty", self.topic_empty, DRAIN, auth=topic_admin),
            R("POST", "/topic/pause", self.topic_pause, DRAIN, auth=topic_admin),
            R("POST", "/topic/unpause", self.topic_pause, DRAIN, auth=topic_admin),
            R("POST", "/channel/create", self.channel_create, DRAIN,
              auth=on_channel(SUBSCRIBE, strict=True)),
            R("POST", "/channel/delete", self.channel_delete, DRAIN, auth=channel_admin),
            R("POST", "/channel/empty", self.channel_empty, DRAIN, auth=channel_admin),
            R("POST", "/channel/pause", self.channel_pause, DRAIN, auth=channel_admin),
            R("POST", "/channel/unpause", self.channel_pause, DRAIN, auth=channel_admin),
            R("GET", "/config/:opt", self.config, auth=NODE_STRICT),
            R("PUT", "/config/:opt", self.config, max_msg + 1, auth=NODE_STRICT),
            R("PUT", "/debug/setblockrate", self.set_block_rate, auth=NODE_STRICT),
            R("POST", "/debug/freememory", self.free_memory, auth=NODE_STRICT),
            *metrics_routes(nsqd, R),
            *(route for provider in nsqd.http_routes for route in provider(self)),  # features'
        ]
        self.router: Router[Endpoint] = Router()
        for route in routes:
            self.router.add(route.method, route.path, self._endpoint(route))
        self._static = self.router.static
        nsqd.http_apps.append(self)
        self._unrouted = Endpoint(self._guard(self._unrouted_answer, None))
        self._tls_required = Endpoint(self._tls_required_answer)

    def add_routes(self, provider: Any) -> None:
        """A feature turned on while the listener runs (history: a topic's setting)."""
        for route in provider(self):
            self.router.add(route.method, route.path, self._endpoint(route))

    # --- routing --------------------------------------------------------------------------------

    def resolve(self, request: Request) -> Endpoint:
        if self.refuse_plain:
            return self._tls_required
        routes = self._static.get(request.method)
        if routes is not None:
            endpoint = routes.get(request.path)
            if endpoint is not None:
                return endpoint
        hit = self.router.match(request.method, request.path)
        if hit is None:
            return self._unrouted
        request.params = hit[1]
        return hit[0]

    def _unrouted_answer(self, request: Request) -> Response:
        return unrouted_answer(self.router, request.method, request.path, request.target,
                               request.query, v1_error)

    def _tls_required_answer(self, request: Request) -> Response:
        """Upstream writes this body by hand (note the spaces), before any routing."""
        body = b'{"message": "TLS_REQUIRED", "https_port": %d}' % self.nsqd.https_port
        return _TLS_REQUIRED_HEAD, body

    def _endpoint(self, route: Route) -> Endpoint:
        handler = route.handler
        gate = self.nsqd.http_auth  # auth.http.HttpAuth with --auth-http-address
        if gate is not None and applies(route.auth, gate.strict):
            handler = gate.guard(handler, route.auth or NODE, self.query)
        return Endpoint(self._guard(handler, route.logged), route.body, route.refuse)

    def _guard(self, handler: Callable[[Request], Any],
               logged: bool | None) -> Callable[[Request], Any]:
        """Upstream's decorators around a handler: an ApiError as its V1 answer, a panic as
        500 INTERNAL_ERROR (logged), and the request's log line when the route has upstream's
        ``Log`` decorator (``logged=None``: httprouter's own answers, of which only 404 and
        405 are logged). An unlogged route (``/pub``, ``/mpub``) reads no clock."""
        logger = self.logger
        log = self.request_log.request
        clock = time.perf_counter_ns
        panic = self._panic
        later = self._later

        def unlogged(request: Request) -> Any:
            try:
                result = handler(request)
            except ApiError as err:
                return v1_error(err.status, err.message)
            except Exception as err:
                return panic(request, err)
            if type(result) is tuple or hasattr(result, "feed"):  # (a body reader)
                return result
            return later(request, result, False, 0)

        if logged is False:
            return unlogged

        def guarded(request: Request) -> Any:
            start = clock()
            try:
                result = handler(request)
            except ApiError as err:
                result = v1_error(err.status, err.message)
            except Exception as err:
                return panic(request, err)
            if type(result) is not tuple:
                return later(request, result, logged, start)
            if (logged or result[0].status in (404, 405)) and logger.isEnabledFor(logging.INFO):
                log(result[0].status, request.method, request.target, request.conn.remote_addr,
                    clock() - start)
            return result

        return guarded

    def _panic(self, request: Request, err: Exception) -> Response:
        """upstream's ``LogPanicHandler``: the error logged, then its own 500 answer's line."""
        start = time.perf_counter_ns()
        self.logger.error("panic in HTTP handler - %s", err, exc_info=True)
        if self.logger.isEnabledFor(logging.INFO):
            self.request_log.request(500, request.method, request.target,
                                     request.conn.remote_addr, time.perf_counter_ns() - start)
        return v1_error(500, "INTERNAL_ERROR")

    async def _later(self, request: Request, pending: Any, logged: bool | None,
                     start: int) -> Response:
        """A handler that waits (sync replication, an nsqlookupd address change)."""
        try:
            result = await pending
        except ApiError as err:
            result = v1_error(err.status, err.message)
        except Exception as err:
            return self._panic(request, err)
        if logged and self.logger.isEnabledFor(logging.INFO):
            self.request_log.request(result[0].status, request.method, request.target,
                                     request.conn.remote_addr, time.perf_counter_ns() - start)
        return result

    # --- arguments (also for the features' routes) -----------------------------------------------

    def query(self, request: Request, *, reads_body: bool = False) -> dict[str, list[str]]:
        """The query as Go's ``url.ParseQuery`` reads it (400 INVALID_REQUEST when it cannot).
        ``reads_body``: upstream's ``NewReqParams``, which also reads the body to its end (a
        body that broke off is INVALID_REQUEST too) and logs its failures."""
        raw = request.query
        params = self._queries.get(raw)
        if params is None:
            try:
                params = parse_query(raw)
            except ValueError as err:
                if reads_body:
                    self.logger.error("failed to parse request params - %s", err)
                raise ApiError(400, "INVALID_REQUEST") from None
            if len(self._queries) >= _QUERY_CACHE_SIZE:
                self._queries.clear()
            self._queries[raw] = params
        if reads_body and request.body is None:
            self.logger.error("failed to parse request params - unexpected EOF")
            raise ApiError(400, "INVALID_REQUEST")
        return params

    @staticmethod
    def topic_arg(query: dict[str, list[str]]) -> str:
        """``/pub``, ``/mpub``, ``/topic/create|empty``: MISSING_ARG_TOPIC / INVALID_TOPIC."""
        name = first_value(query, "topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(name):
            raise ApiError(400, "INVALID_TOPIC")
        return name

    def topic_for_publish(self, query: dict[str, list[str]]) -> "Topic":
        """upstream's ``getTopicFromQuery``: the topic, created if need be."""
        name = first_value(query, "topic")
        topic = self.nsqd.topics.get(name) if name is not None else None
        if topic is None:
            topic = self.nsqd.get_topic(self.topic_arg(query))
        return topic

    def existing_topic(self, name: str) -> "Topic":
        topic = self.nsqd.topics.get(name)
        if topic is None:
            raise ApiError(404, "TOPIC_NOT_FOUND")
        return topic

    def topic_and_channel(self, request: Request) -> tuple["Topic", str]:
        """Channel endpoints: upstream's ``getExistingTopicFromQuery`` (``NewReqParams``,
        ``GetTopicChannelArgs``, then an existing topic)."""
        topic_name, channel_name = topic_channel_args(self.query(request, reads_body=True))
        return self.existing_topic(topic_name), channel_name

    @staticmethod
    def existing_channel(topic: "Topic", name: str) -> "Channel":
        channel = topic.channels.get(name)
        if channel is None:
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        return channel

    def after_persist(self, response: Response) -> Any:
        """``response`` once nsqd.dat holds the change just made, so a crash cannot silently
        undo an acknowledged pause (upstream persists before answering too). The write runs
        off the event loop; a failure is logged and the answer still goes out, as upstream's."""
        persisted = getattr(self.nsqd, "persisted", None)
        return response if persisted is None else _after(persisted(), response)

    # --- publishing -------------------------------------------------------------------------------

    def _put(self, topic: "Topic", count: int, put: Callable[..., None], *args: Any) -> None:
        """``put(*args)``, one of the topic's publishing methods, for ``count`` messages (none:
        only the checks), its failures turned into upstream's answers."""
        if self.nsqd.exiting or topic.exiting:
            raise ApiError(503, "EXITING")
        try:
            if count:
                self.nsqd.publish(put, *args)
        except PublishRefused as err:  # a drain, a full bounded queue (lifecycle/)
            raise ApiError(503, err.http_message) from None
        except OSError as err:
            self.logger.error("TOPIC(%s): failed to put %d message(s) - %s",
                              topic.name, count, err)
            raise ApiError(*_PUT_FAILED) from None

    def _published(self, topic: "Topic") -> Any:
        """``OK`` now; once a topic this publish created has lookupd's channels (upstream's
        ``GetTopic`` blocks on that query); in ``--replication-ack=sync`` mode once the peer
        stored the batch (503 when it did not in time, see :func:`_after_copy`)."""
        replicator = self.nsqd.replicator
        acked = replicator.acked() if replicator is not None else None
        commit = self.nsqd.commit
        if commit is not None and commit.busy:  # --sync-every=1: once the flush returned
            answer = self.nsqd.loop.create_future()
            commit.then(functools.partial(_flushed, answer, topic, acked, replicator))
            return answer
        if not topic.ready:
            return _after_ready(topic.wait_ready(), acked)
        return OK_PUBLISHED if acked is None else _after_copy(acked)

    # --- handlers ------------------------------------------------------------------------------

    def ping(self, request: Request) -> Response:
        # upstream answers /ping in plain text, errors included
        nsqd = self.nsqd
        if nsqd.health_error is None and not nsqd.draining:
            return _PING_OK
        if nsqd.draining:
            return plain_text("DRAINING", 503)
        return plain_text(nsqd.health, 500)

    def info(self, request: Request) -> Response:
        nsqd, opts = self.nsqd, self.nsqd.options
        return v1_json({
            "version": NSQ_COMPAT_VERSION,
            "broadcast_address": opts.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": nsqd.http_port,
            "tcp_port": nsqd.tcp_port,
            "start_time": nsqd.start_time,
            "max_heartbeat_interval": _nanos(opts.max_heartbeat_interval),
            "max_output_buffer_size": opts.max_output_buffer_size,
            "max_output_buffer_timeout": _nanos(opts.max_output_buffer_timeout),
            "max_deflate_level": opts.max_deflate_level,
            **({"topology_zone": opts.topology_zone, "topology_region": opts.topology_region}
               if topology_set(opts) else {}),
        })

    def pub(self, request: Request) -> Any:
        # upstream's order: size checks and body first, then the query, then defer
        body = request.body
        if body is None:  # the body broke off
            raise ApiError(500, "INTERNAL_ERROR")
        size = len(body)
        if size > self.max_msg:
            raise ApiError(413, "MSG_TOO_BIG")
        if not size:
            raise ApiError(400, "MSG_EMPTY")
        query = self.query(request)
        topic = self.topic_for_publish(query)  # created even if defer is bad
        delay_ns = 0
        if "defer" in query:
            raw_defer = query["defer"][0]
            try:
                # time.Duration(ms) * time.Millisecond: 64-bit, wrapping as Go's does
                delay_ns = ms_to_duration_ns(_go_parse_int(raw_defer))
            except ValueError:
                raise ApiError(400, "INVALID_DEFER") from None
            if not 0 <= delay_ns <= self.nsqd.limits.max_defer_timeout_ms * 1_000_000:
                raise ApiError(400, "INVALID_DEFER")
        msg = (self.nsqd.id_factory.next_id(), body, time.time_ns(), 0)
        if delay_ns > 0:
            self._put(topic, 1, topic.put_deferred, msg, delay_ns / 1e9)
        else:
            self._put(topic, 1, topic.put_many, [msg], size)
        return self._published(topic)

    def mpub(self, request: Request) -> Any:
        """Runs when the head is in: refusals from it, then a reader for the body."""
        if (request.content_length or 0) > self.max_body:
            raise ApiError(413, "BODY_TOO_BIG")
        query = self.query(request)
        topic = self.topic_for_publish(query)
        binary = False
        if "binary" in query:
            raw_binary = query["binary"][0]
            binary = _BOOL_PARAMS.get(raw_binary, True)
            if raw_binary not in _BOOL_PARAMS:
                self.logger.warning("deprecated value '%s' used for /mpub binary param", raw_binary)
        if binary:
            return BinaryMpub(self._publish_bodies, topic, self.max_msg, self.max_body)
        return TextMpub(self._publish_bodies, topic, self.max_msg, self.max_body,
                        self._publish_text if topic.takes_runs() else None)

    def _publish_bodies(self, topic: "Topic", bodies: list[bytes]) -> Any:
        """A whole ``/mpub`` body read: its messages published, the answer."""
        n = len(bodies)
        try:
            if n:
                ids = self.nsqd.id_factory.next_ids(n)
                ts = time.time_ns()
                msgs = list(zip(ids, bodies, itertools.repeat(ts, n), itertools.repeat(0, n)))
                self._put(topic, n, topic.put_many, msgs, sum(map(len, bodies)))
            else:
                self._put(topic, 0, topic.put_many)
        except ApiError as err:
            return v1_error(err.status, err.message)
        return self._published(topic)

    def _publish_text(self, topic: "Topic", body: bytes) -> Any:
        """A text ``/mpub`` body that came whole and holds no line too long, to a topic where
        it would wait when its head came: published as a run (``Topic.put_run``), its
        messages made only once they are needed, unless it holds an empty line."""
        n = text_run_lines(body)
        if not n:
            return self._publish_bodies(topic, list(filter(None, body.split(b"\n"))))
        run = (self.nsqd.id_factory.next_id_block(n), body, time.time_ns())
        newlines = n - (body[-1] != 10)  # (one between each two lines, and maybe a last one)
        try:
            self._put(topic, n, topic.put_run, run, n, len(body) - newlines)
        except ApiError as err:
            return v1_error(err.status, err.message)
        return self._published(topic)

    def topic_create(self, request: Request) -> Any:
        topic = self.topic_for_publish(self.query(request))
        return EMPTY if topic.ready else _after(topic.wait_ready(), EMPTY)

    def topic_delete(self, request: Request) -> Response:
        name = first_value(self.query(request, reads_body=True), "topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not self.nsqd.delete_topic(name):
            raise ApiError(404, "TOPIC_NOT_FOUND")
        return EMPTY

    def topic_empty(self, request: Request) -> Response:
        topic = self.existing_topic(self.topic_arg(self.query(request, reads_body=True)))
        try:
            topic.empty()
        except OSError as err:
            self.logger.error("TOPIC(%s): failed to empty - %s", topic.name, err)
            raise ApiError(500, "INTERNAL_ERROR") from None
        return EMPTY

    def topic_pause(self, request: Request) -> Response:
        name = first_value(self.query(request, reads_body=True), "topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        topic = self.existing_topic(name)
        if "unpause" in request.path:
            topic.unpause()
        else:
            topic.pause()
        return self.after_persist(EMPTY)

    def channel_create(self, request: Request) -> Any:
        topic, channel_name = self.topic_and_channel(request)
        topic.get_channel(channel_name)
        return EMPTY if topic.ready else _after(topic.wait_ready(), EMPTY)

    def channel_delete(self, request: Request) -> Response:
        topic, channel_name = self.topic_and_channel(request)
        if not topic.delete_channel(channel_name):
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        return EMPTY

    def channel_empty(self, request: Request) -> Response:
        topic, channel_name = self.topic_and_channel(request)
        channel = self.existing_channel(topic, channel_name)
        try:
            channel.empty()
        except OSError as err:
            self.logger.error("CHANNEL(%s:%s): failed to empty - %s", topic.name, channel.name, err)
            raise ApiError(500, "INTERNAL_ERROR") from None
        return EMPTY

    def channel_pause(self, request: Request) -> Response:
        topic, channel_name = self.topic_and_channel(request)
        channel = self.existing_channel(topic, channel_name)
        if "unpause" in request.path:
            channel.unpause()
        else:
            channel.pause()
        return self.after_persist(EMPTY)

    def stats(self, request: Request) -> Response:
        query = self.query(request, reads_body=True)
        as_json = first_value(query, "format") == "json"
        include_clients = _BOOL_PARAMS.get(first_value(query, "include_clients") or "", True)
        include_mem = _BOOL_PARAMS.get(first_value(query, "include_mem") or "", True)
        # no collection while the snapshot is built: its tens of thousands of new dicts would
        # trigger young (or full) collections that walk them all, and they are freed by
        # reference counting as soon as the answer is encoded
        collecting = gc.isenabled()
        gc.disable()
        topic, channel = first_value(query, "topic") or "", first_value(query, "channel") or ""
        try:
            memory = nsq_stats.memory_stats() if include_mem else None
            if as_json:
                topics, producers, floats = nsq_stats.collect_json(self.nsqd, topic, channel,
                                                                   include_clients)
                document = nsq_stats.stats_document(self.nsqd, topics, producers, memory)
                # (the one place /stats is encoded)
                return OK_JSON, go_json(document, floats=floats)
            topics, producers = nsq_stats.collect(self.nsqd, topic, channel, include_clients)
            text = nsq_stats.stats_text(version_string("nsqd"), self.nsqd, topics, producers,
                                        memory)
            return OK_V1, text.encode()  # (it starts with the version line: sniffed as text)
        finally:
            if collecting:
                gc.enable()

    # --- /config -------------------------------------------------------------------------------

    def config_value(self, key: str) -> tuple[bool, object]:
        """``(found, value)`` for a cfg key, encoded as Go's JSON encodes the Options field."""
        flag = self.config_flags.get(key)
        if flag is None:
            return False, None
        value = self.nsqd.options.values.get(flag.attr, flag.default)
        if flag.kind == "duration":
            return True, _nanos(value)
        if key == "log_level":
            return True, NSQ_LEVEL_NUMBERS.get(value, 0)
        if key == "tls_min_version":
            return True, _TLS_VERSIONS.get(value, 0)
        if key == "tls_required":
            return True, _TLS_REQUIRED.get(value, 0)
        if isinstance(value, list):
            return True, [nsq_stats._go_number(v) if isinstance(v, float) else v for v in value]
        return True, value

    def config(self, request: Request) -> Any:
        opt = request.params.get("opt", "")
        if request.method == "PUT":
            body = request.body
            if body is None:
                raise ApiError(500, "INTERNAL_ERROR")
            if not body or len(body) > self.max_msg:
                raise ApiError(413, "INVALID_VALUE")
            if opt == "nsqlookupd_tcp_addresses":
                pending = self._set_lookupd_addresses(body)
                if pending is not None:
                    return self._config_after(pending, opt)
            elif opt == "log_level":
                self._set_log_level(body)
            else:
                raise ApiError(400, "INVALID_OPTION")
        return self._config_answer(opt)

    def _config_answer(self, opt: str) -> Response:
        found, value = self.config_value(opt)
        if not found:
            raise ApiError(400, "INVALID_OPTION")
        if isinstance(value, str):  # RespondV1 writes a string as it is, not as JSON
            return v1_text(value) if value else EMPTY
        return v1_json(value)

    async def _config_after(self, pending: Any, opt: str) -> Response:
        await pending
        return self._config_answer(opt)

    def _set_lookupd_addresses(self, body: bytes) -> Any:
        try:  # Go's json.Unmarshal into a []string: null is a nil slice, answered as null
            addrs = decode_strings(body)
        except GoJSONError:
            raise ApiError(400, "INVALID_VALUE") from None
        flag = self.config_flags["nsqlookupd_tcp_addresses"]
        self.nsqd.options.values[flag.attr] = None if addrs is None else list(addrs)
        result = self.nsqd.set_lookupd_addresses(list(addrs or ()))
        return result if inspect.isawaitable(result) else None

    def _set_log_level(self, body: bytes) -> None:
        level = body.decode("utf-8", "replace").lower()  # upstream's ParseLogLevel: no trimming
        if level not in NSQ_LEVEL_NUMBERS:
            raise ApiError(400, "INVALID_VALUE")
        self.nsqd.options.values["log_level"] = level
        set_level(self.logger, level)

    # --- Go runtime debug endpoints --------------------------------------------------------------

    def set_block_rate(self, request: Request) -> Response:
        """Go's block profiler has no counterpart; the rate is only validated.

        Upstream's handler returns no data through its plain-text decorator, which panics on
        that, so a valid rate is answered 500 INTERNAL_ERROR; we answer the same.
        """
        raw = first_value(self.query(request), "rate") or ""
        try:
            _go_parse_int(raw)
        except ValueError as err:
            return plain_text(f"invalid block rate : strconv.Atoi: parsing {go_quote(raw)}: {err}",
                              400)
        return v1_error(500, "INTERNAL_ERROR")

    def free_memory(self, request: Request) -> Response:
        """``debug.FreeOSMemory`` ≈ a full collection; same 500 answer as upstream (see above)."""
        gc.collect()
        return v1_error(500, "INTERNAL_ERROR")


_TLS_REQUIRED_HEAD = Head(403, (("Content-Type", "application/json; charset=utf-8"),
                                ("X-NSQ-Content-Type", "nsq; version=1.0")))


async def _after(pending: Any, response: Response) -> Response:
    await pending
    return response


def _flushed(answer: "asyncio.Future[Any]", topic: "Topic", acked: Any, replicator: Any,
             err: OSError | None) -> None:
    """The group commit's outcome for a publish it held: 503 as for any failed put, else the
    answer as without it (the replication wait of a fan-out the history held is joined now)."""
    if answer.done():
        return  # the client went away
    if err is not None:
        answer.set_result(v1_error(*_PUT_FAILED))
        return
    if acked is None and replicator is not None:
        acked = replicator.acked()
    if not topic.ready:
        pending = asyncio.ensure_future(_after_ready(topic.wait_ready(), acked))
    elif acked is not None:
        pending = asyncio.ensure_future(_after_copy(acked))
    else:
        answer.set_result(OK_PUBLISHED)
        return
    pending.add_done_callback(lambda done: answer.done() or answer.set_result(done.result()))


async def _after_ready(ready: Any, acked: Any) -> Response:
    await ready
    return OK_PUBLISHED if acked is None else await _after_copy(acked)


async def _after_copy(pending: Any) -> Response:
    """A sync-replicated publish: OK once the peer stored it, or 503 when it stored nothing
    within --replication-sync-timeout and --replication-degraded=fail (docs/replication.md §6)."""
    if await pending is False:
        return v1_error(*_NO_COPY)
    return OK_PUBLISHED


def _nanos(seconds: float) -> int:
    """A duration as Go's JSON encodes ``time.Duration``: integer nanoseconds."""
    return int(round(seconds * 1_000_000_000))


def _go_parse_int(text: str) -> int:
    """``strconv.ParseInt(s, 10, 64)``; ValueError's text is Go's reason."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError("invalid syntax")
    value = int(text)
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError("value out of range")
    return value


async def start_http(nsqd: "NSQD", address: str,
                     ssl_context: "ssl.SSLContext | None" = None) -> tuple[HTTPServer, int]:
    """Serve the API on ``address`` (``host:port``, or a unix socket path); returns the server
    and its port (-1 for unix). With ``ssl_context`` this is the HTTPS listener."""
    nsq_stats.install_gc_pause_tracker()
    api = NsqdHTTP(nsqd, tls_enabled=ssl_context is not None)
    server = HTTPServer(api, ssl_context=ssl_context, logger=nsqd.logger,
                        before_write=api.request_log.flush)
    label = "HTTPS" if ssl_context is not None else "HTTP"
    unix = is_unix_socket(address)
    sock = unix_listen_socket(address) if unix else listen_socket(address)  # dual-stack, as Go
    try:
        await server.serve(sock)
    except BaseException:
        sock.close()
        raise
    nsqd.logger.info("%s: listening on %s", label, listener_name(sock))
    return server, -1 if unix else sock.getsockname()[1]
