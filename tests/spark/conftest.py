"""Spark fixtures: one local[2] SparkSession for the whole session (7-10 s to start), UI off,
and nsqlookupd as a real process. Spark tests are never skipped: Java 17 and pyspark are
part of the test environment (the `spark` extra)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.servers import VENV_BIN, ServerProcess, free_port

from spark.nsq_spark_util import build_spark, stop_spark


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
