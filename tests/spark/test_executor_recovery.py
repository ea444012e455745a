"""The executor-side source when processes die: the driver killed between the sink's write and
Spark's commit (local[2]), an executor killed mid-batch on a standalone cluster (a master and two
workers started here). Drivers run as their own processes (lease_driver.py); everything is
stopped by PID."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.servers import unique_name

from spark.nsq_spark_util import channel_stats, create_channel, publish_n, wait_until
from spark.spark_procs import spark_env, start_master, start_worker
from spark.test_kill9 import _children, alive, kill_tree, process_tree

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


@pytest.mark.timeout(300)
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


_READ = re.compile(r"\d+ nsqpy\.spark INFO nsq source: lease (\S+) at \S+ \((\w+)\): (\d+) rows .*\(pid (\d+),")


def executor_jvms(worker) -> list[int]:
    """The executor JVMs a standalone worker launched (from any of its threads)."""
    return [pid for pid in _children().get(worker.pid, [])
            if "CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")]


def ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        out.append(pid)
    return out


@pytest.mark.timeout(420)
def test_standalone_executors_read_and_an_executor_killed_mid_batch_loses_nothing(spark, nsqd_factory, tmp_path,
                                                                                   monkeypatch):
    nsqd = nsqd_factory("--leases")
    topic = unique_name("execkill")
    n = 6000
    create_channel(nsqd.http_address, topic, "spark")
    expected = publish_n(nsqd.tcp_address, topic, n)
    work, log, reads = tmp_path / "work", tmp_path / "driver.log", tmp_path / "reads.log"
    work.mkdir()
    cluster = tmp_path / "cluster"
    master = start_master(cluster)
    workers, proc = [], None
    seen: dict[int, list[int]] = {}
    try:
        url = f"spark://127.0.0.1:{master.port}"
        monkeypatch.setenv("NSQPY_SPARK_LOG", str(reads))  # executors log each lease read, with its PID
        for i in range(2):
            workers.append(start_worker(cluster / f"w{i}", url, cores=1, memory="1g"))
        env = spark_env()
        proc = run_driver("stream", nsqd, topic, work, log, f"--master={url}", "--max-batch=1000",
                          "--slow-ms-per-row=2", "--sink=files", env=env)
        # once data flows, kill one executor JVM while a batch's tasks run (its leases are read
        # and not committed yet)
        wait_until(lambda: (work / "out" / "_spark_metadata" / "0").exists() or proc.poll() is not None,
                   200, what="a first committed batch")
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        executors = {pid for w in workers for pid in executor_jvms(w)}
        assert len(executors) == 2, executors
        victim = executor_jvms(workers[0])[0]
        # the victim's task has read its lease (its UDF now takes a second): kill it there
        done = len(_READ.findall(reads.read_text()))

        def victim_read() -> bool:
            return any(victim in ancestors(int(pid)) for *_, pid in _READ.findall(reads.read_text())[done:])

        wait_until(victim_read, 60, interval=0.02, what="a lease read by the victim's task")
        subprocess.run(["kill", "-9", str(victim)], check=True)
        wait_until(lambda: not alive(victim), 20, what="the executor gone")
        wait_until(lambda: _drained(nsqd, topic), 240, interval=0.5, what="the channel drained and committed")
        driver_side = process_tree(proc.pid)
        seen = {int(pid): ancestors(int(pid)) for *_, pid in _READ.findall(reads.read_text())}
    finally:
        if proc is not None and proc.poll() is None:
            kill_tree(proc)
        for w in workers:
            w.stop()
        master.stop()
    rows = spark.read.parquet(str(work / "out")).select("body").collect()
    bodies = [bytes(r.body) for r in rows]
    assert set(bodies) == set(expected)  # nothing lost
    assert len(bodies) == n  # and nothing twice: the retried tasks replayed their leases
    text = reads.read_text()
    matches = _READ.findall(text)
    assert any(state == "replay" for _, state, _, _ in matches), text[-2000:]  # the lost task's lease, replayed
    # every read ran in a Python worker under an executor JVM, which a worker JVM started: none
    # on the driver's side (its Python, JVM and source runner); the killed executor's are gone
    worker_pids = {w.pid for w in workers}
    assert seen and set(seen).isdisjoint(driver_side)
    assert all(not chain or worker_pids & set(chain) for chain in seen.values()), seen
    assert any(chain for chain in seen.values())


def _drained(nsqd, topic: str) -> bool:
    ch = channel_stats(nsqd.http_address, topic, "spark")
    return ch.get("depth") == 0 and ch.get("in_flight_count") == 0 and ch.get("message_count", 0) > 0
