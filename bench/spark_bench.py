"""Spark connector throughput on local Spark against our nsqd (200-byte messages by default).

* ``source`` — a pre-filled topic read by ``readStream.format("nsq")`` into a Parquet sink
  (trigger AvailableNow, so every message is also FINished). Reported: the steady-state rate
  (rows of the micro-batches after the first two, over the wall time between their ends) and
  the end-to-end rate including query start-up.
* ``ceiling`` — the same measurement, in the same SparkSession, of a trivial in-memory Python
  streaming source (:class:`CeilingSource`) handing out the same rows as ready-made Arrow slices:
  the most any Python data source gets out of this machine. The nsq source is reported as a ratio
  of it, for every ``--batch-sizes`` (default 20000, 50000, 100000), the two measured alternately.
* ``sink`` — ``df.write.format("nsq")`` of a cached DataFrame of bodies, 2 partitions
  (local[2]); rate = messages / job time, checked against nsqd's ``message_count``.

    python bench/spark_bench.py
    python bench/spark_bench.py --messages 1000000 --batch-sizes 50000 --mpub-size 5000
    python bench/spark_bench.py --scenarios source,ceiling --rounds 3

A shared 2-vCPU box moves these figures by ±30% between runs; Spark, nsqd and the source's
runner share the two cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nsqd(data: str, max_rdy: int) -> tuple[subprocess.Popen, str, str]:
    tcp, http = free_port(), free_port()
    exe = Path(sys.executable).parent / "nsqd"
    proc = subprocess.Popen(
        [str(exe), f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}",
         f"--data-path={data}", "--mem-queue-size=100000000", f"--max-rdy-count={max_rdy}",
         "--log-level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/ping", timeout=0.5):
                return proc, f"127.0.0.1:{tcp}", f"127.0.0.1:{http}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("nsqd did not start")


def topic_stats(http: str, topic: str) -> dict:
    with urllib.request.urlopen(f"http://{http}/stats?format=json&topic={topic}", timeout=10) as resp:
        for t in orjson.loads(resp.read()).get("topics") or ():
            if t["topic_name"] == topic:
                return t
    return {}


def create_channel(http: str, topic: str, channel: str) -> None:
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel={channel}"):
        req = urllib.request.Request(f"http://{http}{path}", data=b"", method="POST")
        urllib.request.urlopen(req, timeout=10).read()


def prefill(addr: str, topic: str, n: int, size: int) -> None:
    from nsqpy.client import SyncPublisher

    bodies = [(b"%010d" % i).ljust(size, b"x") for i in range(min(n, 5000))]
    with SyncPublisher(addr, timeout=60) as p:
        for i in range(0, n, 5000):
            p.mpub(topic, bodies[: min(5000, n - i)])


def build_spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").appName("nsqpy-spark-bench")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import nsqpy.spark

    nsqpy.spark.register(spark)
    return spark


# --- the ceiling: a Python streaming source with nothing to do ---------------------------------
# Defined in __main__, so Spark's cloudpickle ships the classes by value to the runner process.

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader  # noqa: E402

from nsqpy.spark._compat import SupportsTriggerAvailableNow  # noqa: E402
from nsqpy.spark.source import SCHEMA  # noqa: E402


class CeilingSource(DataSource):
    """``format("ceiling")``: ``messages`` rows of the nsq schema, ``maxBatchSize`` per batch."""

    @classmethod
    def name(cls) -> str:
        return "ceiling"

    def schema(self):
        return SCHEMA

    def simpleStreamReader(self, schema):
        return CeilingReader(int(self.options["messages"]), int(self.options["size"]),
                             int(self.options["maxBatchSize"]))


class CeilingReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, total: int, size: int, batch: int) -> None:
        self.total, self.size, self.batch = total, size, batch
        self._rows = None

    def __getstate__(self):
        return {"total": self.total, "size": self.size, "batch": self.batch, "_rows": None}

    def _all_rows(self):
        if self._rows is None:  # one Arrow batch of `batch` rows, built once; read() slices it
            import pyarrow as pa

            from nsqpy.spark.source import arrow_schema

            n = self.batch
            schema = arrow_schema()
            self._rows = pa.RecordBatch.from_arrays([
                pa.array([(b"%010d" % i).ljust(self.size, b"x") for i in range(n)], pa.binary()),
                pa.array(["%016x" % i for i in range(n)], pa.string()),
                pa.array([1] * n, pa.int32()),
                pa.array([time.time_ns() // 1000] * n, pa.int64()).cast(schema.field("timestamp").type),
                pa.array(["bench"] * n, pa.string()),
                pa.array(["spark"] * n, pa.string()),
                pa.array(["127.0.0.1:4150"] * n, pa.string()),
            ], schema=schema)
        return self._rows

    def initialOffset(self):
        return {"seq": 0}

    def read(self, start):
        seq = start["seq"]
        n = min(self.batch, self.total - seq)
        if n <= 0:
            return iter([]), start
        return iter([self._all_rows().slice(0, n)]), {"seq": seq + n}

    def readBetweenOffsets(self, start, end):
        return iter([])

    def commit(self, end):
        pass

    def prepareForTriggerAvailableNow(self):
        pass


def _end_time(progress: dict) -> float:
    start = dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return start + progress["durationMs"]["triggerExecution"] / 1000.0


def measure(query, timeout: float, started: float) -> dict:
    """Rates of an AvailableNow query: steady state (batches after the first two, between their
    ends) and end to end (from start())."""
    query.awaitTermination(timeout)
    total_secs = time.perf_counter() - started
    if query.isActive:
        query.stop()
        raise SystemExit("benchmark query timed out")
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    steady = batches[2:-1] if len(batches) > 4 else batches[1:]
    steady_rate = None
    if len(steady) >= 2:
        span = _end_time(steady[-1]) - _end_time(batches[batches.index(steady[0]) - 1])
        steady_rate = sum(p["numInputRows"] for p in steady) / span
    return {"rows": rows, "batches": len(batches), "mean_batch": rows / max(1, len(batches)),
            "steady_msgs_per_s": steady_rate, "end_to_end_msgs_per_s": rows / total_secs}


def bench_source(spark, args, addr: str, http: str, work: Path, batch_size: int) -> dict:
    topic = f"bench_src_{int(time.time() * 1000) % 10**9}"
    create_channel(http, topic, "spark")
    t0 = time.perf_counter()
    prefill(addr, topic, args.messages, args.size)
    fill_secs = time.perf_counter() - t0
    out = work / f"src_out_{topic}"
    started = time.perf_counter()
    query = (
        spark.readStream.format("nsq").option("nsqd_tcp_addresses", addr).option("nsqd_http_addresses", http)
        .option("topic", topic).option("channel", "spark")
        .option("maxBatchSize", batch_size).option("maxInFlight", args.max_in_flight or 2 * batch_size)
        .option("pollTimeoutMs", 100).load()
        .writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(work / f"src_ckpt_{topic}")).trigger(availableNow=True).start()
    )
    result = measure(query, args.timeout, started)
    written = spark.read.parquet(str(out)).count()
    ch = next((c for c in topic_stats(http, topic).get("channels", []) if c["channel_name"] == "spark"), {})
    result.update({
        "messages": args.messages, "batch_size": batch_size, "parquet_rows": written,
        "prefill_msgs_per_s": args.messages / fill_secs,
        "left_in_flight": ch.get("in_flight_count"), "left_depth": ch.get("depth"),
    })
    return result


def bench_ceiling(spark, args, work: Path, batch_size: int) -> dict:
    name = f"ceil_{int(time.time() * 1000) % 10**9}"
    started = time.perf_counter()
    query = (
        spark.readStream.format("ceiling").option("messages", args.messages).option("size", args.size)
        .option("maxBatchSize", batch_size).load()
        .writeStream.format("parquet").option("path", str(work / f"{name}_out"))
        .option("checkpointLocation", str(work / f"{name}_ckpt")).trigger(availableNow=True).start()
    )
    result = measure(query, args.timeout, started)
    result.update({"messages": args.messages, "batch_size": batch_size})
    return result


def compare(spark, args, addr: str, http: str, work: Path) -> list[dict]:
    """nsq source and ceiling, alternately, ``rounds`` times per batch size: best of each."""
    table = []
    for batch_size in args.batch_sizes:
        nsq, ceiling = [], []
        for _ in range(args.rounds):
            if "ceiling" in args.scenarios:
                ceiling.append(bench_ceiling(spark, args, work, batch_size))
            if "source" in args.scenarios:
                nsq.append(bench_source(spark, args, addr, http, work, batch_size))
        row: dict = {"batch_size": batch_size}
        for label, runs in (("nsq", nsq), ("ceiling", ceiling)):
            if runs:
                row[label] = max(r["steady_msgs_per_s"] or 0 for r in runs)
                row[label + "_end_to_end"] = max(r["end_to_end_msgs_per_s"] for r in runs)
                row[label + "_runs"] = runs
        if nsq and ceiling and row["ceiling"]:
            row["ratio"] = row["nsq"] / row["ceiling"]
        table.append(row)
        line = f"batch {batch_size:>6,}:"
        if nsq:
            line += f" nsq {row['nsq']:,.0f} msgs/s"
            bad = [r for r in nsq if r["parquet_rows"] != args.messages or r["left_in_flight"] or r["left_depth"]]
            if bad:
                line += f" (INCOMPLETE: {[(r['parquet_rows'], r['left_depth'], r['left_in_flight']) for r in bad]})"
        if ceiling:
            line += f", ceiling {row['ceiling']:,.0f} msgs/s"
        if "ratio" in row:
            line += f", ratio {row['ratio']:.2f}x"
        print(line + f" (steady, best of {args.rounds})", flush=True)
    return table


def bench_sink(spark, args, addr: str, http: str) -> dict:
    topic = f"bench_sink_{int(time.time() * 1000) % 10**9}"
    create_channel(http, topic, "drain")  # nsqd keeps the messages in the channel's memory queue
    df = (spark.range(args.messages, numPartitions=2)
          .selectExpr(f"CAST(rpad(CAST(id AS STRING), {args.size}, 'x') AS BINARY) AS body").cache())
    df.count()
    results = []
    for attempt in range(args.sink_runs):
        t0 = time.perf_counter()
        (df.write.format("nsq").mode("append").option("nsqd_tcp_addresses", addr).option("topic", topic)
           .option("mpubSize", args.mpub_size).save())
        results.append(time.perf_counter() - t0)
    count = topic_stats(http, topic).get("message_count")
    df.unpersist()
    best = min(results)
    return {"messages": args.messages, "runs": args.sink_runs, "published": count,
            "best_msgs_per_s": args.messages / best, "all_msgs_per_s": [round(args.messages / s) for s in results]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--batch-sizes", default="20000,50000,100000", help="source maxBatchSize values")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each source per batch size (best counts)")
    ap.add_argument("--max-in-flight", type=int, default=0, help="source maxInFlight (default 2 x batch)")
    ap.add_argument("--max-rdy-count", type=int, default=2500, help="nsqd --max-rdy-count")
    ap.add_argument("--mpub-size", type=int, default=2000, help="sink mpubSize")
    ap.add_argument("--sink-runs", type=int, default=3)
    ap.add_argument("--scenarios", default="source,ceiling,sink")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", action="store_true", help="print results as one JSON line")
    args = ap.parse_args()
    args.batch_sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    from nsqpy.spark._compat import HAS_AVAILABLE_NOW

    if not HAS_AVAILABLE_NOW and ("source" in args.scenarios or "ceiling" in args.scenarios):
        raise SystemExit("the source benchmark uses trigger(availableNow=True): PySpark >= 4.2")

    work = Path(tempfile.mkdtemp(prefix="spark_bench_"))
    (work / "nsqd").mkdir()
    proc, addr, http = start_nsqd(str(work / "nsqd"), args.max_rdy_count)
    spark = None
    results: dict = {}
    try:
        spark = build_spark()
        if "source" in args.scenarios or "ceiling" in args.scenarios:
            spark.dataSource.register(CeilingSource)
            results["source"] = compare(spark, args, addr, http, work)
        if "sink" in args.scenarios:
            results["sink"] = bench_sink(spark, args, addr, http)
            print(f"sink:   {results['sink']['best_msgs_per_s']:,.0f} msgs/s (best of {args.sink_runs}: "
                  f"{results['sink']['all_msgs_per_s']})", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(orjson.dumps(results).decode())
    else:
        for name, res in results.items():
            print(name, res)


if __name__ == "__main__":
    main()
