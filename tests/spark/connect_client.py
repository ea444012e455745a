"""A Spark Connect client run as its own process by test_connect.py (a Connect session and the
suite's classic session cannot share one Python process).

    python connect_client.py sc://127.0.0.1:PORT --nsqd-tcp A --nsqd-http H --src T1 --dst T2 --work DIR --n N

Through ``SparkSession.builder.remote``: registers format("nsq"), publishes N rows to T1 with the
batch sink, copies T1 to T2 with a streaming query (nsq source -> nsq sink, AvailableNow or, before
PySpark 4.2, stopped once drained) and writes T1's rows to Parquet with a second channel; prints
one JSON line with what it saw.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # tests/, for spark.nsq_spark_util

from spark.nsq_spark_util import start_to_end  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--nsqd-tcp", required=True)
    ap.add_argument("--nsqd-http", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    work = Path(args.work)

    from pyspark.sql import SparkSession

    import nsqpy.spark

    spark = SparkSession.builder.remote(args.url).getOrCreate()
    nsqpy.spark.register(spark)
    report: dict[str, object] = {"session": type(spark).__module__}

    rows = [(b"c-%d" % i,) for i in range(args.n)]
    (spark.createDataFrame(rows, "body binary").repartition(2).write.format("nsq").mode("append")
     .option("nsqd_tcp_addresses", args.nsqd_tcp).option("topic", args.src).save())

    def source(channel: str):
        return (spark.readStream.format("nsq").option("nsqd_tcp_addresses", args.nsqd_tcp)
                .option("nsqd_http_addresses", args.nsqd_http).option("topic", args.src)
                .option("channel", channel).option("maxBatchSize", 700).option("pollTimeoutMs", 50).load())

    copy = (source("copy").select("body").writeStream.format("nsq").option("nsqd_tcp_addresses", args.nsqd_tcp)
            .option("topic", args.dst).option("checkpointLocation", str(work / "ckpt_copy")))
    query = start_to_end(copy, args.nsqd_http, args.src, "copy")
    report["copy_ended"] = query.awaitTermination(120)
    report["copy_error"] = str(query.exception()) if query.exception() is not None else None

    archive = (source("archive").writeStream.format("parquet").option("path", str(work / "archive"))
               .option("checkpointLocation", str(work / "ckpt_archive")))
    query = start_to_end(archive, args.nsqd_http, args.src, "archive")
    report["archive_ended"] = query.awaitTermination(120)
    archived = spark.read.parquet(str(work / "archive"))
    report["archived_rows"] = archived.count()
    report["archived_distinct_bodies"] = archived.select("body").distinct().count()
    spark.stop()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
