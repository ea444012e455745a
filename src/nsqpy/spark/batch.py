"""``spark.read.format("nsq")``: a batch read of the history nsqd retained (docs/spark.md,
"Reading history").

Planning (the driver): ask ``/history/segments`` on every nsqd of the topic (``nsqd_http_addresses``,
or the producers nsqlookupd lists), fix the range's end on each (``to=latest`` becomes "just after
that nsqd's newest message now"), and make one partition per (nsqd, group of
``segmentsPerPartition`` segments). The plan is made once per DataFrame, when Spark asks for its
schema (``load()``), and kept in the pickled data source: every action on the same DataFrame reads
the same rows. An nsqd without history (upstream's, or ours without ``--retention``) fails the
plan with an error naming it.

Reading (the executors): ``/history/read?segment=N&from=&to=`` per segment, the stream split into
records and turned into Arrow record batches of ~``batchBytes`` without a Python object per row.
Columns are the streaming source's (``attempts`` is 1, ``channel`` null unless the option is set).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceReader, InputPartition

from nsqpy.client.history import (
    EARLIEST, LATEST, HistoryError, HistoryUnavailable, Point, RecordSplitter, fetch_segments,
    parse_point, resolve_end, stream_chunks,
)
from nsqpy.client.addr import parse_address
from nsqpy.common.addr import join_host_port
from nsqpy.protocol.names import is_valid_name

from .arrow import arrow_schema, record_batch_from_frames
from .nodes import Node, NsqdHttpError, http_call, lookupd_nodes
from .options import CONNECTION_KEYS, Options

log = logging.getLogger("nsqpy.spark")

BATCH_KEYS = {"topic", "channel", "lookupdHttpAddresses", "nsqdHttpAddresses", "nsqdTcpAddresses",
              "from", "to", "segmentsPerPartition", "partitionsPerSegment", "batchBytes", "httpTimeoutMs"}


def is_batch_read(raw: Any) -> bool:
    """Options that only make sense for a batch read: ``from``/``to``, or no ``channel``."""
    keys = {k.lower() for k in dict(raw or {})}
    return "from" in keys or "to" in keys or "channel" not in keys


@dataclass(frozen=True)
class BatchConfig:
    topic: str
    channel: str | None
    lookupd_http: list[str]
    nsqd_http: list[str]
    start: Point
    end: Point
    segments_per_partition: int
    partitions_per_segment: int
    batch_bytes: int
    timeout: float
    auth_secret: str | None = None  # option authSecret: for nsqd with an auth server

    @classmethod
    def from_options(cls, raw: Any, extra_keys: set[str] = frozenset()) -> BatchConfig:  # type: ignore[assignment]
        opts = Options(raw, BATCH_KEYS | CONNECTION_KEYS | set(extra_keys))
        topic = opts.require("topic")
        if not is_valid_name(topic):
            raise ValueError(f"invalid NSQ topic name {topic!r}")
        lookupd = opts.http_addresses("lookupdHttpAddresses")
        nsqd_http = [a if "://" in a else "http://" + a for a in opts.http_addresses("nsqdHttpAddresses")]
        if not lookupd and not nsqd_http:
            raise ValueError("a batch read of format('nsq') needs lookupd_http_addresses or "
                             "nsqd_http_addresses (history is read over nsqd's HTTP API); a "
                             "streaming read (spark.readStream) needs option 'channel'")
        start = parse_point(opts.get("from") or EARLIEST, "from")
        end = parse_point(opts.get("to") or LATEST, "to")
        if start == LATEST:
            raise ValueError("nsq option 'from' cannot be latest in a batch read (nothing would be read)")
        return cls(topic=topic, channel=opts.get("channel"), lookupd_http=lookupd, nsqd_http=nsqd_http,
                   start=start, end=end,
                   segments_per_partition=opts.get_int("segmentsPerPartition", 1, 1),
                   partitions_per_segment=opts.get_int("partitionsPerSegment", 1, 1),
                   batch_bytes=opts.get_int("batchBytes", 8 << 20, 1024),
                   timeout=opts.get_int("httpTimeoutMs", 60000, 100) / 1000.0,
                   auth_secret=opts.get("authSecret"))


@dataclass(frozen=True)
class HistorySlice:
    """One partition: some segments of the topic on one nsqd, and the fixed range to read."""

    http: str
    tcp: str
    topic: str
    segments: tuple[int, ...]
    start: Point
    end: int
    count: int  # messages the segments hold (all of them, not only the range's)


def _http_nodes(cfg: BatchConfig) -> list[Node]:
    """The nsqd to ask: the HTTP addresses given (their TCP address from ``/info``, which is what
    the streaming source's ``nsqd_address`` column shows), plus nsqlookupd's producers."""
    nodes: dict[str, Node] = {}
    for http in cfg.nsqd_http:
        try:
            info = http_call(f"{http.rstrip('/')}/info", timeout=cfg.timeout,
                             secret=cfg.auth_secret) or {}
        except (OSError, NsqdHttpError, ValueError) as err:
            raise RuntimeError(f"format('nsq') batch read: cannot reach nsqd {http}: {err}") from None
        host, _ = parse_address(http.split("://", 1)[1].split("/", 1)[0])
        tcp = join_host_port(host, int(info.get("tcp_port", 4150)))
        nodes.setdefault(http.rstrip("/"), Node(tcp, http.rstrip("/")))
    if cfg.lookupd_http:
        listed = lookupd_nodes(cfg.lookupd_http, cfg.topic)
        if listed is None and not nodes:
            raise RuntimeError("format('nsq') batch read: no nsqlookupd answered "
                               f"({', '.join(cfg.lookupd_http)})")
        for node in listed or ():
            nodes.setdefault(node.http, node)
    return list(nodes.values())


def plan(cfg: BatchConfig) -> list[HistorySlice]:
    """Every (nsqd, segment group) of the range, its end fixed now. Fails, naming the nsqd, when
    one keeps no history or refuses the range."""
    slices: list[HistorySlice] = []
    for node in _http_nodes(cfg):
        try:
            history = fetch_segments(node.http, cfg.topic, cfg.start, cfg.end, timeout=cfg.timeout,
                                     secret=cfg.auth_secret)
        except HistoryUnavailable as err:
            raise RuntimeError(f"format('nsq') batch read of topic {cfg.topic!r}: {err}") from None
        except HistoryError as err:
            if err.code == "TOPIC_NOT_FOUND":
                log.info("nsq batch read: %s has no topic %s", node.http, cfg.topic)
                continue
            raise RuntimeError(f"format('nsq') batch read of topic {cfg.topic!r}: {err}") from None
        except OSError as err:
            raise RuntimeError(f"format('nsq') batch read: cannot reach nsqd {node.http}: {err}") from None
        end = resolve_end(history, cfg.end)
        segs = [s for s in history.segments if s.count > 0]
        if cfg.partitions_per_segment > 1:
            for seg in segs:
                for start, stop in time_windows(seg, cfg.start, end, cfg.partitions_per_segment):
                    slices.append(HistorySlice(node.http, node.tcp, cfg.topic, (seg.segment,), start, stop,
                                               seg.count // cfg.partitions_per_segment))
            continue
        step = cfg.segments_per_partition
        for i in range(0, len(segs), step):
            group = segs[i : i + step]
            slices.append(HistorySlice(node.http, node.tcp, cfg.topic, tuple(s.segment for s in group),
                                       cfg.start, end, sum(s.count for s in group)))
    log.info("nsq batch read of %s: %d partitions over %d nsqd", cfg.topic, len(slices),
             len({s.http for s in slices}))
    return slices


def time_windows(seg: Any, start: Point, end: int, parts: int) -> list[tuple[Point, int]]:
    """``[start, end)`` cut into ``parts`` windows at equal steps of the segment's time span: each
    record of the segment falls in exactly one (the first window starts at ``start``, the last
    ends at ``end``, whatever order the timestamps are in), so the slices read it once."""
    lo, hi = seg.first_timestamp, seg.last_timestamp + 1
    cuts = sorted({lo + (hi - lo) * i // parts for i in range(1, parts)} - {lo})
    if not isinstance(start, str):
        cuts = [c for c in cuts if c > start]
    cuts = [c for c in cuts if c < end]
    bounds: list[Point] = [start, *cuts]
    return [(bounds[i], cuts[i] if i < len(cuts) else end) for i in range(len(bounds))]


class NsqHistoryReader(DataSourceReader):
    """Spark's batch reader: the plan made on the driver, the slices read on the executors."""

    def __init__(self, config: BatchConfig, slices: list[HistorySlice] | None) -> None:
        self.config = config
        self.slices = slices

    def partitions(self) -> list[InputPartition]:
        if self.slices is None:  # a user-given schema skipped DataSource.schema(): plan now
            self.slices = plan(self.config)
        return [InputPartition(s) for s in self.slices]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_slice(partition.value, self.config)


def read_slice(part: HistorySlice, cfg: BatchConfig) -> Iterator[Any]:
    """Arrow record batches of one slice, read segment by segment."""
    schema = arrow_schema()
    for segment in part.segments:
        splitter = RecordSplitter()
        try:
            for data in stream_chunks(part.http, part.topic, part.start, part.end, segment,
                                      chunk=1 << 20, timeout=cfg.timeout, secret=cfg.auth_secret):
                splitter.feed(data)
                if splitter.pending >= cfg.batch_bytes:
                    batch = _arrow(splitter, part, cfg, schema)
                    if batch is not None:
                        yield batch
        except HistoryError as err:
            if err.code == "SEGMENT_NOT_FOUND":
                raise RuntimeError(f"format('nsq') batch read of {part.topic}: segment {segment} on "
                                   f"{part.http} expired (retention) after the read was planned; "
                                   "read again to plan over what is retained now") from None
            raise
        batch = _arrow(splitter, part, cfg, schema)
        splitter.close()
        if batch is not None:
            yield batch


def _arrow(splitter: RecordSplitter, part: HistorySlice, cfg: BatchConfig, schema: Any) -> Any:
    import numpy as np

    buf, starts, stop = splitter.take()
    if not starts:
        return None
    at = np.array(starts, np.int64)
    sizes = np.diff(at, append=stop) - 4  # each record's length field
    # record_batch_from_frames reads TCP message frames ([size:4][type:4][message]): a record
    # ([length:4][message]) starting at `s` has its message where a frame starting at s - 4,
    # of size length + 4, would
    return record_batch_from_frames(buf, at - 4, sizes + 4,
                                    part.tcp, part.topic, cfg.channel, schema)  # type: ignore[arg-type]
