"""A Spark driver run as its own process by test_kill9.py, so the test can SIGKILL it mid-stream.

    python driver_script.py stream|drain --nsqd-tcp A --nsqd-http H --topic T --work DIR

Reads ``T`` with the nsq source and, per micro-batch (foreachBatch), appends every row to
``DIR/raw`` (what was delivered, duplicates included) and upserts it into ``DIR/dedup`` with
the effectively-once recipe (``nsqpy.spark.upsert_to_parquet`` on (nsqd_address, id)).
``stream`` runs until killed; ``drain`` uses trigger(availableNow=True) (PySpark >= 4.2) and exits when the
backlog is read. Both use the checkpoint ``DIR/ckpt``. With ``--max-in-flight`` equal to the
batch size and a long ``--poll-ms``, every committed batch waits that long for its FIN (the
next read finds nothing and waits): a kill then lands between Spark's commit and the FIN.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # tests/, for spark.nsq_spark_util

from spark.nsq_spark_util import build_spark, start_to_end, stop_spark  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["stream", "drain"])
    ap.add_argument("--nsqd-tcp", required=True)
    ap.add_argument("--nsqd-http", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--poll-ms", type=int, default=50)
    ap.add_argument("--max-in-flight", type=int, default=600)
    args = ap.parse_args()
    work = Path(args.work)

    spark = build_spark("nsqpy-kill9")
    from nsqpy.spark import upsert_to_parquet

    upsert = upsert_to_parquet(str(work / "dedup"))

    def sink(batch_df, batch_id: int) -> None:
        batch_df = batch_df.persist()
        batch_df.write.mode("append").parquet(str(work / "raw"))
        upsert(batch_df, batch_id)
        batch_df.unpersist()
        print(f"batch {batch_id} done", flush=True)

    df = (
        spark.readStream.format("nsq")
        .option("nsqd_tcp_addresses", args.nsqd_tcp)
        .option("nsqd_http_addresses", args.nsqd_http)
        .option("topic", args.topic)
        .option("channel", "spark")
        .option("maxBatchSize", 300)
        .option("pollTimeoutMs", args.poll_ms)
        .option("maxInFlight", args.max_in_flight)
        .option("msgTimeoutMs", 2000)
        # a killed driver's leases must outlive its restart for the replay to be exact; at load
        # 20 a restart took longer than the default 120 s (docs/leases.md: after the lease's
        # timeout the messages come again as new ones, at-least-once)
        .option("leaseTimeoutMs", 600_000)
        .load()
    )
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(work / "ckpt"))
    if args.mode == "drain":  # AvailableNow (on PySpark < 4.2: stopped once drained)
        query = start_to_end(writer, args.nsqd_http, args.topic)
    else:
        query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        print(f"query failed: {query.exception()}", flush=True)
        sys.exit(1)
    stop_spark(spark)


if __name__ == "__main__":
    main()
