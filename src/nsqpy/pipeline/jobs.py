"""The Spark jobs of the click pipeline, each usable alone (``spark-submit jobs.py <job> ...``)
or together (``python -m nsqpy.pipeline``, see run.py).

Topology (one nsqd topic, three channels: NSQ copies every message to each channel)::

    producer --PUB--> clicks --+-- archive        -> archive_query  -> Parquet (raw deliveries)
                               +-- metrics        -> metrics_query  -> Parquet (per-minute counts)
                               +-- spam_analysis  -> spam_query     -> nsq sink -> alerts
    archive --> batch_metrics / batch_spam (Spark batch) reproduce the streaming results
    clicks' history in nsqd (--retention) --> history_metrics (spark.read.format("nsq")), the
                                            same recomputation without any archive

Delivery is at-least-once end to end, so every job deduplicates on the producer's
``event_id`` (``dropDuplicatesWithinWatermark`` in the streaming jobs, ``dropDuplicates`` in
the batch job); the archive keeps raw deliveries, duplicates included, like nsq_to_file would.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

CLICK_SCHEMA = "type string, event_id string, ts long, user_id string, url string, user_agent string"
ARCHIVE_COLUMNS = ["body", "id", "attempts", "timestamp", "nsqd_address"]
METRICS_COLUMNS = ["window_start", "window_end", "url", "user_agent", "clicks"]
ALERT_SCHEMA = "alert_id string, user_id string, window_start string, window_end string, clicks long"


@dataclass
class PipelineConfig:
    lookupd_http: list[str] = field(default_factory=list)
    nsqd_tcp: list[str] = field(default_factory=list)
    nsqd_http: list[str] = field(default_factory=list)
    topic: str = "clicks"
    alerts_topic: str = "alerts"
    out: str = "pipeline-out"  # archive/, metrics/, checkpoints/ under it (any Hadoop path)
    watermark: str = "10 minutes"
    window: str = "1 minute"
    spam_threshold: int = 60  # clicks per user per window
    trigger: str = "2 seconds"
    max_batch_size: int = 5000
    msg_timeout_ms: int = 30000
    #: where the source reads: auto (on the executors when every nsqd has leases), executor, driver
    source_mode: str = "auto"

    @property
    def archive(self) -> str:
        return f"{self.out}/archive"

    @property
    def metrics(self) -> str:
        return f"{self.out}/metrics"

    def checkpoint(self, job: str) -> str:
        return f"{self.out}/checkpoints/{job}"


# --- streaming jobs --------------------------------------------------------------------------


def nsq_stream(spark: Any, cfg: PipelineConfig, channel: str) -> Any:
    """``clicks`` as seen by ``channel``; nodes from lookupd when given, else from nsqd addresses."""
    reader = (
        spark.readStream.format("nsq").option("topic", cfg.topic).option("channel", channel)
        .option("maxBatchSize", cfg.max_batch_size).option("msgTimeoutMs", cfg.msg_timeout_ms)
        .option("mode", cfg.source_mode)
    )
    if cfg.lookupd_http:
        reader = reader.option("lookupd_http_addresses", ",".join(cfg.lookupd_http))
    if cfg.nsqd_tcp:
        reader = reader.option("nsqd_tcp_addresses", ",".join(cfg.nsqd_tcp))
    if cfg.nsqd_http:
        reader = reader.option("nsqd_http_addresses", ",".join(cfg.nsqd_http))
    return reader.load()


def parse_clicks(df: Any) -> Any:
    """NSQ rows (or archive rows) -> click columns plus ``event_time``; heartbeats kept."""
    from pyspark.sql import functions as F

    return (
        df.select(F.from_json(F.col("body").cast("string"), CLICK_SCHEMA).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
    )


def deduped_events(df: Any, cfg: PipelineConfig) -> Any:
    """Watermark on event time, then each event once (clicks and the heartbeats that move the
    watermark; filtering heartbeats out here would be pushed below the watermark)."""
    return parse_clicks(df).withWatermark("event_time", cfg.watermark).dropDuplicatesWithinWatermark(["event_id"])


def _clicks() -> Any:
    from pyspark.sql import functions as F

    return F.count(F.when(F.col("type") == "click", F.lit(1))).alias("clicks")


def metrics_counts(events: Any, cfg: PipelineConfig) -> Any:
    """Clicks per (minute, url, user agent); the same expression serves stream and batch.

    Heartbeats form groups with no click, dropped after the aggregation."""
    from pyspark.sql import functions as F

    return (
        events.groupBy(F.window("event_time", cfg.window), "url", "user_agent")
        .agg(_clicks())
        .where(F.col("clicks") > 0)
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                "url", "user_agent", "clicks")
    )


def spam_alerts(events: Any, cfg: PipelineConfig) -> Any:
    """Users over ``spam_threshold`` clicks in a window, as alert rows."""
    from pyspark.sql import functions as F

    per_user = events.groupBy(F.window("event_time", cfg.window), "user_id").agg(_clicks())
    start = F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
    end = F.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss'Z'")
    return (
        per_user.where(F.col("clicks") > cfg.spam_threshold)
        .select(F.concat_ws("@", "user_id", start).alias("alert_id"), "user_id",
                start.alias("window_start"), end.alias("window_end"), "clicks")
    )


def archive_query(spark: Any, cfg: PipelineConfig, available_now: bool = False) -> Any:
    """Channel ``archive`` -> Parquet, every delivery as received (the batch job deduplicates)."""
    df = nsq_stream(spark, cfg, "archive").select(*ARCHIVE_COLUMNS)
    writer = (df.writeStream.format("parquet").option("path", cfg.archive)
              .option("checkpointLocation", cfg.checkpoint("archive")).queryName("archive"))
    return _start(writer, cfg, available_now)


def metrics_query(spark: Any, cfg: PipelineConfig, available_now: bool = False) -> Any:
    """Channel ``metrics`` -> per-minute counts by URL and user agent -> Parquet (append: a
    window is written once, when the watermark has passed it)."""
    counts = metrics_counts(deduped_events(nsq_stream(spark, cfg, "metrics"), cfg), cfg)
    writer = (counts.writeStream.format("parquet").outputMode("append").option("path", cfg.metrics)
              .option("checkpointLocation", cfg.checkpoint("metrics")).queryName("metrics"))
    return _start(writer, cfg, available_now)


def spam_query(spark: Any, cfg: PipelineConfig, available_now: bool = False) -> Any:
    """Channel ``spam_analysis`` -> users with abnormal click rates -> JSON alerts on ``alerts``."""
    from pyspark.sql import functions as F

    alerts = spam_alerts(deduped_events(nsq_stream(spark, cfg, "spam_analysis"), cfg), cfg)
    body = alerts.select(F.to_json(F.struct(*alerts.columns)).cast("binary").alias("body"))
    writer = body.writeStream.format("nsq").outputMode("append").option("topic", cfg.alerts_topic)
    writer = writer.option("nsqd_tcp_addresses", ",".join(_publish_addresses(cfg)))
    writer = writer.option("checkpointLocation", cfg.checkpoint("spam")).queryName("spam_analysis")
    return _start(writer, cfg, available_now)


def _publish_addresses(cfg: PipelineConfig) -> list[str]:
    if cfg.nsqd_tcp:
        return cfg.nsqd_tcp
    from nsqpy.pipeline.producer import nodes_from_lookupd

    return nodes_from_lookupd(cfg.lookupd_http)


def _start(writer: Any, cfg: PipelineConfig, available_now: bool) -> Any:
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=cfg.trigger).start()


# --- batch job over the archive --------------------------------------------------------------


def read_archive(spark: Any, path: str, fmt: str = "parquet") -> Any:
    """The archive as rows with a ``body`` column.

    ``parquet``: written by :func:`archive_query`. ``text``: newline-delimited message bodies,
    as ``nsq_to_file`` writes them (gzipped files are read transparently).
    """
    if fmt == "parquet":
        return spark.read.parquet(path)
    if fmt == "text":
        from pyspark.sql import functions as F

        return spark.read.text(path).where(F.length("value") > 0).select(F.col("value").cast("binary").alias("body"))
    raise ValueError(f"unknown archive format {fmt!r}")


def batch_events(spark: Any, path: str, fmt: str = "parquet") -> Any:
    """Every archived event once (the archive holds deliveries, duplicates included)."""
    return parse_clicks(read_archive(spark, path, fmt)).dropDuplicates(["event_id"])


def batch_metrics(spark: Any, cfg: PipelineConfig, fmt: str = "parquet") -> Any:
    return metrics_counts(batch_events(spark, cfg.archive, fmt), cfg)


def batch_spam(spark: Any, cfg: PipelineConfig, fmt: str = "parquet") -> Any:
    return spam_alerts(batch_events(spark, cfg.archive, fmt), cfg)


def history_events(spark: Any, cfg: PipelineConfig) -> Any:
    """Every event once, from what nsqd itself retained of ``clicks`` (the batch source,
    docs/history.md): no archive involved. Fails, naming the nsqd, when one keeps no history."""
    reader = spark.read.format("nsq").option("topic", cfg.topic)
    if cfg.lookupd_http:
        reader = reader.option("lookupd_http_addresses", ",".join(cfg.lookupd_http))
    if cfg.nsqd_http:
        reader = reader.option("nsqd_http_addresses", ",".join(cfg.nsqd_http))
    return parse_clicks(reader.load()).dropDuplicates(["event_id"])


def history_metrics(spark: Any, cfg: PipelineConfig) -> Any:
    return metrics_counts(history_events(spark, cfg), cfg)


def compare_history(spark: Any, cfg: PipelineConfig, fmt: str = "parquet") -> dict[str, Any]:
    """The metrics recomputed from nsqd's history, against the streaming Parquet and against the
    recomputation from the archive (nsq_to_file's files or the Spark archive)."""
    history = {tuple(r) for r in history_metrics(spark, cfg).select(*METRICS_COLUMNS).collect()}
    archive = {tuple(r) for r in batch_metrics(spark, cfg, fmt).select(*METRICS_COLUMNS).collect()}
    stream = {tuple(r) for r in spark.read.parquet(cfg.metrics).select(*METRICS_COLUMNS).collect()}
    return {
        "agree": history == archive == stream,
        "agree_with_archive": history == archive,
        "agree_with_stream": history == stream,
        "history_rows": len(history),
        "history_clicks": sum(r[-1] for r in history),
        "only_history": sorted(history - archive)[:5],
        "only_archive": sorted(archive - history)[:5],
    }


def compare_metrics(spark: Any, cfg: PipelineConfig, fmt: str = "parquet") -> dict[str, Any]:
    """Streaming Parquet vs the batch recomputation from the archive."""
    batch = {tuple(r) for r in batch_metrics(spark, cfg, fmt).select(*METRICS_COLUMNS).collect()}
    try:
        stream = [tuple(r) for r in spark.read.parquet(cfg.metrics).select(*METRICS_COLUMNS).collect()]
    except Exception as err:  # nothing written yet
        if "PATH_NOT_FOUND" not in str(err) and "UNABLE_TO_INFER_SCHEMA" not in str(err):
            raise
        stream = []
    streamed = set(stream)
    return {
        "agree": batch == streamed and len(stream) == len(streamed),
        "batch_rows": len(batch),
        "stream_rows": len(stream),
        "batch_clicks": sum(r[-1] for r in batch),
        "stream_clicks": sum(r[-1] for r in stream),
        "only_batch": sorted(batch - streamed)[:5],
        "only_stream": sorted(streamed - batch)[:5],
    }


# --- spark-submit entry point ----------------------------------------------------------------


def _split(text: str | None) -> list[str]:
    return [a.strip() for a in (text or "").split(",") if a.strip()]


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    return PipelineConfig(
        lookupd_http=_split(args.lookupd_http_addresses), nsqd_tcp=_split(args.nsqd_tcp_addresses),
        nsqd_http=_split(args.nsqd_http_addresses), out=args.out, watermark=args.watermark,
        spam_threshold=args.spam_threshold, trigger=args.trigger, topic=args.topic,
        alerts_topic=args.alerts_topic, max_batch_size=args.max_batch_size,
        source_mode=args.source_mode,
    )


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--lookupd-http-addresses", help="comma-separated host:port of nsqlookupd")
    ap.add_argument("--nsqd-tcp-addresses", help="comma-separated host:port of nsqd (TCP)")
    ap.add_argument("--nsqd-http-addresses", help="nsqd HTTP addresses (AvailableNow backlog without lookupd)")
    ap.add_argument("--out", default="pipeline-out", help="output root (local path, hdfs://, s3a://...)")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--alerts-topic", default="alerts")
    ap.add_argument("--watermark", default="10 minutes")
    ap.add_argument("--spam-threshold", type=int, default=60)
    ap.add_argument("--trigger", default="2 seconds")
    ap.add_argument("--max-batch-size", type=int, default=5000)
    ap.add_argument("--source-mode", default="auto", choices=["auto", "executor", "driver"],
                    help="where the nsq source reads: on the executors (nsqd with --leases), on the "
                         "driver, or auto (executors when every nsqd announces leases)")


def main(argv: list[str] | None = None) -> int:
    """``spark-submit jobs.py archive|metrics|spam|batch [options]`` (one job per application)."""
    ap = argparse.ArgumentParser(prog="nsqpy.pipeline.jobs", description=main.__doc__)
    ap.add_argument("job", choices=["archive", "metrics", "spam", "batch"])
    add_common_args(ap)
    ap.add_argument("--available-now", action="store_true", help="drain the backlog, then stop")
    ap.add_argument("--archive-format", default="parquet", choices=["parquet", "text"])
    ap.add_argument("--history", action="store_true",
                    help="batch: also recompute from nsqd's history (nsqd with --retention)")
    args = ap.parse_args(argv)
    cfg = config_from_args(args)

    from pyspark.sql import SparkSession

    import nsqpy.spark

    spark = SparkSession.builder.appName(f"nsqpy-pipeline-{args.job}").getOrCreate()
    nsqpy.spark.register(spark)
    if args.job == "batch":
        result = compare_metrics(spark, cfg, args.archive_format)
        spam = sorted(tuple(r) for r in batch_spam(spark, cfg, args.archive_format).collect())
        print(f"batch vs streaming metrics: {result}")
        print(f"spam alerts recomputed from the archive: {spam}")
        if args.history:
            history = compare_history(spark, cfg, args.archive_format)
            print(f"history vs archive vs streaming metrics: {history}")
            result["agree"] = result["agree"] and history["agree"]
        return 0 if result["agree"] else 1
    start = {"archive": archive_query, "metrics": metrics_query, "spam": spam_query}[args.job]
    query = start(spark, cfg, args.available_now)
    query.awaitTermination()
    return 0 if query.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main())
