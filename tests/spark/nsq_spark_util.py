"""Helpers for the Spark tests (no fixtures here, so the kill -9 driver script can use them too)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

import orjson

from nsqpy.client import Consumer, SyncPublisher


def publish_n(address: str, topic: str, n: int, start: int = 0, chunk: int = 1000, size: int = 0) -> list[bytes]:
    """Publish bodies ``m-<i>`` (padded to ``size`` bytes) for i in [start, start+n); return them."""
    bodies = [(b"m-%d" % i).ljust(size, b".") for i in range(start, start + n)]
    with SyncPublisher(address) as pub:
        for i in range(0, n, chunk):
            pub.mpub(topic, bodies[i : i + chunk])
    return bodies


def stats(http_address: str, topic: str) -> dict:
    with urllib.request.urlopen(f"http://{http_address}/stats?format=json&topic={topic}", timeout=5) as resp:
        data = orjson.loads(resp.read())
    for t in data.get("topics") or ():
        if t["topic_name"] == topic:
            return t
    return {}


def channel_stats(http_address: str, topic: str, channel: str) -> dict:
    for c in stats(http_address, topic).get("channels") or ():
        if c["channel_name"] == channel:
            return c
    return {}


def producer_count(lookupd_http: str, topic: str) -> int:
    """How many nsqd nsqlookupd lists for ``topic`` (0 while none has registered it: a 404)."""
    try:
        with urllib.request.urlopen(f"http://{lookupd_http}/lookup?topic={topic}", timeout=2) as resp:
            return len(orjson.loads(resp.read()).get("producers") or ())
    except urllib.error.HTTPError:
        return 0


def create_channel(http_address: str, topic: str, channel: str) -> None:
    """Create topic and channel (as upstream, /channel/create wants an existing topic)."""
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel={channel}"):
        req = urllib.request.Request(f"http://{http_address}{path}", data=b"", method="POST")
        urllib.request.urlopen(req, timeout=5).read()


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.2, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def drain(address: str, topic: str, n: int, channel: str = "verify", timeout: float = 30.0, settle: float = 0.5,
          **options: object) -> list[bytes]:
    """Consume (and FIN) what ``topic`` has for ``channel``: at least ``n`` messages or until timeout,
    then ``settle`` seconds more to catch any extra copies. ``options``: ConnectionOptions (tls=...)."""
    bodies: list[bytes] = []

    async def main() -> None:
        done = asyncio.Event()

        def handle(msg) -> None:
            bodies.append(msg.body)
            if len(bodies) >= n:
                done.set()

        async with Consumer(topic, channel, handle, nsqd_tcp_addresses=[address], max_in_flight=2500, **options):
            try:
                async with asyncio.timeout(timeout):
                    await done.wait()
            except TimeoutError:
                pass
            await asyncio.sleep(settle)

    asyncio.run(main())
    return bodies


# --- Spark sessions (the fixture's, and the kill -9 driver script's) ------------------------

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"


def worker_env() -> dict[str, str]:
    """What makes Spark's Python workers run this interpreter (it has pyarrow and nsqpy),
    through tests/spark/worker_python, so that they import pyspark with its cached bytecode:
    for the tests' own sessions and for every Spark JVM they start (spark_procs.spark_env)."""
    return {"NSQPY_WORKER_PYTHON": sys.executable,
            "PYSPARK_PYTHON": str(Path(__file__).with_name("worker_python"))}


def spark_env() -> None:
    """Workers must run this interpreter and must import nsqpy (:func:`worker_env`)."""
    os.environ.update(worker_env())
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    if str(SRC) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), path) if p)


def build_spark(app: str = "nsqpy-tests"):
    spark_env()
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import nsqpy.spark

    nsqpy.spark.register(spark)
    return spark


def stop_spark(spark) -> None:
    """Stop the session and its JVM by PID (the JVM would otherwise outlive pytest a while)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None) if gateway is not None else None
    spark.stop()
    if gateway is not None:
        try:
            gateway.shutdown()
        except Exception:
            pass
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    SparkContext._gateway = None
    SparkContext._jvm = None


# --- AvailableNow on every PySpark 4.x ------------------------------------------------------


class _DrainedQuery:
    """A default-trigger query whose ``awaitTermination`` stops it once nsqd shows the channel
    drained (nsqpy.spark.stop_when_drained): what AvailableNow does, on PySpark < 4.2."""

    def __init__(self, query, options: dict[str, str]) -> None:
        self._query = query
        self._options = options

    def awaitTermination(self, timeout: float | None = None) -> bool:
        from nsqpy.spark import stop_when_drained

        return stop_when_drained(self._query, self._options, timeout=timeout)

    def __getattr__(self, name: str):
        return getattr(self._query, name)


def start_to_end(writer, nsqd_http: str, topic: str, channel: str = "spark"):
    """Start a query that must read the channel's backlog and end: ``trigger(availableNow=True)``
    where PySpark has it for Python sources (>= 4.2), else the default trigger stopped when drained
    (the recipe docs/spark.md gives for 4.0/4.1). Call ``awaitTermination(timeout)`` on the result."""
    from nsqpy.spark._compat import HAS_AVAILABLE_NOW

    if HAS_AVAILABLE_NOW:
        return writer.trigger(availableNow=True).start()
    options = {"nsqd_http_addresses": nsqd_http, "nsqd_tcp_addresses": "127.0.0.1:1", "topic": topic, "channel": channel}
    return _DrainedQuery(writer.start(), options)


def read_to_end(spark, df, tmp_path, nsqd_http: str, topic: str, timeout: float = 180) -> list[bytes]:
    """Run the streaming ``df`` into parquet under ``tmp_path`` until it has read the channel's
    backlog (:func:`start_to_end`); the bodies it wrote. Fails if the query did not end or failed."""
    out = tmp_path / "out"
    query = start_to_end(df.writeStream.format("parquet").option("path", str(out))
                         .option("checkpointLocation", str(tmp_path / "ckpt")), nsqd_http, topic)
    try:
        assert query.awaitTermination(timeout), "the query did not end"
    finally:
        query.stop()
    assert query.exception() is None
    return [bytes(r.body) for r in spark.read.parquet(str(out)).select("body").collect()]
