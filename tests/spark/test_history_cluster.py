"""The batch history source where Spark's executors are elsewhere: a standalone master and two
workers started here, and a Spark Connect server. Each reads nsqd's history in its own Spark
application (history_client.py); runs only on the newest PySpark (make test deselects it on the
floor, as test_connect and test_standalone)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.servers import unique_name

from spark.nsq_spark_util import publish_n
from spark.spark_procs import spark_env, start_connect_server, start_master, start_worker

HERE = Path(__file__).resolve().parent
N = 20_000


@pytest.fixture
def retained(nsqd_factory):
    nsqd = nsqd_factory("--retention=1h")
    topic = unique_name("hc")
    publish_n(nsqd.tcp_address, topic, N, chunk=5000)
    return nsqd, topic


def _client(tmp_path: Path, nsqd, topic: str, *where: str, env=None) -> dict:
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run([sys.executable, str(HERE / "history_client.py"), *where, "--nsqd-http",
                          nsqd.http_address, "--topic", topic, "--work", str(work)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check(report: dict) -> None:
    assert report["columns"] == ["body", "id", "attempts", "timestamp", "topic", "channel", "nsqd_address"]
    assert report["rows"] == report["distinct_ids"] == report["parquet_rows"] == N, report
    assert report["parquet_distinct_bodies"] == N, report


@pytest.mark.timeout(420)
def test_batch_on_a_standalone_cluster(retained, tmp_path):
    nsqd, topic = retained
    cluster = tmp_path / "cluster"
    master = start_master(cluster)
    workers = []
    try:
        url = f"spark://127.0.0.1:{master.port}"
        workers = [start_worker(cluster / f"w{i}", url, cores=1, memory="1g") for i in range(2)]
        env = spark_env()
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        report = _client(tmp_path, nsqd, topic, "--master", url, env=env)
        _check(report)
        assert report["partitions"] >= 2, report
        # the application's executors ran on the workers
        for i in range(2):
            assert list((cluster / f"w{i}" / "worker").glob("app-*")), f"worker {i} ran no executor"
    finally:
        for w in workers:
            w.stop()
        master.stop()


@pytest.mark.timeout(420)
def test_batch_through_spark_connect(retained, tmp_path):
    pytest.importorskip("grpc", reason="the connect extra (pip install -e '.[connect]') is not installed")
    nsqd, topic = retained
    server = start_connect_server(tmp_path / "server")
    try:
        report = _client(tmp_path, nsqd, topic, "--remote", f"sc://127.0.0.1:{server.port}")
        assert report["session"].startswith("pyspark.sql.connect"), report
        _check(report)
    finally:
        server.stop()
