"""Spark fixtures: one local[2] SparkSession for the whole session (7-10 s to start), UI off,
and nsqlookupd as a real process. Spark tests are never skipped: Java 17 and pyspark are
part of the test environment (the `spark` extra)."""

from __future__ import annotations

import pytest

from helpers.servers import Nsqlookupd

from spark.nsq_spark_util import build_spark, stop_spark


@pytest.fixture(scope="session")
def spark():
    session = build_spark()
    yield session
    stop_spark(session)


@pytest.fixture
def lookupd(tmp_path):
    node = Nsqlookupd(tmp_path / "lookupd")
    yield node
    node.stop()
