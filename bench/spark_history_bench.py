"""Spark batch read of nsqd's history against the partitioned ceiling, local[2], into Parquet.

* ``history`` — ``spark.read.format("nsq")`` over ``--messages`` retained messages of ``--size``
  bytes (nsqd with ``--retention``), partitioned by the source's own plan (``default``: by bytes)
  or by ``segmentsPerPartition`` / ``partitionsPerSegment`` so that their number is the one asked
  for;
* ``pceiling`` — a trivial *batch* Python source (:class:`PartitionedCeiling`, the batch twin of
  bench/spark_bench.py's ``format("pceiling")``): the same number of rows of the same schema in
  the same number of partitions, each handing out slices of one Arrow batch made once per Python
  worker. It is what a Python data source costs in Spark with nothing to read.

Each is ``df.write.parquet(...)`` timed from the action's start to its end; the two alternate,
``--rounds`` times per partition count after one warm-up of each (which also fills the ceiling's
per-worker cache); the best round counts and every round is printed. The machine may be shared:
report ratios from one run, not absolute figures across runs.

    python bench/spark_history_bench.py --messages 1000000 --partitions default,2,4,8
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

from nsqpy.spark.source import SCHEMA  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nsqd(data: Path) -> tuple[subprocess.Popen, str, str]:
    tcp, http = free_port(), free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "nsqd"), f"--tcp-address=127.0.0.1:{tcp}",
         f"--http-address=127.0.0.1:{http}", f"--data-path={data}", "--retention=24h",
         "--log-level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/ping", timeout=0.5):
                return proc, f"127.0.0.1:{tcp}", f"127.0.0.1:{http}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("nsqd did not start")


def prefill(addr: str, topic: str, n: int, size: int) -> None:
    from nsqpy.client import SyncPublisher

    bodies = [(b"%010d" % i).ljust(size, b"x") for i in range(5000)]
    with SyncPublisher(addr, timeout=60) as p:
        for i in range(0, n, 5000):
            p.mpub(topic, bodies[: min(5000, n - i)])


class PartitionedCeiling(DataSource):
    """``format("pceiling")`` (batch): ``messages`` rows in ``partitions`` partitions."""

    @classmethod
    def name(cls) -> str:
        return "pceiling"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        return CeilingReader(int(self.options["messages"]), int(self.options["size"]),
                             int(self.options["partitions"]))


class CeilingReader(DataSourceReader):
    def __init__(self, total: int, size: int, parts: int) -> None:
        self.total, self.size, self.parts = total, size, parts

    def partitions(self):
        share = -(-self.total // self.parts)
        return [InputPartition(min(share, self.total - i * share)) for i in range(self.parts)
                if self.total - i * share > 0]

    def read(self, partition):
        cache = sys.__dict__.setdefault("_nsqpy_hist_bench_rows", {})
        key = (partition.value, self.size)
        if key not in cache:
            cache.clear()
            cache[key] = rows(partition.value, self.size)
        batch = cache[key]
        step = max(1, (8 << 20) // (self.size + 30))  # the history reader's batches: ~8 MiB
        for at in range(0, batch.num_rows, step):
            yield batch.slice(at, step)


def rows(n: int, size: int):
    import pyarrow as pa

    from nsqpy.spark.arrow import arrow_schema

    schema = arrow_schema()
    return pa.RecordBatch.from_arrays([
        pa.array([(b"%010d" % i).ljust(size, b"x") for i in range(n)], pa.binary()),
        pa.array(["%016x" % i for i in range(n)], pa.string()),
        pa.array([1] * n, pa.int32()),
        pa.array([time.time_ns() // 1000] * n, pa.int64()).cast(schema.field("timestamp").type),
        pa.array(["bench"] * n, pa.string()),
        pa.array([None] * n, pa.string()),
        pa.array(["127.0.0.1:4150"] * n, pa.string()),
    ], schema=schema)


def segments(http: str, topic: str) -> list[dict]:
    with urllib.request.urlopen(f"http://{http}/history/segments?topic={topic}", timeout=30) as resp:
        return orjson.loads(resp.read())["segments"]


def history_options(nsegs: int, parts: int) -> dict[str, int]:
    """segmentsPerPartition / partitionsPerSegment giving ``parts`` partitions (or the nearest)."""
    if parts <= nsegs:
        return {"segmentsPerPartition": math.ceil(nsegs / parts)}
    return {"partitionsPerSegment": math.ceil(parts / nsegs)}


def timed_write(df, out: Path) -> tuple[float, int]:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    df.write.parquet(str(out))
    return time.perf_counter() - t0, df.rdd.getNumPartitions()


def spark_session():
    """local[2], quiet, nsq and the ceiling registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # the workers import the ceiling from this module, also when history_bench.py runs it
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT / "bench"),
                                                             os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("nsqpy-history-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import nsqpy.spark

    nsqpy.spark.register(spark)
    spark.dataSource.register(PartitionedCeiling)
    return spark


def history_vs_ceiling(spark, http: str, topic: str, messages: int, size: int, options: dict,
                       rounds: int, work: Path) -> tuple[int, list[float], list[float]]:
    """``(partitions, history rows/s per round, ceiling rows/s per round)``: the history read
    with ``options`` into Parquet, and the ceiling with as many partitions, alternating after
    one warm-up of each; every row is checked to be there."""
    def history_df():
        reader = spark.read.format("nsq").option("nsqd_http_addresses", http).option("topic", topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    def ceiling_df(n: int):
        return (spark.read.format("pceiling").option("messages", messages)
                .option("size", size).option("partitions", n).load())

    got = history_df()
    n = got.rdd.getNumPartitions()
    assert got.count() == messages, "the history does not hold every message"
    timed_write(history_df(), work / "warm_h")
    timed_write(ceiling_df(n), work / "warm_c")
    hist, ceil = [], []
    for _ in range(rounds):
        secs, _ = timed_write(history_df(), work / "out_h")
        hist.append(messages / secs)
        secs, _ = timed_write(ceiling_df(n), work / "out_c")
        ceil.append(messages / secs)
    written = spark.read.parquet(str(work / "out_h")).count()
    assert written == messages, written
    return n, hist, ceil


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--partitions", default="default,2,4,8",
                    help="partition counts; 'default': the source's own plan (by bytes)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spark_history_bench_"))
    (work / "nsqd").mkdir()
    proc, addr, http = start_nsqd(work / "nsqd")
    spark = None
    try:
        topic = "hist_bench"
        t0 = time.perf_counter()
        prefill(addr, topic, args.messages, args.size)
        segs = segments(http, topic)
        print(f"prefill: {args.messages:,} messages of {args.size} B in {time.perf_counter() - t0:.1f}s, "
              f"{len(segs)} segments", flush=True)
        spark = spark_session()
        print("partitions | history rows/s (best; all) | pceiling rows/s (best; all) | history/pceiling")
        for parts in args.partitions.split(","):
            options = {} if parts == "default" else history_options(len(segs), int(parts))
            n, hist, ceil = history_vs_ceiling(spark, http, topic, args.messages, args.size, options,
                                               args.rounds, work)
            print(f"{n:>10} | {max(hist):>12,.0f} ({', '.join(f'{r:,.0f}' for r in hist)}) | "
                  f"{max(ceil):>12,.0f} ({', '.join(f'{r:,.0f}' for r in ceil)}) | {max(hist) / max(ceil):.2f}x",
                  flush=True)
    finally:
        if spark is not None:
            spark.stop()
        proc.terminate()
        proc.wait(15)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
