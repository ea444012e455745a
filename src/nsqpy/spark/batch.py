"""``spark.read.format("nsq")``: a batch read of the history nsqd retained (docs/spark.md,
"Reading history").

Planning (the driver): ask ``/history/segments`` on every nsqd of the topic (``nsqd_http_addresses``,
or the producers nsqlookupd lists), fix the range's end on each (``to=latest`` becomes "just after
that nsqd's newest message now"), and make partitions of about ``partitionBytes`` each (by
default the topic's bytes over the executors' cores, 1-64 MiB): small segments together, a large
one cut into byte windows (the blocks that start in each), so every core has work even for a
topic with one segment. ``segmentsPerPartition`` / ``partitionsPerSegment`` ask for whole
segments grouped, or each segment cut in that many windows. The plan is made once per DataFrame, when Spark asks for its
schema (``load()``), and kept in the pickled data source: every action on the same DataFrame reads
the same rows. An nsqd without history (upstream's, or ours without ``--retention``) fails the
plan with an error naming it.

Reading (the executors): ``/history/read?segment=N&from=&to=[&byte_from=&byte_to=]`` per segment
or window: nsqd sends the log's blocks as stored, the stream is split into blocks and each run of
~``batchBytes`` becomes an Arrow record batch by columns (one Python step per block, none per row).
Columns are the streaming source's (``attempts`` is 1, ``channel`` null unless the option is set).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceReader, InputPartition

from nsqpy.client.history import (
    EARLIEST, LATEST, BlockSplitter, HistoryError, HistoryUnavailable, Point, fetch_segments,
    parse_point, resolve_end, stream_chunks,
)
from nsqpy.client.addr import parse_address
from nsqpy.common.addr import join_host_port
from nsqpy.protocol.names import is_valid_name

from .arrow import arrow_schema, record_batch_from_blocks
from .nodes import Node, NsqdHttpError, http_call, lookupd_nodes
from .options import CONNECTION_KEYS, Options

log = logging.getLogger("nsqpy.spark")

BATCH_KEYS = {"topic", "channel", "lookupdHttpAddresses", "nsqdHttpAddresses", "nsqdTcpAddresses",
              "from", "to", "segmentsPerPartition", "partitionsPerSegment", "partitionBytes", "batchBytes",
              "httpTimeoutMs"}
#: the default partition size: the topic's bytes over the executors' cores, within these bounds
MIN_PARTITION_BYTES = 1 << 20
MAX_PARTITION_BYTES = 64 << 20


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
    segments_per_partition: int  # (0: not asked; partitions by bytes)
    partitions_per_segment: int
    batch_bytes: int
    timeout: float
    auth_secret: str | None = None  # option authSecret: for nsqd with an auth server
    partition_bytes: int = 0  # (0: from the topic's size and the cores)

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
                   segments_per_partition=opts.get_int("segmentsPerPartition", 0, 1),
                   partitions_per_segment=opts.get_int("partitionsPerSegment", 1, 1),
                   batch_bytes=opts.get_int("batchBytes", 8 << 20, 1024),
                   timeout=opts.get_int("httpTimeoutMs", 60000, 100) / 1000.0,
                   auth_secret=opts.get("authSecret"),
                   partition_bytes=opts.get_int("partitionBytes", 0, 1024))


@dataclass(frozen=True)
class HistorySlice:
    """One partition: some segments of the topic on one nsqd (or a byte window of one), and the
    fixed range to read."""

    http: str
    tcp: str
    topic: str
    segments: tuple[int, ...]
    start: Point
    end: int
    count: int  # messages the segments hold (all of them, not only the range's; a window's share)
    #: of the one segment, the blocks that start in ``[byte_from, byte_to)`` (None: to its end)
    window: tuple[int, int | None] | None = None


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


def plan(cfg: BatchConfig, parallelism: int = 2) -> list[HistorySlice]:
    """Every partition of the range on every nsqd, its end fixed now (``parallelism``: the
    executors' cores, which the default partition size spreads the topic over). Fails, naming
    the nsqd, when one keeps no history or refuses the range."""
    slices: list[HistorySlice] = []
    nodes = _http_nodes(cfg)
    missing: list[str] = []
    for node in nodes:
        try:
            history = fetch_segments(node.http, cfg.topic, cfg.start, cfg.end, timeout=cfg.timeout,
                                     secret=cfg.auth_secret)
        except HistoryUnavailable as err:
            raise RuntimeError(f"format('nsq') batch read of topic {cfg.topic!r}: {err}") from None
        except HistoryError as err:
            if err.code == "TOPIC_NOT_FOUND":
                log.info("nsq batch read: %s has no topic %s", node.http, cfg.topic)
                missing.append(node.http)
                continue
            raise RuntimeError(f"format('nsq') batch read of topic {cfg.topic!r}: {err}") from None
        except OSError as err:
            raise RuntimeError(f"format('nsq') batch read: cannot reach nsqd {node.http}: {err}") from None
        end = resolve_end(history, cfg.end)
        segs = [s for s in history.segments if s.count > 0]
        for group, window, count in partition_segments(segs, cfg, parallelism):
            slices.append(HistorySlice(node.http, node.tcp, cfg.topic, group, cfg.start, end, count, window))
    if len(missing) == len(nodes):  # a typo reads as nothing: say so where the user looks
        log.warning("nsq batch read: no nsqd has topic %r (%s): 0 rows", cfg.topic,
                    ", ".join(missing) or "nsqlookupd lists no producer of it")
    log.info("nsq batch read of %s: %d partitions over %d nsqd", cfg.topic, len(slices),
             len({s.http for s in slices}))
    return slices


def partition_segments(segs: list[Any], cfg: BatchConfig, parallelism: int
                       ) -> list[tuple[tuple[int, ...], tuple[int, int | None] | None, int]]:
    """``(segments, byte window, messages)`` per partition: ``segmentsPerPartition`` whole
    segments, or each segment in ``partitionsPerSegment`` windows, or (neither asked) about
    ``partitionBytes`` each: consecutive small segments together, a larger one in windows."""
    if cfg.segments_per_partition:
        step = cfg.segments_per_partition
        return [(tuple(s.segment for s in segs[i:i + step]), None, sum(s.count for s in segs[i:i + step]))
                for i in range(0, len(segs), step)]
    if cfg.partitions_per_segment > 1:
        return [piece for seg in segs for piece in byte_windows(seg, cfg.partitions_per_segment)]
    target = cfg.partition_bytes or min(MAX_PARTITION_BYTES, max(
        MIN_PARTITION_BYTES, -(-sum(s.bytes for s in segs) // max(1, parallelism))))
    out: list[tuple[tuple[int, ...], tuple[int, int | None] | None, int]] = []
    group: list[Any] = []
    for seg in segs:
        if group and sum(s.bytes for s in group) + seg.bytes > target:
            out.append((tuple(s.segment for s in group), None, sum(s.count for s in group)))
            group = []
        if seg.bytes > target:
            out += byte_windows(seg, -(-seg.bytes // target))
        else:
            group.append(seg)
    if group:
        out.append((tuple(s.segment for s in group), None, sum(s.count for s in group)))
    return out


def byte_windows(seg: Any, parts: int) -> list[tuple[tuple[int, ...], tuple[int, int | None] | None, int]]:
    """A segment in ``parts`` windows of equal bytes; nsqd gives each the blocks that start in
    it, so every block is read once; the last window is open (what was appended since the plan
    is past the range's fixed end anyway)."""
    if parts <= 1:
        return [((seg.segment,), None, seg.count)]
    cuts = [seg.bytes * i // parts for i in range(parts)]
    return [((seg.segment,), (cut, cuts[i + 1] if i + 1 < parts else None), seg.count // parts)
            for i, cut in enumerate(cuts)]


class NsqHistoryReader(DataSourceReader):
    """Spark's batch reader: the plan made on the driver, the slices read on the executors."""

    def __init__(self, config: BatchConfig, slices: list[HistorySlice] | None, parallelism: int = 2) -> None:
        self.config = config
        self.slices = slices
        self.parallelism = parallelism

    def partitions(self) -> list[InputPartition]:
        if self.slices is None:  # a user-given schema skipped DataSource.schema(): plan now
            self.slices = plan(self.config, self.parallelism)
        return [InputPartition(s) for s in self.slices]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # an empty plan: PySpark reads [] as one partition, [InputPartition(None)] (4.1+) or
        # [None] (4.0)
        if partition is None or partition.value is None:
            return iter(())
        return read_slice(partition.value, self.config)


def read_slice(part: HistorySlice, cfg: BatchConfig) -> Iterator[Any]:
    """Arrow record batches of one slice, read segment by segment."""
    schema = arrow_schema()
    for segment in part.segments:
        splitter = BlockSplitter()
        try:
            for data in stream_chunks(part.http, part.topic, part.start, part.end, segment,
                                      chunk=1 << 20, timeout=cfg.timeout, window=part.window,
                                      secret=cfg.auth_secret):
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


def _arrow(splitter: BlockSplitter, part: HistorySlice, cfg: BatchConfig, schema: Any) -> Any:
    buf, starts, counts, stop = splitter.take()
    if not starts:
        return None
    return record_batch_from_blocks(buf, starts, counts, stop, part.tcp, part.topic, cfg.channel, schema)
