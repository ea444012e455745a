"""A Spark driver for the executor-side source, run as its own process so a test can kill it (or
its executors) with SIGKILL.

    python lease_driver.py stream|drain --nsqd-tcp A --nsqd-http H --topic T --work DIR
        [--master URL] [--hang-after-batch N] [--slow-ms-per-row MS] [--sink batches|files]

``--sink batches`` (default): ``foreachBatch`` writes each micro-batch to ``DIR/out/batch_id=<id>``
with mode overwrite, an idempotent sink keyed on the batch id; with ``--hang-after-batch N`` the
sink of batch N writes its rows, creates ``DIR/hung`` and sleeps (the test kills the driver then:
the batch is in the sink, Spark has not committed it). ``--sink files``: the Parquet file sink to
``DIR/out``. ``--slow-ms-per-row`` runs a Python UDF that sleeps per row, in the read's task, so
a test can kill an executor while tasks run. ``stream`` runs until killed; ``drain`` reads the
backlog and exits (AvailableNow on PySpark >= 4.2, else stopped once nsqd shows the channel drained).
Checkpoint: ``DIR/ckpt``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # tests/, for spark.nsq_spark_util

from spark.nsq_spark_util import build_spark, spark_env, start_to_end, stop_spark  # noqa: E402


def session(master: str | None):
    if master is None:
        return build_spark("nsqpy-lease-driver")
    spark_env()
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("nsqpy-lease-cluster")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.executor.memory", "768m")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import nsqpy.spark

    nsqpy.spark.register(spark)
    return spark


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["stream", "drain"])
    ap.add_argument("--nsqd-tcp", required=True)
    ap.add_argument("--nsqd-http", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--master")
    ap.add_argument("--max-batch", type=int, default=500)
    ap.add_argument("--hang-after-batch", type=int, default=-1)
    ap.add_argument("--slow-ms-per-row", type=float, default=0.0)
    ap.add_argument("--sink", choices=["batches", "files"], default="batches")
    args = ap.parse_args()
    work = Path(args.work)
    spark = session(args.master)

    df = (spark.readStream.format("nsq")
          .option("nsqd_tcp_addresses", args.nsqd_tcp).option("nsqd_http_addresses", args.nsqd_http)
          .option("topic", args.topic).option("channel", "spark")
          .option("maxBatchSize", args.max_batch).option("partitionsPerNode", 2)
          .option("pollTimeoutMs", 100).option("mode", "executor").load())
    if args.slow_ms_per_row:
        from pyspark.sql import functions as F

        delay = args.slow_ms_per_row / 1000.0

        @F.udf("string")
        def slow(value: str) -> str:
            time.sleep(delay)
            return value

        df = df.withColumn("id", slow(F.col("id")))

    if args.sink == "files":
        writer = (df.writeStream.format("parquet").option("path", str(work / "out"))
                  .option("checkpointLocation", str(work / "ckpt")))
    else:
        def sink(batch_df, batch_id: int) -> None:
            batch_df.write.mode("overwrite").parquet(str(work / "out" / f"batch_id={batch_id}"))
            print(f"batch {batch_id} written", flush=True)
            if batch_id == args.hang_after_batch:
                (work / "hung").write_text(str(os.getpid()))
                time.sleep(600)  # the test kills us here: written, not committed

        writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(work / "ckpt"))
    query = start_to_end(writer, args.nsqd_http, args.topic) if args.mode == "drain" else writer.start()
    print("started", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        print(f"query failed: {query.exception()}", flush=True)
        sys.exit(1)
    stop_spark(spark)


if __name__ == "__main__":
    main()
