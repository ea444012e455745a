"""``df.write.format("nsq")`` / ``df.writeStream.format("nsq")``: publish rows from the executors.

Each Spark task publishes its rows itself (nothing goes through the driver): the ``body`` column
(binary or string) becomes the message, an optional ``topic`` column picks the topic per row
(else the ``topic`` option). Rows are sent as MPUB commands bounded by ``mpubSize`` messages and
``mpubBytes`` bytes (keep it under nsqd's ``--max-body-size``, 5 MiB by default), at most
``maxPendingMpubs`` awaiting nsqd's ``OK`` at a time; ``write()`` returns only once every chunk
was acknowledged, so a task that succeeded has published all its rows.

Delivery is at-least-once: a retried task or a replayed micro-batch publishes again, and NSQ
has no transactions. Put a key in the body if consumers must deduplicate (see docs/spark.md).

The writers get Arrow record batches (``DataSourceArrowWriter`` /
``DataSourceStreamArrowWriter``), which skips PySpark's per-row ``Row`` objects. Each task opens
its connections on one I/O thread per executor Python process (created on first use, reused by
the next tasks of that process) and closes them when done; nothing live is ever pickled.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, cast

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from nsqpy.client import LoopThread, Producer
from nsqpy.protocol.names import is_valid_name

from .options import CONNECTION_KEYS, Options, connection_options, connection_settings

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _STREAM_ARROW = True
else:
    try:  # PySpark >= 4.1
        from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

        _STREAM_ARROW = True
    except ImportError:  # pragma: no cover - PySpark 4.0 has only the row-based stream writer
        from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase

        _STREAM_ARROW = False

log = logging.getLogger("nsqpy.spark")

SINK_KEYS = {
    "nsqdTcpAddresses", "topic", "mpubSize", "mpubBytes", "maxPendingMpubs", "publishTimeoutMs",
}


@dataclass
class SinkConfig:
    nsqd_tcp: list[str]
    topic: str | None
    body_index: int
    body_is_string: bool
    topic_index: int | None
    mpub_size: int
    mpub_bytes: int
    max_pending: int
    publish_timeout: float
    connection: dict[str, Any]

    @classmethod
    def from_options(cls, raw: Any, schema: StructType) -> SinkConfig:
        opts = Options(raw, SINK_KEYS | CONNECTION_KEYS)
        nsqd = opts.addresses("nsqdTcpAddresses", 4150)
        if not nsqd:
            raise ValueError("the nsq sink needs nsqd_tcp_addresses (nsqd to publish to)")
        names = [f.name.lower() for f in schema.fields]
        if "body" not in names:
            raise ValueError(f"the nsq sink needs a 'body' column (binary or string); got {schema.simpleString()}")
        body_index = names.index("body")
        body_type = schema.fields[body_index].dataType
        if not isinstance(body_type, (BinaryType, StringType)):
            raise ValueError(f"the 'body' column must be binary or string, not {body_type.simpleString()}")
        topic_index = names.index("topic") if "topic" in names else None
        if topic_index is not None and not isinstance(schema.fields[topic_index].dataType, StringType):
            raise ValueError("the 'topic' column must be a string")
        topic = opts.get("topic")
        if topic is not None and not is_valid_name(topic):
            raise ValueError(f"invalid NSQ topic name {topic!r}")
        if topic is None and topic_index is None:
            raise ValueError("the nsq sink needs a 'topic' option or a 'topic' column")
        return cls(
            nsqd_tcp=nsqd,
            topic=topic,
            body_index=body_index,
            body_is_string=isinstance(body_type, StringType),
            topic_index=topic_index,
            mpub_size=opts.get_int("mpubSize", 2000, 1),
            mpub_bytes=opts.get_int("mpubBytes", 1024 * 1024, 16),
            max_pending=opts.get_int("maxPendingMpubs", 2, 1),
            publish_timeout=opts.get_int("publishTimeoutMs", 60000, 1) / 1000.0,
            connection=connection_settings(opts),
        )


@dataclass
class NsqCommitMessage(WriterCommitMessage):
    """What one task published: ``messages`` in ``mpubs`` MPUB commands."""

    messages: int
    mpubs: int
    pid: int


# --- per-process publishing ------------------------------------------------------------------

_lock = threading.Lock()
_state: dict[str, Any] = {"pid": None, "io": None}


def _io_thread() -> LoopThread:
    """One I/O thread per executor Python process (PySpark reuses workers across tasks)."""
    with _lock:
        if _state["pid"] != os.getpid():  # first use, or a forked child of a process that had one
            _state.update(pid=os.getpid(), io=LoopThread(name="nsqpy-spark-sink"))
        return cast(LoopThread, _state["io"])


def _connect(cfg: SinkConfig) -> tuple[LoopThread, Producer]:
    """A connected Producer for one task. Not pooled across tasks: a pooled producer would keep
    reconnecting to an nsqd that went away after its last use; a connection costs ~1 ms."""
    io = _io_thread()

    async def make() -> Producer:
        producer = Producer(cfg.nsqd_tcp, options=connection_options(cfg.connection))
        try:
            await producer.connect()
            if cfg.connection["tls"]:
                plain = [c.address for c in producer.connections if not c.identify_response.get("tls_v1")]
                if plain:
                    raise ConnectionError(f"nsq sink: TLS was asked for but {', '.join(plain)} did not negotiate it")
        except BaseException:
            await producer.close()
            raise
        return producer

    producer: Producer = io.run(make(), timeout=cfg.connection["connect_timeout"] + 5)
    return io, producer


def publish_batches(cfg: SinkConfig, batches: Iterator[Any]) -> NsqCommitMessage:
    """MPUB every row of ``batches`` (Arrow record batches) and wait for every OK."""
    io, producer = _connect(cfg)
    try:
        return _publish(cfg, batches, io, producer)
    finally:
        io.run(producer.close(), timeout=cfg.publish_timeout + 5)


def _publish(cfg: SinkConfig, batches: Iterator[Any], io: LoopThread, producer: Producer) -> NsqCommitMessage:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    window: deque[Future[None]] = deque()
    pending: dict[str, tuple[list[bytes], int]] = {}  # topic -> (bodies, bytes)
    count = mpubs = 0
    max_n, max_bytes, timeout = cfg.mpub_size, cfg.mpub_bytes, cfg.publish_timeout

    def send(topic: str, bodies: list[bytes]) -> None:
        nonlocal mpubs
        window.append(asyncio.run_coroutine_threadsafe(producer.mpub(topic, bodies), io.loop))
        mpubs += 1
        while len(window) > cfg.max_pending:
            window.popleft().result(timeout)

    def add(topic: str, bodies: list[bytes], sizes: list[int]) -> None:
        chunk, used = pending.pop(topic, ([], 0))
        for body, size in zip(bodies, sizes):
            size += 4
            if chunk and (len(chunk) >= max_n or used + size > max_bytes):
                send(topic, chunk)
                chunk, used = [], 0
            chunk.append(body)
            used += size
        pending[topic] = (chunk, used)

    for batch in batches:
        if batch.num_rows == 0:
            continue
        col = batch.column(cfg.body_index)
        if cfg.body_is_string:
            col = col.cast(pa.binary())
        if col.null_count:
            raise ValueError("the nsq sink cannot publish a null body")
        sizes_arr = pc.binary_length(col)
        if pc.min(sizes_arr).as_py() == 0:
            raise ValueError("the nsq sink cannot publish an empty body (nsqd refuses it)")
        bodies = col.to_pylist()
        sizes = sizes_arr.to_pylist()
        if cfg.topic_index is None:
            add(cfg.topic, bodies, sizes)  # type: ignore[arg-type]
        else:
            topics = batch.column(cfg.topic_index).to_pylist()
            groups: dict[str, tuple[list[bytes], list[int]]] = {}
            for topic, body, size in zip(topics, bodies, sizes):
                if topic is None:
                    topic = cfg.topic
                    if topic is None:
                        raise ValueError("a row has a null topic and no 'topic' option is set")
                g = groups.get(topic)
                if g is None:
                    if not is_valid_name(topic):
                        raise ValueError(f"invalid NSQ topic name {topic!r}")
                    g = groups[topic] = ([], [])
                g[0].append(body)
                g[1].append(size)
            for topic, (b, s) in groups.items():
                add(topic, b, s)
        count += batch.num_rows
    for topic, (chunk, _) in pending.items():
        if chunk:
            send(topic, chunk)
    while window:
        window.popleft().result(timeout)
    return NsqCommitMessage(messages=count, mpubs=mpubs, pid=os.getpid())


def _rows_to_batches(rows: Iterator[Any], cfg: SinkConfig, size: int = 10000) -> Iterator[Any]:
    """Row-based writer fallback (PySpark 4.0): rows to Arrow batches of the columns we use."""
    import pyarrow as pa

    def build(chunk: list[Any]) -> Any:
        cols: list[Any] = [None] * (max(cfg.body_index, cfg.topic_index or 0) + 1)
        bodies = [r[cfg.body_index] for r in chunk]
        cols[cfg.body_index] = pa.array(bodies, pa.string() if cfg.body_is_string else pa.binary())
        if cfg.topic_index is not None:
            cols[cfg.topic_index] = pa.array([r[cfg.topic_index] for r in chunk], pa.string())
        cols = [c if c is not None else pa.nulls(len(chunk)) for c in cols]
        return pa.RecordBatch.from_arrays(cols, names=[f"c{i}" for i in range(len(cols))])

    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield build(chunk)
            chunk = []
    if chunk:
        yield build(chunk)


def _log_commit(messages: list[Any], what: str) -> None:
    total = sum(m.messages for m in messages if isinstance(m, NsqCommitMessage))
    mpubs = sum(m.mpubs for m in messages if isinstance(m, NsqCommitMessage))
    log.info("nsq sink: %s published %d messages in %d MPUBs", what, total, mpubs)


class NsqWriter(DataSourceArrowWriter):
    """Batch sink (``df.write.format("nsq").mode("append").save()``)."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self.cfg = SinkConfig.from_options(options, schema)

    def write(self, iterator: Iterator[Any]) -> NsqCommitMessage:
        return publish_batches(self.cfg, iterator)

    def commit(self, messages: list[Any]) -> None:
        _log_commit(messages, "job")

    def abort(self, messages: list[Any]) -> None:
        # nothing to undo: what was published stays published (at-least-once)
        _log_commit([m for m in messages if m is not None], "failed job (already sent, not undone)")


class NsqStreamWriter(_StreamWriterBase):
    """Streaming sink (``df.writeStream.format("nsq")``); commit() runs on the driver, per batch."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self.cfg = SinkConfig.from_options(options, schema)

    def write(self, iterator: Iterator[Any]) -> NsqCommitMessage:
        if _STREAM_ARROW:
            return publish_batches(self.cfg, iterator)
        return publish_batches(self.cfg, _rows_to_batches(iterator, self.cfg))  # pragma: no cover

    def commit(self, messages: list[Any], batchId: int) -> None:
        _log_commit(messages, f"micro-batch {batchId}")

    def abort(self, messages: list[Any], batchId: int) -> None:
        _log_commit([m for m in messages if m is not None], f"failed micro-batch {batchId} (not undone)")
