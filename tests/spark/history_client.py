"""A batch read of nsqd's history in its own Spark application, run by test_history_cluster.py:
through Spark Connect (``--remote sc://...``) or on a standalone cluster (``--master spark://...``).

    python history_client.py (--remote URL | --master URL) --nsqd-http H --topic T --work DIR

Reads the topic's history twice with ``spark.read.format("nsq")``, writes it to Parquet once and
prints one JSON line: the session's module, the rows and distinct ids of both reads and of the
Parquet copy, and the number of partitions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # tests/

from spark.nsq_spark_util import spark_env  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--remote")
    ap.add_argument("--master")
    ap.add_argument("--nsqd-http", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    spark_env()
    from pyspark.sql import SparkSession

    import nsqpy.spark

    if args.remote:
        spark = SparkSession.builder.remote(args.remote).getOrCreate()
    else:
        spark = (SparkSession.builder.master(args.master).appName("nsqpy-history")
                 .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    nsqpy.spark.register(spark)
    df = (spark.read.format("nsq").option("nsqd_http_addresses", args.nsqd_http)
          .option("topic", args.topic).option("partitionsPerSegment", 3).load())
    report: dict[str, object] = {"session": type(spark).__module__, "columns": df.columns}
    report["rows"] = df.count()
    report["distinct_ids"] = df.select("id").distinct().count()
    out = str(Path(args.work) / "history.parquet")
    df.write.mode("overwrite").parquet(out)
    copy = spark.read.parquet(out)
    report["parquet_rows"] = copy.count()
    report["parquet_distinct_bodies"] = copy.select("body").distinct().count()
    report["partitions"] = df.rdd.getNumPartitions() if not args.remote else None
    spark.stop()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
