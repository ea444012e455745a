"""NSQ for PySpark (4.x, pure Python Data Source API): ``format("nsq")`` source and sink.

::

    import nsqpy.spark
    nsqpy.spark.register(spark)

    events = (spark.readStream.format("nsq")
              .option("lookupd_http_addresses", "127.0.0.1:4161")   # or nsqd_tcp_addresses
              .option("topic", "clicks").option("channel", "metrics")
              .load())          # body, id, attempts, timestamp, topic, channel, nsqd_address

    (df.selectExpr("CAST(value AS BINARY) AS body")
       .write.format("nsq").mode("append")
       .option("nsqd_tcp_addresses", "127.0.0.1:4150").option("topic", "alerts").save())

The source is at-least-once: a message is FINished only after Spark committed the micro-batch
holding it. :func:`dedupe_within_watermark` and :func:`upsert_to_parquet` are the two
effectively-once recipes (deduplicate on ``(nsqd_address, id)``). Options, guarantees and
cluster deployment: docs/spark.md.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

#: the columns that identify one NSQ message (ids are unique per nsqd and kept across requeues)
MESSAGE_KEY = ("nsqd_address", "id")


def register(spark: Any) -> None:
    """Make ``format("nsq")`` available in this SparkSession (source and sink).

    On PySpark 4.0/4.1 (classic sessions) it also makes ``start()`` refuse AvailableNow and Once
    queries reading nsq, which those versions cannot run correctly (:mod:`nsqpy.spark.guard`).
    In a classic session it first makes sure Spark's Python workers can import nsqpy: in local mode
    with no ``PYSPARK_PYTHON`` chosen they run this interpreter; otherwise a worker Python without
    nsqpy raises :class:`~nsqpy.spark.workers.WorkerPythonError` naming what to set
    (:mod:`nsqpy.spark.workers`).
    """
    from . import guard, workers
    from .source import NsqDataSource

    workers.ensure(spark)   # before the data source is wrapped: it takes the workers' Python then

    parallelism = _parallelism(spark)
    source = NsqDataSource
    if parallelism is not None and parallelism != NsqDataSource.default_parallelism:
        # a per-session class (pickled by value to Spark's Python workers) that carries the
        # executors' core count, the default number of partitions of the executor-side source
        source = type("NsqDataSource", (NsqDataSource,), {"default_parallelism": parallelism,
                                                           "__module__": NsqDataSource.__module__})
    spark.dataSource.register(source)
    guard.install(spark)


def _parallelism(spark: Any) -> int | None:
    """The session's default parallelism (the executors' cores), None over Spark Connect."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext
        return None


def stop_when_drained(query: Any, options: Any, timeout: float | None = None, **kwargs: Any) -> bool:
    """Stop ``query`` once nsqd shows its channel drained: AvailableNow on any PySpark 4.x.

    See :func:`nsqpy.spark.drain.stop_when_drained`.
    """
    from .drain import stop_when_drained as _stop

    return _stop(query, options, timeout, **kwargs)


def dedupe_within_watermark(df: Any, delay: str = "1 hour", keys: Sequence[str] = MESSAGE_KEY) -> Any:
    """Drop redelivered copies of a message inside a streaming query, with bounded state.

    Uses the publish ``timestamp`` (identical in every copy of a message) as event time. Spark
    drops rows older than the watermark, so ``delay`` must exceed the age of the oldest message
    the query may still receive (backlog age + msg timeout + restart time); otherwise use
    :func:`upsert_to_parquet` (or a MERGE into a table) instead.
    """
    return df.withWatermark("timestamp", delay).dropDuplicatesWithinWatermark(list(keys))


def upsert_to_parquet(path: str, keys: Sequence[str] = MESSAGE_KEY) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function that appends only rows whose key is not in ``path`` yet.

    Idempotent per micro-batch (a replayed batch adds nothing), so with the at-least-once
    source the table holds each message exactly once. It re-reads the keys already written
    on every batch: fine for modest tables; on a real lake use a MERGE on the same keys
    (Delta/Iceberg/Hudi) or a put-if-absent key-value store.
    """
    key_list = list(keys)

    def write_batch(batch_df: Any, batch_id: int) -> None:
        spark = batch_df.sparkSession
        fresh = batch_df.dropDuplicates(key_list)
        try:
            existing = spark.read.parquet(path).select(*key_list)
        except Exception as err:  # nothing written yet
            if "PATH_NOT_FOUND" not in str(err) and "UNABLE_TO_INFER_SCHEMA" not in str(err):
                raise
            existing = None
        if existing is not None:
            fresh = fresh.join(existing, key_list, "left_anti")
        fresh.write.mode("append").parquet(path)

    return write_batch


__all__ = ["MESSAGE_KEY", "dedupe_within_watermark", "register", "stop_when_drained", "upsert_to_parquet"]
