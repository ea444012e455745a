"""Spark fixtures: one local[2] SparkSession for the whole session (7-10 s to start), UI off,
and nsqlookupd as a real process. Spark tests are never skipped: Java 17 and pyspark are
part of the test environment (the `spark` extra).

``NSQPY_SPARK_NSQD=upstream`` runs these tests against upstream's nsqd (``NSQ_UPSTREAM_BIN``,
through ``helpers.upstream``) instead of ours: the source then takes its driver-side reader, the
fallback for an nsqd without leases, and the tests that need ``--leases`` skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.servers import Nsqd, Nsqlookupd, ServerProcess, free_port
from helpers.upstream import live_only, upstream_path

from spark.nsq_spark_util import build_spark, stop_spark

UPSTREAM_NSQD = upstream_path("nsqd")


class UpstreamNsqd(ServerProcess):
    """Upstream v1.3.0's nsqd binary, with the address properties of helpers.servers.Nsqd."""

    def __init__(self, directory: Path, *extra: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.tcp_port, self.http_port = free_port(), free_port()
        super().__init__([str(UPSTREAM_NSQD), f"--tcp-address=127.0.0.1:{self.tcp_port}",
                          f"--http-address=127.0.0.1:{self.http_port}", "--broadcast-address=127.0.0.1",
                          f"--data-path={directory}", *extra],
                         f"http://127.0.0.1:{self.http_port}/ping", directory / "nsqd.log")

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"


@pytest.fixture(scope="session")
def spark():
    session = build_spark()
    yield session
    stop_spark(session)


@pytest.fixture
def nsqd_factory(tmp_path):
    """As the suite's: nsqd processes with extra flags, stopped at the end; upstream's nsqd with
    ``NSQPY_SPARK_NSQD=upstream``."""
    started: list = []
    upstream = os.environ.get("NSQPY_SPARK_NSQD") == "upstream"

    def start(*extra: str, data_path: Path | None = None):
        directory = data_path or tmp_path / f"nsqd{len(started)}"
        if upstream:
            if "--leases" in extra:
                pytest.skip("upstream nsqd has no leases")
            node = UpstreamNsqd(directory, *extra)
        else:
            node = Nsqd(directory, *extra)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


@pytest.fixture
def upstream_nsqd(tmp_path):
    """Upstream's nsqd for a test of our client against it: live only, a recording of its
    answers cannot stand in for the server."""
    if UPSTREAM_NSQD is None:
        pytest.skip(live_only("the Spark source reading from upstream's nsqd needs that nsqd running"))
    node = UpstreamNsqd(tmp_path / "upstream-nsqd")
    yield node
    node.stop()


@pytest.fixture
def lookupd(tmp_path):
    node = Nsqlookupd(tmp_path / "lookupd")
    yield node
    node.stop()
