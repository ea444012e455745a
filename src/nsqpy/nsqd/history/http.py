"""The history's HTTP routes (docs/history.md §3; the contract in HISTORY-CONTRACT.md):
``GET /history/segments``, ``GET /history/read`` (streamed), ``POST /channel/create`` with
``from=`` (without it: upstream's route, unchanged), ``POST /channel/rewind``.

Errors are upstream's V1 shape ``{"message": CODE}``; BEFORE_OLDEST adds the oldest retained
timestamp, as RFC 3339 in the message and as ``oldest``/``oldest_timestamp`` keys."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Callable

from ...common.goweb import ApiError, first_value, go_json, topic_channel_args
from ...common.http_api import v1_error, v1_json
from ...httpserver import Request
from ...protocol.history_block import CONTENT_TYPE
from ...protocol.names import is_ephemeral, is_valid_name
from ...httpserver import DRAIN
from ..auth.needs import SUBSCRIBE, on_channel, on_channel_unless, on_topic
from ..http import EMPTY, Route
from .blocks import RangeRead, plan_read
from .log import Log
from .points import EARLIEST, LATEST, SecondsNotMillis, parse_point, rfc3339
from .replay import start_replay

if TYPE_CHECKING:
    from ..http import NsqdHTTP

#: what a read that failed midway sends last: a block head announcing more than ever comes
_BROKEN_OFF = b"\xff" * 8
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
    except SecondsNotMillis as err:  # the code first, as BEFORE_OLDEST: clients match its prefix
        raise ApiError(400, f"INVALID_{key.upper()}: {err}") from None
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
        spans = plan_read(log, frm, to, start, stop, _byte_window(query, raw_segment))
        return _stream(request, RangeRead(spans, frm, to), nsqd.history.readers, nsqd.logger)

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


def _byte_window(query: dict[str, list[str]], segment: str | None) -> tuple[int, int] | None:
    """``byte_from``/``byte_to``: the blocks of the segment that start in ``[from, to)``
    (either may be left out: the segment's start, its end)."""
    raw = {key: first_value(query, key) for key in ("byte_from", "byte_to")}
    if raw["byte_from"] is None and raw["byte_to"] is None:
        return None
    if segment is None:
        raise ApiError(400, "MISSING_ARG_SEGMENT")
    bounds = []
    for key, default in (("byte_from", 0), ("byte_to", 1 << 62)):
        text = raw[key]
        if text is not None and not (text.isascii() and text.isdigit() and len(text) < 19):
            raise ApiError(400, f"INVALID_{key.upper()}")
        bounds.append(default if text is None else int(text))
    return bounds[0], bounds[1]


async def _stream(request: Request, reader: RangeRead, pool: Executor, logger: Any) -> Any:
    """The blocks, written to the connection as the reader thread reads them (one piece read
    ahead): the answer has no length and ends when the connection closes
    (``Connection: close``)."""
    transport = request.conn.transport  # type: ignore[attr-defined]
    version = b"HTTP/1.1" if request.http11 else b"HTTP/1.0"
    transport.write(version + b" 200 OK\r\nContent-Type: " + CONTENT_TYPE.encode()
                    + b"\r\nConnection: close\r\n\r\n")
    loop = asyncio.get_running_loop()
    pending = loop.run_in_executor(pool, reader.next_piece)
    try:
        while True:
            try:
                piece = await pending
            except Exception as err:  # (a failed read, a damaged block: the 200 head is out)
                logger.error("HISTORY: /history/read failed - %s", err)
                # the answer ends inside a block: every reader fails (FramingError), none
                # takes what came for a shorter range
                transport.write(_BROKEN_OFF)
                break
            if piece is None or transport.is_closing():
                break
            pending = loop.run_in_executor(pool, reader.next_piece)
            transport.write(piece)
            if transport.get_write_buffer_size() > _HIGH_WATER:
                while (transport.get_write_buffer_size() > _LOW_WATER
                       and not transport.is_closing()):
                    await asyncio.sleep(0.002)
    finally:  # the reader's file is closed once its last read returned
        pending.add_done_callback(lambda _: reader.close())
    request.raw = b""  # the answer is written: the connection closes after it
    return EMPTY
