"""The click pipeline on a Spark standalone cluster: a master and a worker started with pyspark's
``spark-class`` (loopback, free ports), executors in their own JVMs (launched by the worker) with
their own Python workers, everything stopped by PID.

This is the deployment docs/spark.md's spark-submit recipe describes, scaled down: the driver is
``python -m nsqpy.pipeline`` with ``SPARK_MASTER=spark://...``; the source runner lives on the
driver, the sink tasks and the aggregation run in the executor JVMs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from spark.spark_procs import spark_env, start_master, start_worker


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
