"""Reading a topic's retained history on one nsqd (docs/history.md, "Reading history").

nsqd with ``--retention`` keeps what its topics received; two HTTP routes read it without a
channel: ``GET /history/segments`` (which segments hold a time range) and ``GET /history/read``
(the records of a range, streamed). This module is what the Spark sources and the tools share:

* points (``earliest`` | ``latest`` | RFC 3339 | unix milliseconds): :func:`parse_point` checks
  one and turns it into nanoseconds, :func:`format_point` writes one for a URL;
* the framing of ``/history/read`` (the log's blocks, columns by columns:
  :mod:`nsqpy.protocol.history_block`): its :class:`BlockSplitter` is sans-I/O, bytes in, block
  positions out, and :func:`messages` makes them messages for the tools;
* the two routes, blocking (urllib: Spark's planner and executors are sync code) and asyncio
  (aiohttp: the tools).

A 404 ``NOT_FOUND`` from ``/history/segments`` means the route does not exist: upstream's nsqd,
or ours without retention. :class:`HistoryUnavailable` says so and names the nsqd.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Iterator

import orjson

from nsqpy.client.httpauth import bearer, refusal
from nsqpy.protocol.history_block import CONTENT_TYPE, BlockSplitter, FramingError
from nsqpy.protocol.message import Message

EARLIEST = "earliest"
LATEST = "latest"
#: a point: EARLIEST, LATEST or nanoseconds since the epoch
Point = str | int

_RFC3339 = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)$"
)
#: the smallest unix-ms point (1973-03-03): a smaller number can only be unix seconds
MIN_UNIX_MS = 10**11


# --- points ------------------------------------------------------------------------------------


def unix_ms(value: int, what: str = "point") -> int:
    """Unix milliseconds -> ns. A number below :data:`MIN_UNIX_MS` is refused, naming both units:
    it can only be unix seconds (``1795927286`` is 2026 in seconds, January 1970 in ms, which
    would read everything), and guessing the unit by size would make one number mean two
    things."""
    if value >= MIN_UNIX_MS:
        return value * 1_000_000
    if value <= 0:
        raise ValueError(f"invalid {what} {value}: points are unix milliseconds from {MIN_UNIX_MS} "
                         "(1973) on; for the oldest retained message give earliest")
    raise ValueError(f"invalid {what} {value}: points are unix milliseconds, not seconds; as "
                     f"seconds {value} is {format_point(value * 1_000_000_000)}: give "
                     f"{value * 1000} or that RFC 3339 time")


def parse_point(text: str | int, what: str = "point") -> Point:
    """``earliest`` | ``latest`` | RFC 3339 (fractions to the nanosecond) | unix ms -> a Point.

    ValueError names ``what`` (``from``, ``to``...) and the text when it is none of these, and
    both units for a number that can only be unix seconds (:func:`unix_ms`)."""
    if isinstance(text, int):
        return unix_ms(text, what)
    value = text.strip()
    low = value.lower()
    if low in (EARLIEST, LATEST):
        return low
    if re.fullmatch(r"-?\d+", value):
        return unix_ms(int(value), what)
    m = _RFC3339.match(value)
    if m:
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        fraction, zone = m.group(7) or "", m.group(8)
        try:
            tz = timezone.utc if zone in ("Z", "z") else datetime.strptime(zone.replace(":", ""), "%z").tzinfo
            moment = datetime(year, month, day, hour, minute, second, tzinfo=tz)
        except ValueError:
            pass
        else:
            whole = int(moment.timestamp())
            return whole * 1_000_000_000 + int(fraction.ljust(9, "0") or 0)
    raise ValueError(f"invalid {what} {text!r}: want earliest, latest, an RFC 3339 time "
                     "(2026-11-28T03:00:00Z) or unix milliseconds")


def format_point(point: Point) -> str:
    """A point as nsqd's routes take it: the keyword, or RFC 3339 in UTC to the nanosecond."""
    if isinstance(point, str):
        return point
    seconds, nanos = divmod(point, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{nanos:09d}Z" if nanos else f"{stamp}Z"


def rfc3339(ns: int) -> str:
    """For messages: a timestamp in ns as RFC 3339."""
    return format_point(ns)


# --- the framing ------------------------------------------------------------------------------


def messages(splitter: BlockSplitter) -> list[Message]:
    """The messages of every complete block fed to ``splitter`` so far (attempts 1: a read
    delivers nothing, as a first delivery would count)."""
    return [Message(i, b, t, 1) for i, b, t in splitter.records()]


def check_framing(nsqd: str, content_type: str | None) -> None:
    """FramingError unless the answer is in the block framing this reader reads (an nsqd of an
    older nsqpy sends one record at a time)."""
    if (content_type or "").split(";")[0].strip() != CONTENT_TYPE:
        raise FramingError(f"nsqd {nsqd} answered /history/read with {content_type!r}, not "
                           f"{CONTENT_TYPE}: an nsqpy nsqd older than this reader; upgrade it")


# --- the HTTP routes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    segment: int
    first_timestamp: int
    last_timestamp: int
    count: int
    bytes: int


@dataclass(frozen=True)
class TopicHistory:
    """``/history/segments``'s answer for one topic on one nsqd (``nsqd`` is its HTTP base)."""

    nsqd: str
    topic: str
    retention_ns: int
    retention_bytes: int
    oldest_timestamp: int
    newest_timestamp: int
    messages: int
    bytes: int
    segments: tuple[Segment, ...]

    @classmethod
    def from_json(cls, nsqd: str, doc: dict[str, Any]) -> TopicHistory:
        return cls(
            nsqd=nsqd, topic=str(doc.get("topic", "")),
            retention_ns=int(doc.get("retention_ns") or 0),
            retention_bytes=int(doc.get("retention_bytes") or 0),
            oldest_timestamp=int(doc.get("oldest_timestamp") or 0),
            newest_timestamp=int(doc.get("newest_timestamp") or 0),
            messages=int(doc.get("messages") or 0), bytes=int(doc.get("bytes") or 0),
            segments=tuple(Segment(int(s["segment"]), int(s.get("first_timestamp") or 0),
                                   int(s.get("last_timestamp") or 0), int(s.get("count") or 0),
                                   int(s.get("bytes") or 0)) for s in doc.get("segments") or ()),
        )


#: the words every reader's error has when an nsqd, or a topic on it, keeps no history (the
#: click pipeline looks for them to skip its history comparison on a cluster without it)
NO_HISTORY = "keeps no history"


def retention_call(nsqd: str, topic: str) -> str:
    """The call that turns a topic's history on, for error texts to show."""
    return (f"curl -d '{{\"retention\": \"24h\"}}' "
            f"'{nsqd}/topic/config?topic={urllib.parse.quote(topic, safe='#')}'")


def _advice(code: str, nsqd: str, topic: str) -> str:
    """What to do about a refusal, by its code (empty for codes that say it themselves)."""
    if code == "RETENTION_OFF":
        return (f"topic {topic!r} {NO_HISTORY} on this nsqd; keep it from now on with "
                f"{retention_call(nsqd, topic)}, or start nsqd with --retention")
    if code == "TOPIC_NOT_FOUND":
        return f"this nsqd has no topic {topic!r}: check its name ({nsqd}/stats lists the topics)"
    if code == "BEFORE_OLDEST":
        return "read from that time on, or from earliest"
    if code in ("INVALID_FROM", "INVALID_TO"):
        return ("a point is earliest, latest, an RFC 3339 time (2026-11-28T03:00:00Z) or unix "
                "milliseconds")
    if code == "SEGMENT_NOT_FOUND":
        return "the segment expired since the read was planned: read again"
    if code == "EPHEMERAL":
        return f"#ephemeral topics and channels {NO_HISTORY}"
    return ""


class HistoryError(Exception):
    """nsqd refused a history request: ``code`` is the first word of its message
    (``BEFORE_OLDEST``...), ``message`` the whole of it (``BEFORE_OLDEST: the oldest retained
    message is from ...``). The text adds what it means (an auth refusal) or what to do about
    it (the flag, the call)."""

    def __init__(self, nsqd: str, status: int, message: str, what: str = "", topic: str = "") -> None:
        self.nsqd, self.status, self.message, self.topic = nsqd, status, message, topic
        self.code = message.split(":", 1)[0].strip()
        meaning = refusal(status, message)  # (an auth refusal says what it means)
        advice = _advice(self.code, nsqd, topic)
        super().__init__(f"nsqd {nsqd}: {what + ': ' if what else ''}HTTP {status} {message}"
                         + (f" - {meaning}" if meaning else "") + (f": {advice}" if advice else ""))


class HistoryUnavailable(HistoryError):
    """The nsqd has no history routes: upstream's nsqd, or ours started without retention."""

    def __init__(self, nsqd: str, topic: str = "") -> None:
        super().__init__(nsqd, 404, "NOT_FOUND", topic=topic)
        keep = f", or keep one topic's with {retention_call(nsqd, topic)}" if topic else ""
        self.args = (f"nsqd {nsqd} {NO_HISTORY} (/history/segments is NOT_FOUND): it must be "
                     f"nsqpy's nsqd started with --retention (or --retention-bytes){keep}; "
                     "upstream's nsqd has none",)

    def __str__(self) -> str:
        return str(self.args[0])


def http_base(address: str) -> str:
    """``host:port`` or a URL -> ``http://host:port`` (no trailing slash)."""
    return (address if "://" in address else "http://" + address).rstrip("/")


def _params(topic: str, start: Point | None, end: Point | None, segment: int | None,
            window: tuple[int, int | None] | None = None) -> str:
    params: dict[str, Any] = {"topic": topic}
    if start is not None:
        params["from"] = format_point(start)
    if end is not None:
        params["to"] = format_point(end)
    if segment is not None:
        params["segment"] = segment
    if window is not None:  # the segment's blocks that start in [byte_from, byte_to)
        params["byte_from"] = window[0]
        if window[1] is not None:
            params["byte_to"] = window[1]
    return urllib.parse.urlencode(params)


def segments_url(nsqd: str, topic: str, start: Point | None = None, end: Point | None = None) -> str:
    return f"{http_base(nsqd)}/history/segments?{_params(topic, start, end, None)}"


def read_url(nsqd: str, topic: str, start: Point | None = None, end: Point | None = None,
             segment: int | None = None, window: tuple[int, int | None] | None = None) -> str:
    return f"{http_base(nsqd)}/history/read?{_params(topic, start, end, segment, window)}"


def _error(nsqd: str, status: int, body: bytes, route: str, topic: str) -> HistoryError:
    try:
        code = str(orjson.loads(body).get("message", ""))
    except (orjson.JSONDecodeError, AttributeError):
        code = body.decode("utf-8", "replace").strip()
    if status == 404 and code == "NOT_FOUND":
        return HistoryUnavailable(nsqd, topic)
    return HistoryError(nsqd, status, code, route, topic)


# blocking (Spark) ------------------------------------------------------------------------------


def _open(url: str, nsqd: str, route: str, topic: str, timeout: float, secret: str | None) -> Any:
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=bearer(secret)),
                                      timeout=timeout)
    except urllib.error.HTTPError as err:
        raise _error(nsqd, err.code, err.read(), route, topic) from None


def fetch_segments(nsqd: str, topic: str, start: Point | None = None, end: Point | None = None,
                   timeout: float = 10.0, secret: str | None = None) -> TopicHistory:
    """``/history/segments`` on one nsqd (blocking). HistoryUnavailable / HistoryError / OSError.
    ``secret``: for an nsqd with an auth server (sent as ``Authorization: Bearer``)."""
    base = http_base(nsqd)
    with _open(segments_url(base, topic, start, end), base, "/history/segments", topic,
               timeout, secret) as resp:
        doc = orjson.loads(resp.read())
    if isinstance(doc, dict) and "segments" not in doc and isinstance(doc.get("data"), dict):
        doc = doc["data"]  # the pre-1.0 envelope, if nsqd was asked for it
    return TopicHistory.from_json(base, doc)


def stream_chunks(nsqd: str, topic: str, start: Point | None = None, end: Point | None = None,
                  segment: int | None = None, chunk: int = 1 << 20, timeout: float = 60.0,
                  window: tuple[int, int | None] | None = None,
                  secret: str | None = None) -> Iterator[bytes]:
    """The raw bytes of ``/history/read`` (blocking), as they arrive; ``window``: of
    ``segment``, the blocks that start in ``[byte_from, byte_to)``."""
    base = http_base(nsqd)
    with _open(read_url(base, topic, start, end, segment, window), base, "/history/read", topic,
               timeout, secret) as resp:
        check_framing(base, resp.headers.get("Content-Type"))
        while True:
            data = resp.read1(chunk)
            if not data:
                return
            yield data


def read_messages(nsqd: str, topic: str, start: Point | None = None, end: Point | None = None,
                  segment: int | None = None, timeout: float = 60.0,
                  secret: str | None = None) -> Iterator[Message]:
    """The messages of a range on one nsqd, in log order (blocking)."""
    splitter = BlockSplitter()
    for data in stream_chunks(nsqd, topic, start, end, segment, timeout=timeout, secret=secret):
        splitter.feed(data)
        yield from messages(splitter)
    splitter.close()


# asyncio (tools) -------------------------------------------------------------------------------


async def afetch_segments(session: Any, nsqd: str, topic: str, start: Point | None = None,
                          end: Point | None = None, secret: str | None = None) -> TopicHistory:
    """``/history/segments`` with an ``aiohttp.ClientSession``."""
    base = http_base(nsqd)
    async with session.get(segments_url(base, topic, start, end), headers=bearer(secret)) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise _error(base, resp.status, body, "/history/segments", topic)
    doc = orjson.loads(body)
    if isinstance(doc, dict) and "segments" not in doc and isinstance(doc.get("data"), dict):
        doc = doc["data"]
    return TopicHistory.from_json(base, doc)


async def aread_messages(session: Any, nsqd: str, topic: str, start: Point | None = None,
                         end: Point | None = None, segment: int | None = None,
                         secret: str | None = None) -> AsyncIterator[list[Message]]:
    """The messages of a range on one nsqd, a list per network read (aiohttp)."""
    base = http_base(nsqd)
    splitter = BlockSplitter()
    async with session.get(read_url(base, topic, start, end, segment),
                           headers=bearer(secret)) as resp:
        if resp.status != 200:
            raise _error(base, resp.status, await resp.read(), "/history/read", topic)
        check_framing(base, resp.headers.get("Content-Type"))
        async for data in resp.content.iter_any():
            splitter.feed(data)
            batch = messages(splitter)
            if batch:
                yield batch
    splitter.close()


def resolve_end(history: TopicHistory, end: Point) -> int:
    """A fixed upper bound (exclusive, ns) for ``end`` on this nsqd: ``latest`` becomes just
    after its newest message now, so a read planned now gives the same rows later."""
    if end == LATEST:
        return history.newest_timestamp + 1 if history.newest_timestamp else 0
    if end == EARLIEST:
        return history.oldest_timestamp
    return int(end)


__all__ = [
    "EARLIEST", "LATEST", "NO_HISTORY", "BlockSplitter", "FramingError", "HistoryError",
    "HistoryUnavailable", "Point", "Segment", "TopicHistory", "afetch_segments", "aread_messages",
    "check_framing", "fetch_segments", "format_point", "http_base", "messages", "parse_point",
    "read_messages", "read_url", "resolve_end", "retention_call", "rfc3339", "segments_url",
    "stream_chunks",
]
