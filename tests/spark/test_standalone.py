"""Spark standalone clusters: a master and workers started with pyspark's ``spark-class``
(loopback, free ports), executors in their own JVMs (launched by the workers) with their own
Python workers, everything stopped by PID.

* The click pipeline, as docs/spark.md's spark-submit recipe describes, scaled down: the driver is
  ``python -m nsqpy.pipeline`` with ``SPARK_MASTER=spark://...``; its nsqd has leases, so the
  source reads in the executors' Python workers, as do the sink tasks and the aggregation.
* The executor-side source with two one-core workers: reads run under the executor JVMs, and an
  executor killed with ``kill -9`` while its task holds a lease loses nothing (the retried task
  replays the lease)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.servers import unique_name

from spark.nsq_spark_util import channel_stats, create_channel, publish_n, wait_until
from spark.spark_procs import spark_env, start_master, start_worker
from spark.test_executor_recovery import run_driver
from spark.test_kill9 import _children, alive, kill_tree, process_tree


@pytest.mark.timeout(480)
def test_pipeline_on_a_standalone_master_and_worker(tmp_path):
    master = start_master(tmp_path / "cluster")
    worker = None
    try:
        url = f"spark://127.0.0.1:{master.port}"
        worker = start_worker(tmp_path / "cluster", url, cores=2, memory="2g")
        env = spark_env(SPARK_MASTER=url)
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        out = subprocess.run(
            [sys.executable, "-m", "nsqpy.pipeline", "--events", "2000", "--out", str(tmp_path / "out"),
             "--trigger", "1 second", "--timeout", "300"],
            capture_output=True, text=True, timeout=420, env=env,
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:] + worker.log.read_text()[-2000:]
        report = json.loads(out.stdout[out.stdout.rindex("\n{") + 1:])  # the report ends the output
        assert report["ok"], report
        assert report["metrics"]["stream_clicks"] == report["metrics"]["batch_clicks"] == 2000
        assert report["spam_users_detected"] == report["spam_users_generated"]
        # the application ran on the cluster: the worker launched executor JVMs for it
        apps = list((tmp_path / "cluster" / "worker").glob("app-*"))
        assert len(apps) == 1, apps
        executors = [d for d in apps[0].iterdir() if d.is_dir()]
        assert executors, "no executor was launched"
        assert any("CoarseGrainedExecutorBackend" in (d / "stderr").read_text(errors="replace")
                   or (d / "stderr").stat().st_size > 0 for d in executors)
    finally:
        if worker is not None:
            worker.stop()
        master.stop()
    for jvm in (master, worker):
        assert jvm is not None and jvm.proc.returncode is not None
        assert not os.path.exists(f"/proc/{jvm.pid}") or jvm.proc.poll() is not None


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
