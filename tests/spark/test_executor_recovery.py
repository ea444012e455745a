"""The executor-side source when its driver dies between the sink's write and Spark's commit
(local[2]; the driver runs as its own process, lease_driver.py, killed with its whole tree by PID).
An executor killed mid-batch on a standalone cluster: test_standalone.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.servers import unique_name

from spark.nsq_spark_util import channel_stats, create_channel, publish_n, wait_until
from spark.test_kill9 import kill_tree

SCRIPT = Path(__file__).resolve().parent / "lease_driver.py"


def run_driver(mode: str, nsqd, topic: str, work: Path, log: Path, *extra: str, env=None) -> subprocess.Popen:
    argv = [sys.executable, str(SCRIPT), mode, "--nsqd-tcp", nsqd.tcp_address, "--nsqd-http", nsqd.http_address,
            "--topic", topic, "--work", str(work), *extra]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def finish(proc: subprocess.Popen, log: Path, timeout: float) -> None:
    try:
        rc = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    assert rc == 0, log.read_text(errors="replace")[-3000:]


@pytest.mark.timeout(420)
def test_driver_killed_after_the_sink_wrote_a_batch_restarts_with_the_same_rows(spark, nsqd_factory, tmp_path):
    """kill -9 of the whole driver while batch 2 is in the sink (written, not committed): the
    restarted query re-runs batch 2 from its checkpoint, replays the same leases, gets the same
    rows, and the output keyed on the batch id holds every message exactly once."""
    nsqd = nsqd_factory("--leases")
    topic = unique_name("drvkill")
    n = 3000
    create_channel(nsqd.http_address, topic, "spark")
    expected = publish_n(nsqd.tcp_address, topic, n)
    work, log = tmp_path / "work", tmp_path / "driver.log"
    work.mkdir()
    proc = run_driver("stream", nsqd, topic, work, log, "--hang-after-batch=2")
    try:
        wait_until(lambda: (work / "hung").exists() or proc.poll() is not None, 150, interval=0.1,
                   what="batch 2 in the sink")
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
    finally:
        kill_tree(proc)
    assert (work / "ckpt" / "offsets" / "2").exists() and not (work / "ckpt" / "commits" / "2").exists()
    first = {bytes(r.body) for r in spark.read.parquet(str(work / "out" / "batch_id=2")).collect()}
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert ch["lease_held_count"] == len(first) > 0  # batch 2's leases, closed, holding its rows

    proc = run_driver("drain", nsqd, topic, work, log)
    finish(proc, log, 200)
    again = {bytes(r.body) for r in spark.read.parquet(str(work / "out" / "batch_id=2")).collect()}
    assert again == first  # the re-run batch read the same messages
    rows = spark.read.parquet(str(work / "out")).select("body", "id", "attempts").collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(expected)  # every message exactly once
    assert {r.attempts for r in rows} == {1}
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert (ch["depth"], ch["in_flight_count"], ch["timeout_count"]) == (0, 0, 0)
