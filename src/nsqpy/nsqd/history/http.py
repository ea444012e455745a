"""The history's HTTP routes (docs/history.md §3; the contract in HISTORY-CONTRACT.md):
``GET /history/segments``, ``GET /history/read`` (streamed), ``POST /channel/create`` with
``from=`` (without it: upstream's route, unchanged), ``POST /channel/rewind``.

Errors are upstream's V1 shape ``{"message": CODE}``; BEFORE_OLDEST adds the oldest retained
timestamp, as RFC 3339 in the message and as ``oldest``/``oldest_timestamp`` keys."""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING, Any, Callable

from ...common.goweb import ApiError, first_value, go_json, topic_channel_args
from ...common.http_api import v1_error, v1_json
from ...httpserver import Request
from ...protocol.names import is_ephemeral, is_valid_name
from ...httpserver import DRAIN
from ..auth.needs import SUBSCRIBE, on_channel, on_channel_unless, on_topic
from ..http import EMPTY, Route
from .log import Cursor, Log
from .points import EARLIEST, LATEST, parse_point, rfc3339
from .replay import start_replay

if TYPE_CHECKING:
    from ..http import NsqdHTTP

#: a history read's record: length, then the V2 message (timestamp, attempts 1, id, body)
_OUT = struct.Struct(">IqH")
_HIGH_WATER = 4 << 20  # a reader slower than us: wait while this much is unsent
_LOW_WATER = 1 << 20


class Refused(Exception):
    def __init__(self, response: Any) -> None:
        self.response = response


def _refusals(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
    def run(request: Request) -> Any:
        try:
            return handler(request)
        except Refused as err:
            return err.response
    return run


def _point(query: dict[str, list[str]], key: str, default: int) -> int:
    raw = first_value(query, key)
    if raw is None:
        return default
    try:
        return parse_point(raw)
    except ValueError:
        raise ApiError(400, f"INVALID_{key.upper()}") from None


def _not_before_oldest(log: Log, point: int) -> None:
    """Refuse a point whose messages expiry dropped already (a point before the first message
    of a log that never dropped anything is no error: nothing is missing)."""
    if point in (EARLIEST, LATEST) or not log.dropped_ts or point > log.dropped_ts:
        return
    oldest = log.oldest()
    when = rfc3339(oldest) if oldest else "none (every message expired)"
    head, _ = v1_error(400, "BEFORE_OLDEST")
    raise Refused((head, go_json({
        "message": f"BEFORE_OLDEST: the oldest retained message is from {when}",
        "oldest": when, "oldest_timestamp": oldest})))


def history_routes(api: "NsqdHTTP") -> list[Route]:
    nsqd = api.nsqd

    def topic_log(query: dict[str, list[str]]) -> tuple[Any, Log]:
        name = first_value(query, "topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(name):
            raise ApiError(400, "INVALID_TOPIC")
        topic = api.existing_topic(name)
        return topic, _log_of(topic)

    def _log_of(topic: Any) -> Log:
        if topic.ephemeral:
            raise ApiError(400, "EPHEMERAL")
        if topic.history is None:
            raise ApiError(400, "RETENTION_OFF")
        return topic.history

    def range_of(log: Log, query: dict[str, list[str]]) -> tuple[int, int]:
        frm = _point(query, "from", EARLIEST)
        to = _point(query, "to", LATEST)
        _not_before_oldest(log, frm)
        return frm, to

    def segments(request: Request) -> Any:
        query = api.query(request)
        topic, log = topic_log(query)
        frm, to = range_of(log, query)
        segs = [s.summary() for s in log.segments
                if s.count and s.max_ts >= frm and s.min_ts < to]
        return v1_json({"topic": topic.name, "retention_ns": log.retention_ns,
                        "retention_bytes": log.retention_bytes,
                        "oldest_timestamp": log.oldest(), "newest_timestamp": log.newest(),
                        "messages": log.messages(), "bytes": log.total_bytes(),
                        "segments": segs})

    def read(request: Request) -> Any:
        query = api.query(request)
        _, log = topic_log(query)
        frm, to = range_of(log, query)
        stop = log.end()  # "latest": what exists when the request arrives
        for seg in log.segments:  # segments entirely at or after `to` are not read at all
            if seg.count and seg.min_ts >= to and (seg.sid, 0) < stop:
                stop = (seg.sid, 0)
                break
        raw_segment = first_value(query, "segment")
        if raw_segment is None:
            start = log.position(frm)
        else:
            if not raw_segment.isascii() or not raw_segment.isdigit():
                raise ApiError(400, "INVALID_SEGMENT")
            seg = log.segment(int(raw_segment))
            if seg is None:
                raise ApiError(404, "SEGMENT_NOT_FOUND")
            start = (seg.sid, seg.seek(frm))
            stop = min(stop, (seg.sid, seg.size))
        return _stream(request, Cursor(log, *start, stop=stop), frm, to)

    def channel_create(request: Request) -> Any:
        query = api.query(request, reads_body=True)
        if first_value(query, "from") is None:
            return api.channel_create(request)  # upstream's route
        return _replay(query, "from", create=True)

    def channel_rewind(request: Request) -> Any:
        query = api.query(request, reads_body=True)
        if first_value(query, "to") is None:
            topic_channel_args(query)  # MISSING_ARG_TOPIC / _CHANNEL first, as upstream orders
            raise ApiError(400, "MISSING_ARG_TO")
        return _replay(query, "to", create=False)

    def _replay(query: dict[str, list[str]], key: str, create: bool) -> Any:
        topic_name, channel_name = topic_channel_args(query)
        topic = api.existing_topic(topic_name)
        if is_ephemeral(channel_name):
            raise ApiError(400, "EPHEMERAL")
        log = _log_of(topic)
        point = _point(query, key, EARLIEST)
        _not_before_oldest(log, point)
        if create:
            channel = topic.get_channel(channel_name)
        else:
            channel = api.existing_channel(topic, channel_name)
        if point != LATEST:
            start_replay(channel, log, point)
            nsqd.logger.info("HISTORY(%s): channel %s replays from %s (%s)", topic.name,
                             channel_name, query[key][0],
                             "caught up" if channel.feeder is None else "under way")
        return EMPTY

    # with an auth server: subscribe on the topic (channel) read or moved (docs/security.md)
    reads = on_topic(SUBSCRIBE)
    return [
        Route("GET", "/history/segments", _refusals(segments), auth=reads),
        Route("GET", "/history/read", _refusals(read), auth=reads),
        Route("POST", "/channel/create", _refusals(channel_create), DRAIN,
              auth=on_channel_unless("from", SUBSCRIBE)),
        Route("POST", "/channel/rewind", _refusals(channel_rewind), DRAIN,
              auth=on_channel(SUBSCRIBE)),
    ]


async def _stream(request: Request, cursor: Cursor, frm: int, to: int) -> Any:
    """The records, written to the connection as they are read: the answer has no length and
    ends when the connection closes (``Connection: close``)."""
    transport = request.conn.transport  # type: ignore[attr-defined]
    version = b"HTTP/1.1" if request.http11 else b"HTTP/1.0"
    transport.write(version + b" 200 OK\r\nContent-Type: application/octet-stream\r\n"
                    b"Connection: close\r\n\r\n")
    pack = _OUT.pack
    try:
        for recs in cursor:
            parts: list[bytes] = []
            extend = parts.extend
            last_ts = last_n = -1
            head = b""
            for mid, body, ts, _delay in recs:
                if frm <= ts < to:
                    n = len(body)
                    if ts != last_ts or n != last_n:  # (an MPUB's records share one head)
                        head, last_ts, last_n = pack(n + 26, ts, 1), ts, n
                    extend((head, mid, body))
            if parts:
                transport.write(b"".join(parts))
            if transport.is_closing():
                break
            if transport.get_write_buffer_size() > _HIGH_WATER:
                while (transport.get_write_buffer_size() > _LOW_WATER
                       and not transport.is_closing()):
                    await asyncio.sleep(0.002)
            else:
                await asyncio.sleep(0)  # publishers go on between chunks
    finally:
        cursor.close()
    request.raw = b""  # the answer is written: the connection closes after it
    return EMPTY
