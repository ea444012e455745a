"""Spark connector throughput on Spark against our nsqd (200-byte messages by default).

Source scenarios, each a pre-filled topic (or in-memory rows) read into a Parquet sink with
trigger AvailableNow (so every nsq message is also FINished), measured in one SparkSession,
alternately, ``--rounds`` times per ``--batch-sizes`` value (default 20000, 50000, 100000).
Reported: the steady-state rate (rows of the micro-batches after the first two, over the wall time
between their ends) and the end-to-end rate including query start-up.

* ``executor`` — ``format("nsq")`` reading on the executors (``mode=executor``, nsqd with
  ``--leases``): ``--partitions`` leases per batch (partitionsPerNode; one nsqd).
* ``driver`` — ``format("nsq")`` with its driver-side reader (``mode=driver``).
* ``pceiling`` — a trivial in-memory *partitioned* Python source (:class:`PartitionedCeiling`),
  ``--partitions`` partitions read on the executors, rows handed out as slices of one ready-made
  Arrow batch per Python worker: the ceiling of executor-side reads.
* ``ceiling`` — the same rows from a trivial driver-side (Simple) source (:class:`CeilingSource`):
  the ceiling of the driver-side reader.
* ``sink`` — ``df.write.format("nsq")`` of a cached DataFrame of bodies, 2 partitions; rate =
  messages / job time, checked against nsqd's ``message_count``.

``--cluster N`` runs everything on a standalone cluster started here (a master and N workers of
one core each, pyspark's own scripts, stopped by PID) instead of local[2]. The executor-side
reads log their lease, duration and the Python worker's peak RSS (``NSQPY_SPARK_LOG``); the
largest partition's figures are printed at the end.

    python bench/spark_bench.py --scenarios executor,pceiling,driver,ceiling
    python bench/spark_bench.py --scenarios executor,pceiling --cluster 2 --batch-sizes 100000
    python bench/spark_bench.py --scenarios executor --partitions 1 --batch-sizes 100000   # RSS

A shared 2-vCPU box moves these figures by ±30% between runs; Spark, nsqd and the Python
workers share the two cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
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
         "--log-level=warn", "--leases"],
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


def bench_env() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))


def build_spark(master: str = "local[2]"):
    bench_env()
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master).appName("nsqpy-spark-bench")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "2g").config("spark.executor.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import nsqpy.spark

    nsqpy.spark.register(spark)
    return spark


# --- the ceiling: a Python streaming source with nothing to do ---------------------------------
# Defined in __main__, so Spark's cloudpickle ships the classes by value to the runner process.

from pyspark.sql.datasource import (  # noqa: E402
    DataSource, DataSourceStreamReader, InputPartition, SimpleDataSourceStreamReader,
)

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
            self._rows = ceiling_rows(self.batch, self.size)
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


def ceiling_rows(n: int, size: int):
    """``n`` rows of the nsq schema as one Arrow batch (built once per process by the callers)."""
    import pyarrow as pa

    from nsqpy.spark.arrow import arrow_schema

    schema = arrow_schema()
    return pa.RecordBatch.from_arrays([
        pa.array([(b"%010d" % i).ljust(size, b"x") for i in range(n)], pa.binary()),
        pa.array(["%016x" % i for i in range(n)], pa.string()),
        pa.array([1] * n, pa.int32()),
        pa.array([time.time_ns() // 1000] * n, pa.int64()).cast(schema.field("timestamp").type),
        pa.array(["bench"] * n, pa.string()),
        pa.array(["spark"] * n, pa.string()),
        pa.array(["127.0.0.1:4150"] * n, pa.string()),
    ], schema=schema)


class PartitionedCeiling(DataSource):
    """``format("pceiling")``: ``messages`` rows, ``maxBatchSize`` per batch in ``partitions``
    partitions, read on the executors."""

    @classmethod
    def name(cls) -> str:
        return "pceiling"

    def schema(self):
        return SCHEMA

    def streamReader(self, schema):
        return PartitionedCeilingReader(int(self.options["messages"]), int(self.options["size"]),
                                        int(self.options["maxBatchSize"]), int(self.options["partitions"]))


class PartitionedCeilingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, total: int, size: int, batch: int, partitions: int) -> None:
        self.total, self.size, self.batch, self.parts = total, size, batch, partitions

    def initialOffset(self):
        return {"seq": 0}

    def latestOffset(self, start=None, limit=None):
        start = start or {"seq": 0}
        return {"seq": min(self.total, start["seq"] + self.batch)}

    def partitions(self, start, end):
        n = end["seq"] - start["seq"]
        share = -(-n // self.parts)
        return [InputPartition(min(share, n - i * share)) for i in range(self.parts) if n - i * share > 0]

    def read(self, partition):
        # one ready-made batch per Python worker process (kept on a module every worker has)
        cache = sys.__dict__.setdefault("_nsqpy_bench_rows", {})
        key = (partition.value, self.size)
        if key not in cache:
            cache.clear()
            cache[key] = ceiling_rows(partition.value, self.size)
        return iter([cache[key]])

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


def bench_source(spark, args, addr: str, http: str, work: Path, batch_size: int, mode: str) -> dict:
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
        .option("pollTimeoutMs", 100).option("mode", mode).option("partitionsPerNode", args.partitions)
        .load()
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


def bench_ceiling(spark, args, work: Path, batch_size: int, fmt: str) -> dict:
    name = f"ceil_{int(time.time() * 1000) % 10**9}"
    started = time.perf_counter()
    query = (
        spark.readStream.format(fmt).option("messages", args.messages).option("size", args.size)
        .option("maxBatchSize", batch_size).option("partitions", args.partitions).load()
        .writeStream.format("parquet").option("path", str(work / f"{name}_out"))
        .option("checkpointLocation", str(work / f"{name}_ckpt")).trigger(availableNow=True).start()
    )
    result = measure(query, args.timeout, started)
    result.update({"messages": args.messages, "batch_size": batch_size})
    return result


SOURCES = ("executor", "pceiling", "driver", "ceiling")


def compare(spark, args, addr: str, http: str, work: Path) -> list[dict]:
    """The source scenarios, alternately, ``rounds`` times per batch size: best of each."""
    table = []
    for batch_size in args.batch_sizes:
        runs: dict[str, list[dict]] = {name: [] for name in SOURCES if name in args.scenarios}
        for _ in range(args.rounds):
            for name in runs:
                if name in ("executor", "driver"):
                    runs[name].append(bench_source(spark, args, addr, http, work, batch_size, name))
                else:
                    runs[name].append(bench_ceiling(spark, args, work, batch_size, name))
        row: dict = {"batch_size": batch_size}
        line = f"batch {batch_size:>6,}:"
        for name, done in runs.items():
            rates = sorted(r["steady_msgs_per_s"] or 0 for r in done)
            row[name] = rates[-1]
            row[name + "_range"] = (rates[0], rates[-1])
            row[name + "_end_to_end"] = max(r["end_to_end_msgs_per_s"] for r in done)
            row[name + "_runs"] = done
            line += f" {name} {rates[0]:,.0f}-{rates[-1]:,.0f}"
            bad = [r for r in done if "parquet_rows" in r and (r["parquet_rows"] != args.messages
                                                               or r["left_in_flight"] or r["left_depth"])]
            if bad:
                line += f" (INCOMPLETE: {[(r['parquet_rows'], r['left_depth'], r['left_in_flight']) for r in bad]})"
        for mine, ceiling in (("executor", "pceiling"), ("driver", "ceiling"), ("executor", "driver")):
            if row.get(mine) and row.get(ceiling):
                row[f"{mine}/{ceiling}"] = row[mine] / row[ceiling]
                line += f", {mine}/{ceiling} {row[mine] / row[ceiling]:.2f}x"
        print(line + f" msgs/s (steady, range of {args.rounds})", flush=True)
        table.append(row)
    return table


_READ_LOG = re.compile(r"lease (\S+) at \S+ \((\w+)\): (\d+) rows in ([0-9.]+)s \(pid (\d+), "
                       r"peak RSS ([0-9.]+) -> ([0-9.]+) MiB\)")


def read_figures(log: Path) -> dict:
    """The executor-side reads the Python workers logged: count, the largest partition's rows,
    read time and the peak RSS of a worker after reading it."""
    reads = [m.groups() for m in _READ_LOG.finditer(log.read_text(errors="replace"))] if log.exists() else []
    if not reads:
        return {}
    rows = max(int(r[2]) for r in reads)
    biggest = [r for r in reads if int(r[2]) == rows]
    return {"reads": len(reads), "largest_partition_rows": rows,
            "read_seconds": sorted(float(r[3]) for r in biggest),
            "peak_rss_mib_before_after": sorted((float(r[5]), float(r[6])) for r in biggest)[-1]}


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
    ap.add_argument("--scenarios", default="executor,pceiling,driver,ceiling,sink")
    ap.add_argument("--partitions", type=int, default=2, help="partitions per batch (executor, pceiling)")
    ap.add_argument("--cluster", type=int, default=0, help="run on a standalone cluster of this many 1-core workers")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", action="store_true", help="print results as one JSON line")
    args = ap.parse_args()
    args.batch_sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    from nsqpy.spark._compat import HAS_AVAILABLE_NOW

    args.scenarios = set(args.scenarios.split(","))
    sources = [name for name in SOURCES if name in args.scenarios]
    if not HAS_AVAILABLE_NOW and sources:
        raise SystemExit("the source benchmark uses trigger(availableNow=True): PySpark >= 4.2")

    work = Path(tempfile.mkdtemp(prefix="spark_bench_"))
    (work / "nsqd").mkdir()
    reads_log = work / "reads.log"
    os.environ["NSQPY_SPARK_LOG"] = str(reads_log)  # the Python workers log each lease read
    proc, addr, http = start_nsqd(str(work / "nsqd"), args.max_rdy_count)
    spark = None
    results: dict = {}
    cluster: list = []
    try:
        master = "local[2]"
        if args.cluster:
            bench_env()
            sys.path.insert(0, str(ROOT / "tests"))
            from spark.spark_procs import start_master, start_worker

            cluster.append(start_master(work / "cluster"))
            master = f"spark://127.0.0.1:{cluster[0].port}"
            for i in range(args.cluster):
                cluster.append(start_worker(work / "cluster" / f"w{i}", master, cores=1, memory="1500m"))
        spark = build_spark(master)
        if sources:
            spark.dataSource.register(CeilingSource)
            spark.dataSource.register(PartitionedCeiling)
            results["source"] = compare(spark, args, addr, http, work)
            results["reads"] = read_figures(reads_log)
            if results["reads"]:
                print(f"executor-side reads: {results['reads']}", flush=True)
        if "sink" in args.scenarios:
            results["sink"] = bench_sink(spark, args, addr, http)
            print(f"sink:   {results['sink']['best_msgs_per_s']:,.0f} msgs/s (best of {args.sink_runs}: "
                  f"{results['sink']['all_msgs_per_s']})", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        for jvm in reversed(cluster):
            jvm.stop()
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
