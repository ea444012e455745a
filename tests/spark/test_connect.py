"""format("nsq") through Spark Connect: a Spark Connect server started from pyspark's own
``spark-connect`` jar on a free port, and a client using ``SparkSession.builder.remote``.

The server's Python workers (which run the data source: planner, source runner, sink tasks) get
nsqpy because the server runs with ``PYSPARK_PYTHON`` set to an interpreter that has it; the
client only registers the class (docs/spark.md, "Spark Connect")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.servers import unique_name

from spark.nsq_spark_util import channel_stats, create_channel, drain
from spark.spark_procs import start_connect_server

HERE = Path(__file__).resolve().parent


@pytest.mark.timeout(600)
def test_source_and_sink_through_a_spark_connect_server(nsqd, tmp_path):
    pytest.importorskip("grpc", reason="the connect extra (pip install -e '.[connect]') is not installed")
    server = start_connect_server(tmp_path / "server")
    try:
        src, dst = unique_name("csrc"), unique_name("cdst")
        n = 2000
        for channel in ("copy", "archive"):
            create_channel(nsqd.http_address, src, channel)
        create_channel(nsqd.http_address, dst, "verify")
        out = subprocess.run(
            [sys.executable, str(HERE / "connect_client.py"), f"sc://127.0.0.1:{server.port}",
             "--nsqd-tcp", nsqd.tcp_address, "--nsqd-http", nsqd.http_address, "--src", src, "--dst", dst,
             "--work", str(tmp_path / "work"), "--n", str(n)],
            capture_output=True, text=True, timeout=360,
        )
        assert out.returncode == 0, out.stderr[-4000:] + server.log.read_text()[-3000:]
        report = json.loads(out.stdout.strip().splitlines()[-1])
        assert report["session"].startswith("pyspark.sql.connect"), report
        assert report["copy_ended"] and report["copy_error"] is None, report
        assert report["archive_ended"], report
        assert report["archived_rows"] == report["archived_distinct_bodies"] == n, report
        # the sink published every row (batch sink, then the streaming copy), and the source
        # FINished everything it read
        assert sorted(drain(nsqd.tcp_address, dst, n)) == sorted(b"c-%d" % i for i in range(n))
        for channel in ("copy", "archive"):
            ch = channel_stats(nsqd.http_address, src, channel)
            assert (ch["depth"], ch["in_flight_count"], ch["message_count"]) == (0, 0, n), ch
    finally:
        server.stop()
    assert server.proc.returncode is not None
