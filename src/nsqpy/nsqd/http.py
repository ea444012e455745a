"""nsqd's HTTP API on aiohttp, served on nsqd's own event loop.

Dashboards, scripts and client libraries talk to nsqd over this API, so it answers the way
upstream v1.3.0 does (``nsqd/http.go`` with ``julienschmidt/httprouter`` and
``internal/http_api``): the same routes and methods, status codes, ``{"message": ...}`` error
texts and the order in which a request's problems are reported. In particular:

* Routing is method-strict: a known path with another method gets 405 with an ``Allow`` header,
  OPTIONS gets the ``Allow`` list, and a path that only differs by a trailing slash, by case or
  by ``//``/``..`` segments is redirected (301 for GET, 307 otherwise), all as httprouter does.
  aiohttp's own router would answer these cases differently, so one catch-all route feeds
  :class:`Router`.
* Bodies are never buffered beyond the limit that applies: ``/pub`` reads at most
  ``--max-msg-size`` + 1 bytes, text ``/mpub`` at most ``--max-body-size`` + 1, binary ``/mpub``
  is parsed as it streams in (each size checked before its bytes are awaited), and a request
  whose Content-Length is already too big is refused without inviting its body
  (no ``100 Continue``).
* Every response carries ``X-NSQ-Content-Type: nsq; version=1.0``.

Go-runtime endpoints (``/debug/pprof/*``) have no Python meaning and are not routed: they get
404 ``NOT_FOUND``.

With ``--tls-cert``/``--tls-key`` the same API is also served over HTTPS (``--https-address``);
with ``--tls-required=true`` the plain listener answers every request with upstream's
``403 {"message": "TLS_REQUIRED", "https_port": N}`` (``tcp-https`` leaves it open).
"""

from __future__ import annotations

import gc
import inspect
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable

import orjson
from aiohttp import web
from aiohttp.http import HttpVersion11
from aiohttp.http_exceptions import HttpProcessingError

from .. import NSQ_COMPAT_VERSION, version_string
from ..common import router as common_router
from ..common.addr import is_unix_socket, listen_socket, sock_address
from ..common.router import unrouted_response
from ..common.flags import format_duration
from ..common.goweb import ApiError, first_value, go_json, parse_query, topic_channel_args
from ..common.log import NSQ_LEVEL_NUMBERS, set_level
from ..protocol.commands import go_quote, ms_to_duration_ns
from ..protocol.names import is_valid_name
from .hooks import PublishRefused
from .options import _TLS_VERSIONS, config_key_map, topology_set
from .stats import snapshot as nsq_stats
from .stats.prometheus import routes as metrics_routes

if TYPE_CHECKING:
    from .channel import Channel
    from .nsqd import NSQD
    from .topic import Topic

NSQ_CONTENT_TYPE = "nsq; version=1.0"
_BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}
_TLS_REQUIRED = {"false": 0, "tcp-https": 1, "true": 2}
# deprecated no-op flags: upstream's Options struct has no field for them, so /config has no key
_CONFIG_HIDDEN = frozenset({"verbose", "worker_id"})
# A failed disk write makes upstream's Topic.PutMessage return an error, which doPUB/doMPUB
# report as 503 EXITING (they cannot tell it apart from a topic that is shutting down).
_PUT_FAILED = (503, "EXITING")
_READ_CHUNK = 1 << 16
# request storage: "log this request" (typed keys exist from aiohttp 3.14 and warn without them)
_LOG = web.RequestKey("nsq_log", bool) if hasattr(web, "RequestKey") else "nsq_log"


class _ServerLog(logging.Handler):
    """aiohttp's own server log. A malformed request is answered 400 and is the client's problem:
    like Go's net/http we do not log it (a hostile client could otherwise fill the log with
    tracebacks). Anything else goes to nsqd's log."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            return
        self.target.log(record.levelno, "HTTP: %s%s", record.getMessage(),
                        f" - {exc!r}" if exc is not None else "")


def _server_logger(nsqd: "NSQD") -> logging.Logger:
    logger = logging.getLogger(f"nsqpy.nsqd.http_server.{id(nsqd)}")
    logger.handlers = [_ServerLog(nsqd.logger)]
    logger.propagate = False
    return logger


# --- responses ---------------------------------------------------------------------------------

# Upstream's V1 answers (``http_api.RespondV1``) carry X-NSQ-Content-Type; its plain-text ones
# (/ping, /debug/*), OPTIONS answers and redirects do not.
_V1 = {"X-NSQ-Content-Type": NSQ_CONTENT_TYPE}


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=go_json(value), status=status, headers=_V1,
                        content_type="application/json", charset="utf-8")


def _error(status: int, message: str) -> web.Response:
    return _json({"message": message}, status)


def _empty() -> web.Response:
    """V1 success with no data: 200, empty body, no Content-Type (as Go sends it)."""
    return web.Response(headers=_V1)


def _text(text: str, status: int = 200) -> web.Response:
    """A V1 answer whose data is a string: the bytes as they are (Go sniffs them as text)."""
    if not text:
        return _empty() if status == 200 else web.Response(status=status, headers=_V1)
    return web.Response(text=text, status=status, headers=_V1)


def _plain(text: str, status: int = 200) -> web.Response:
    """Upstream's ``PlainText`` decorator: the text, no X-NSQ-Content-Type."""
    return web.Response(text=text, status=status)


# --- request parsing ---------------------------------------------------------------------------

def _query(request: web.Request) -> dict[str, list[str]]:
    try:
        return parse_query(request.rel_url.raw_query_string)
    except ValueError:
        raise ApiError(400, "INVALID_REQUEST") from None


async def _read_bounded(request: web.Request, limit: int) -> bytes:
    """At most ``limit`` bytes of the body (callers pass their maximum + 1 to detect excess)."""
    content = request.content
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await content.read(min(limit - size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _split_text_mpub(data: bytes, max_body: int, max_msg: int) -> list[bytes]:
    """Text ``/mpub``: one message per ``\\n``-terminated line, empty lines skipped.

    ``data`` holds at most ``max_body + 1`` bytes; like upstream's line loop, a line that takes
    the running total past ``max_body`` is BODY_TOO_BIG, checked before its own MSG_TOO_BIG.
    """
    out: list[bytes] = []
    read_max = max_body + 1
    total = 0
    pos = 0
    end = len(data)
    while pos < end:
        nl = data.find(b"\n", pos)
        stop = end if nl < 0 else nl + 1
        total += stop - pos
        if total == read_max:
            raise ApiError(413, "BODY_TOO_BIG")
        line = data[pos:nl] if nl >= 0 else data[pos:end]
        pos = stop
        if not line:
            continue
        if len(line) > max_msg:
            raise ApiError(413, "MSG_TOO_BIG")
        out.append(line)
    return out


async def _read_binary_mpub(request: web.Request, max_msg: int, max_body: int) -> list[bytes]:
    """Binary ``/mpub``: ``[int32 n]`` then n × ``[int32 size][bytes]``, read as it arrives.

    There is no outer size (upstream reads straight from the request), so nothing bounds the
    body as a whole except the message count limit; every size is validated before its bytes
    are awaited. Errors are upstream's MPUB codes without ``E_``, all with status 413.
    """
    content = request.content
    buf = bytearray()
    pos = 0

    async def have(n: int) -> bool:
        nonlocal buf, pos
        while len(buf) - pos < n:
            if pos:
                del buf[:pos]
                pos = 0
            chunk = await content.read(max(_READ_CHUNK, n - len(buf)))
            if not chunk:
                return False
            buf += chunk
        return True

    def i32() -> int:
        nonlocal pos
        value = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
        pos += 4
        return value

    if not await have(4):
        raise ApiError(413, "BAD_BODY")  # MPUB failed to read message count
    count = i32()
    if count <= 0 or count > (max_body - 4) // 5:
        raise ApiError(413, "BAD_BODY")  # MPUB invalid message count
    out: list[bytes] = []
    for _ in range(count):
        if not await have(4):
            raise ApiError(413, "BAD_MESSAGE")  # failed to read message(i) body size
        size = i32()
        if size <= 0 or size > max_msg:
            raise ApiError(413, "BAD_MESSAGE")  # invalid message(i) body size / too big
        if not await have(size):
            raise ApiError(413, "BAD_MESSAGE")  # failed to read message body
        out.append(bytes(buf[pos:pos + size]))
        pos += size
    return out


# --- routing -----------------------------------------------------------------------------------

Handler = Callable[[web.Request, str], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # a trailing ":name" segment is a parameter, as in httprouter
    handler: Handler
    logged: bool = True  # upstream wraps most routes in its request-logging decorator


class Router(common_router.Router[Route]):
    """The shared httprouter (:mod:`nsqpy.common.router`) over nsqd's route table."""

    def __init__(self, routes: list[Route]) -> None:
        super().__init__()
        for r in routes:
            self.add(r.method, r.path, r)


# --- the API -----------------------------------------------------------------------------------

class HttpApi:
    """Handlers for one nsqd; each stays thin and calls into NSQD / Topic / Channel."""

    def __init__(self, nsqd: "NSQD", tls_enabled: bool = False) -> None:
        self.nsqd = nsqd
        # upstream's httpServer.tlsRequired: plain HTTP refused when --tls-required=true
        self.refuse_plain = not tls_enabled and nsqd.options.tls_required == "true"
        self.logger = nsqd.logger
        # upstream v1.3.0's Options fields: not its deprecated no-ops, not the flags of its
        # unreleased master we accept hidden (topology, auth method, experiments)
        self.config_flags = {k: f for k, f in config_key_map().items()
                             if k not in _CONFIG_HIDDEN and not f.extension and not f.hidden}
        R = Route
        self.router = Router([
            R("GET", "/ping", self.ping),
            R("GET", "/info", self.info),
            R("POST", "/pub", self.pub, logged=False),
            R("POST", "/mpub", self.mpub, logged=False),
            R("GET", "/stats", self.stats),
            R("POST", "/topic/create", self.topic_create),
            R("POST", "/topic/delete", self.topic_delete),
            R("POST", "/topic/empty", self.topic_empty),
            R("POST", "/topic/pause", self.topic_pause),
            R("POST", "/topic/unpause", self.topic_pause),
            R("POST", "/channel/create", self.channel_create),
            R("POST", "/channel/delete", self.channel_delete),
            R("POST", "/channel/empty", self.channel_empty),
            R("POST", "/channel/pause", self.channel_pause),
            R("POST", "/channel/unpause", self.channel_pause),
            R("GET", "/config/:opt", self.config),
            R("PUT", "/config/:opt", self.config),
            R("PUT", "/debug/setblockrate", self.set_block_rate),
            R("POST", "/debug/freememory", self.free_memory),
            *metrics_routes(self.nsqd, R),
            *(route for provider in nsqd.http_routes for route in provider(self)),  # features'
        ])

    # --- plumbing ------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_route("*", "/{tail:.*}", self.dispatch, expect_handler=self._expect)
        return app

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_plain:
            return self._tls_required()
        hit = self.router.match(request.method, request.path)
        if hit is not None:
            route, params = hit
            request[_LOG] = route.logged
            return await route.handler(request, next(iter(params.values()), ""))
        response = unrouted_response(self.router, request, _error)
        if response.status in (404, 405):
            request[_LOG] = True
        return response

    def _tls_required(self) -> web.Response:
        """Upstream writes this body by hand (note the spaces), before any routing."""
        body = f'{{"message": "TLS_REQUIRED", "https_port": {self.nsqd.https_port}}}'
        return web.Response(status=403, body=body.encode(), content_type="application/json",
                            charset="utf-8")

    @web.middleware
    async def _guard(self, request: web.Request, handler) -> web.StreamResponse:
        start = time.perf_counter()
        try:
            response = await handler(request)
        except ApiError as err:
            response = _error(err.status, err.message)
        except ConnectionError:
            # the client went away while its body was read: upstream's handlers answer a read
            # error with 500 INTERNAL_ERROR (nobody receives it), it is not a panic
            request[_LOG] = True
            response = _error(500, "INTERNAL_ERROR")
        except Exception as err:  # upstream's panic handler
            self.logger.error("panic in HTTP handler - %s", err, exc_info=True)
            request[_LOG] = True
            response = _error(500, "INTERNAL_ERROR")
        if request.get(_LOG):
            peer = request.transport.get_extra_info("peername") if request.transport else None
            remote = (f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or ""))
            self.logger.info("%d %s %s (%s) %s", response.status, request.method,
                             request.raw_path, remote,
                             format_duration(time.perf_counter() - start))
        return response

    def _refuses_body(self, request: web.Request) -> bool:
        """A request we will answer 413 from its Content-Length alone."""
        size = request.content_length
        if size is None or request.method != "POST":
            return False
        opts = self.nsqd.options
        return ((request.path == "/pub" and size > opts.max_msg_size)
                or (request.path == "/mpub" and size > opts.max_body_size))

    async def _expect(self, request: web.Request) -> None:
        """``Expect: 100-continue``: invite the body unless the answer is already known."""
        if request.version != HttpVersion11 or self.refuse_plain:
            return None
        expect = request.headers.get("Expect", "")
        if expect.lower() != "100-continue":
            raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")
        if self._refuses_body(request):
            return None
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
        return None

    # --- arguments -----------------------------------------------------------------------------

    @staticmethod
    def _topic_arg(query: dict[str, list[str]]) -> str:
        """``/pub``, ``/mpub``, ``/topic/create|empty``: MISSING_ARG_TOPIC / INVALID_TOPIC."""
        name = first_value(query, "topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(name):
            raise ApiError(400, "INVALID_TOPIC")
        return name

    def _existing_topic(self, name: str) -> "Topic":
        topic = self.nsqd.topics.get(name)
        if topic is None:
            raise ApiError(404, "TOPIC_NOT_FOUND")
        return topic

    def _topic_and_channel_args(self, request: web.Request) -> tuple["Topic", str]:
        """Channel endpoints: upstream's ``GetTopicChannelArgs`` then an existing topic."""
        topic_name, channel_name = topic_channel_args(_query(request))
        return self._existing_topic(topic_name), channel_name

    @staticmethod
    def _existing_channel(topic: "Topic", name: str) -> "Channel":
        channel = topic.channels.get(name)
        if channel is None:
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        return channel

    def _persist_metadata(self) -> None:
        """Pause state is persisted at once so a crash cannot silently undo it."""
        persist = getattr(self.nsqd, "persist_metadata", None)
        if persist is None:
            return
        try:
            persist()
        except Exception as err:  # upstream ignores the result: the pause itself succeeded
            self.logger.error("failed to persist metadata - %s", err)

    # --- handlers ------------------------------------------------------------------------------

    async def ping(self, request: web.Request, _: str) -> web.Response:
        # upstream answers /ping in plain text, errors included
        if self.nsqd.draining:
            return _plain("DRAINING", 503)
        if self.nsqd.health_error is not None:
            return _plain(self.nsqd.health, 500)
        return _plain("OK")

    async def info(self, request: web.Request, _: str) -> web.Response:
        nsqd, opts = self.nsqd, self.nsqd.options
        return _json({
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

    def _put(self, topic: "Topic", msgs: list[tuple], nbytes: int, delay: float = 0.0) -> None:
        if self.nsqd.exiting or topic.exiting:
            raise ApiError(503, "EXITING")
        try:
            if delay > 0:
                topic.put_deferred(msgs[0], delay)
            elif msgs:
                topic.put_many(msgs, nbytes)
        except PublishRefused as err:  # a drain, a full bounded queue (lifecycle/)
            raise ApiError(503, err.http_message) from None
        except OSError as err:
            self.logger.error("TOPIC(%s): failed to put %d message(s) - %s",
                              topic.name, len(msgs), err)
            raise ApiError(*_PUT_FAILED) from None

    async def pub(self, request: web.Request, _: str) -> web.Response:
        # upstream's order: size checks and body first, then the query, then defer
        max_msg = self.nsqd.options.max_msg_size
        if (request.content_length or 0) > max_msg:
            raise ApiError(413, "MSG_TOO_BIG")
        body = await _read_bounded(request, max_msg + 1)
        if len(body) > max_msg:
            raise ApiError(413, "MSG_TOO_BIG")
        if not body:
            raise ApiError(400, "MSG_EMPTY")
        query = _query(request)
        topic = self.nsqd.get_topic(self._topic_arg(query))  # created even if defer is bad
        delay_ns = 0
        raw_defer = first_value(query, "defer")
        if raw_defer is not None:
            try:
                # time.Duration(ms) * time.Millisecond: 64-bit, wrapping as Go's does
                delay_ns = ms_to_duration_ns(_go_parse_int(raw_defer))
            except ValueError:
                raise ApiError(400, "INVALID_DEFER") from None
            if not 0 <= delay_ns <= self.nsqd.limits.max_defer_timeout_ms * 1_000_000:
                raise ApiError(400, "INVALID_DEFER")
        msg = (self.nsqd.id_factory.next_id(), body, time.time_ns(), 0)
        self._put(topic, [msg], len(body), delay_ns / 1e9)
        if self.nsqd.replicator is not None:
            await self._replicated()
        return _text("OK")

    async def mpub(self, request: web.Request, _: str) -> web.Response:
        opts = self.nsqd.options
        max_msg, max_body = opts.max_msg_size, opts.max_body_size
        if (request.content_length or 0) > max_body:
            raise ApiError(413, "BODY_TOO_BIG")
        query = _query(request)
        topic = self.nsqd.get_topic(self._topic_arg(query))
        binary = False
        raw_binary = first_value(query, "binary")
        if raw_binary is not None:
            binary = _BOOL_PARAMS.get(raw_binary, True)
            if raw_binary not in _BOOL_PARAMS:
                self.logger.warning("deprecated value '%s' used for /mpub binary param", raw_binary)
        if binary:
            bodies = await _read_binary_mpub(request, max_msg, max_body)
        else:
            bodies = _split_text_mpub(await _read_bounded(request, max_body + 1), max_body, max_msg)
        ids = self.nsqd.id_factory.next_ids(len(bodies)) if bodies else []
        ts = time.time_ns()
        msgs = [(mid, b, ts, 0) for mid, b in zip(ids, bodies)]
        self._put(topic, msgs, sum(map(len, bodies)))
        if self.nsqd.replicator is not None:
            await self._replicated()
        return _text("OK")

    async def _replicated(self) -> None:
        """In ``--replication-ack=sync`` mode a publish is answered once the peer stored it."""
        acked = self.nsqd.replicator.acked()
        if acked is not None:
            await acked

    async def topic_create(self, request: web.Request, _: str) -> web.Response:
        self.nsqd.get_topic(self._topic_arg(_query(request)))
        return _empty()

    async def topic_delete(self, request: web.Request, _: str) -> web.Response:
        name = first_value(_query(request), "topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not self.nsqd.delete_topic(name):
            raise ApiError(404, "TOPIC_NOT_FOUND")
        return _empty()

    async def topic_empty(self, request: web.Request, _: str) -> web.Response:
        topic = self._existing_topic(self._topic_arg(_query(request)))
        try:
            topic.empty()
        except OSError as err:
            self.logger.error("TOPIC(%s): failed to empty - %s", topic.name, err)
            raise ApiError(500, "INTERNAL_ERROR") from None
        return _empty()

    async def topic_pause(self, request: web.Request, _: str) -> web.Response:
        name = first_value(_query(request), "topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        topic = self._existing_topic(name)
        if "unpause" in request.path:
            topic.unpause()
        else:
            topic.pause()
        self._persist_metadata()
        return _empty()

    async def channel_create(self, request: web.Request, _: str) -> web.Response:
        topic, channel_name = self._topic_and_channel_args(request)
        topic.get_channel(channel_name)
        return _empty()

    async def channel_delete(self, request: web.Request, _: str) -> web.Response:
        topic, channel_name = self._topic_and_channel_args(request)
        if not topic.delete_channel(channel_name):
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        return _empty()

    async def channel_empty(self, request: web.Request, _: str) -> web.Response:
        topic, channel_name = self._topic_and_channel_args(request)
        channel = self._existing_channel(topic, channel_name)
        try:
            channel.empty()
        except OSError as err:
            self.logger.error("CHANNEL(%s:%s): failed to empty - %s", topic.name, channel.name, err)
            raise ApiError(500, "INTERNAL_ERROR") from None
        return _empty()

    async def channel_pause(self, request: web.Request, _: str) -> web.Response:
        topic, channel_name = self._topic_and_channel_args(request)
        channel = self._existing_channel(topic, channel_name)
        if "unpause" in request.path:
            channel.unpause()
        else:
            channel.pause()
        self._persist_metadata()
        return _empty()

    async def stats(self, request: web.Request, _: str) -> web.Response:
        query = _query(request)
        as_json = first_value(query, "format") == "json"
        include_clients = _BOOL_PARAMS.get(first_value(query, "include_clients") or "", True)
        include_mem = _BOOL_PARAMS.get(first_value(query, "include_mem") or "", True)
        topics, producers = nsq_stats.collect(self.nsqd, first_value(query, "topic") or "",
                                              first_value(query, "channel") or "", include_clients)
        memory = nsq_stats.memory_stats() if include_mem else None
        if as_json:
            return _json(nsq_stats.stats_document(self.nsqd, topics, producers, memory))
        return _text(nsq_stats.stats_text(version_string("nsqd"), self.nsqd, topics, producers,
                                          memory))

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

    async def config(self, request: web.Request, opt: str) -> web.Response:
        if request.method == "PUT":
            max_msg = self.nsqd.options.max_msg_size
            body = await _read_bounded(request, max_msg + 1)
            if not body or len(body) > max_msg:
                raise ApiError(413, "INVALID_VALUE")
            if opt == "nsqlookupd_tcp_addresses":
                await self._set_lookupd_addresses(body)
            elif opt == "log_level":
                self._set_log_level(body)
            else:
                raise ApiError(400, "INVALID_OPTION")
        found, value = self.config_value(opt)
        if not found:
            raise ApiError(400, "INVALID_OPTION")
        if isinstance(value, str):  # RespondV1 writes a string as it is, not as JSON
            return _text(value)
        return _json(value)

    async def _set_lookupd_addresses(self, body: bytes) -> None:
        try:
            addrs = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ApiError(400, "INVALID_VALUE") from None
        # Go decodes null into a nil slice, which the option then answers as null
        if addrs is not None and (not isinstance(addrs, list)
                                  or not all(isinstance(a, str) for a in addrs)):
            raise ApiError(400, "INVALID_VALUE")
        flag = self.config_flags["nsqlookupd_tcp_addresses"]
        self.nsqd.options.values[flag.attr] = None if addrs is None else list(addrs)
        result = self.nsqd.set_lookupd_addresses(list(addrs or ()))
        if inspect.isawaitable(result):
            await result

    def _set_log_level(self, body: bytes) -> None:
        level = body.decode("utf-8", "replace").lower()  # upstream's ParseLogLevel: no trimming
        if level not in NSQ_LEVEL_NUMBERS:
            raise ApiError(400, "INVALID_VALUE")
        self.nsqd.options.values["log_level"] = level
        set_level(self.logger, level)

    # --- Go runtime debug endpoints --------------------------------------------------------------

    async def set_block_rate(self, request: web.Request, _: str) -> web.Response:
        """Go's block profiler has no counterpart; the rate is only validated.

        Upstream's handler returns no data through its plain-text decorator, which panics on
        that, so a valid rate is answered 500 INTERNAL_ERROR; we answer the same.
        """
        raw = first_value(_query(request), "rate") or ""
        try:
            _go_parse_int(raw)
        except ValueError as err:
            return _plain(f"invalid block rate : strconv.Atoi: parsing {go_quote(raw)}: {err}", 400)
        return _error(500, "INTERNAL_ERROR")

    async def free_memory(self, request: web.Request, _: str) -> web.Response:
        """``debug.FreeOSMemory`` ≈ a full collection; same 500 answer as upstream (see above)."""
        gc.collect()
        return _error(500, "INTERNAL_ERROR")


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
                     ssl_context: "ssl.SSLContext | None" = None) -> tuple[web.AppRunner, int]:
    """Serve the API on ``address`` (``host:port``, or a unix socket path); returns the port
    (-1 for unix). With ``ssl_context`` this is the HTTPS listener."""
    nsq_stats.install_gc_pause_tracker()
    api = HttpApi(nsqd, tls_enabled=ssl_context is not None)
    label = "HTTPS" if ssl_context is not None else "HTTP"
    runner = web.AppRunner(api.make_app(), access_log=None, logger=_server_logger(nsqd))
    await runner.setup()
    try:
        if is_unix_socket(address):
            site: web.BaseSite = web.UnixSite(runner, address, ssl_context=ssl_context)
            await site.start()
            nsqd.logger.info("%s: listening on %s", label, address)
            return runner, -1
        sock = listen_socket(address)  # dual-stack on 0.0.0.0, as Go
        site = web.SockSite(runner, sock, ssl_context=ssl_context)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    nsqd.logger.info("%s: listening on %s", label, sock_address(sock))
    return runner, sock.getsockname()[1]
