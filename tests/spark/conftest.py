"""Spark fixtures: one local[2] SparkSession for the whole session (7-10 s to start), UI off,
and nsqlookupd as a real process. Spark tests are never skipped: Java 17 and pyspark are
part of the test environment (the `spark` extra)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.servers import VENV_BIN, Nsqd, ServerProcess, free_port

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"


def spark_env() -> None:
    """Workers must run this interpreter (it has pyarrow and nsqpy), and must import nsqpy."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
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


@pytest.fixture(scope="session")
def spark():
    session = build_spark()
    yield session
    stop_spark(session)


class Lookupd(ServerProcess):
    def __init__(self, data_path: Path, *extra: str) -> None:
        self.tcp_port = free_port()
        self.http_port = free_port()
        data_path.mkdir(parents=True, exist_ok=True)
        argv = [str(VENV_BIN / "nsqlookupd"), f"--tcp-address=127.0.0.1:{self.tcp_port}",
                f"--http-address=127.0.0.1:{self.http_port}", "--broadcast-address=127.0.0.1", *extra]
        super().__init__(argv, f"http://127.0.0.1:{self.http_port}/ping", data_path / "nsqlookupd.log")

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"


@pytest.fixture
def lookupd(tmp_path):
    node = Lookupd(tmp_path / "lookupd")
    yield node
    node.stop()


@pytest.fixture
def fast_nsqd(nsqd_factory):
    """nsqd whose in-flight timeouts are checked often (redelivery within the tests' patience)."""

    def start(*extra: str) -> Nsqd:
        return nsqd_factory("--msg-timeout=60s", *extra)

    return start
