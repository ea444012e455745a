"""The README's Spark snippet as a user runs it: ``.venv/bin/python clicks.py``, no activated venv,
``python3`` on PATH an interpreter without nsqpy (issue #34: the workers used to fail with
``ModuleNotFoundError: No module named 'nsqpy'``). local[2], the snippet's console sink, 20
messages published after ``start()`` returned: all 20 rows printed.

Also :mod:`nsqpy.spark.workers` on its own: the probe, and the error when the user chose a worker
Python without nsqpy.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from docs.docblocks import extract, rewrite_ports
from docs.docrun import ROOT, VENV_BIN, Cluster, block_env, scratch_dir
from helpers.servers import free_port

from nsqpy.spark.workers import probe

BASE_PYTHON = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def readme_spark_snippet() -> str:
    """The README's Python block that registers nsqpy.spark, up to the line that starts the query."""
    blocks = [b for b in extract(ROOT / "README.md") if b.lang == "python" and "nsqpy.spark.register" in b.code]
    assert len(blocks) == 1, "the README has one Spark snippet"
    code = blocks[0].code
    assert 'master("local[2]")' in code and 'format("console")' in code
    lines = code.splitlines()
    last = next(i for i, line in enumerate(lines) if ".start()" in line)
    return "\n".join(lines[: last + 1]) + "\n"


def user_env(tmp: Path, ports: tuple[int, ...]) -> dict[str, str]:
    """No venv on PATH; ``python3`` there is the venv's base interpreter, which has no nsqpy."""
    env = block_env(ports, tmp / "data")
    shadow = tmp / "bin"
    shadow.mkdir()
    (shadow / "python3").symlink_to(BASE_PYTHON)
    env["PATH"] = f"{shadow}{os.pathsep}{env['PATH']}"
    return env


def _stats(http_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/stats?format=json", timeout=5) as resp:
        return json.load(resp)


def _channel_exists(http_port: int, topic: str, channel: str) -> bool:
    return any(t["topic_name"] == topic and any(c["channel_name"] == channel for c in t["channels"])
               for t in _stats(http_port).get("topics", []))


@pytest.mark.timeout(420)
def test_readme_spark_snippet_gets_all_rows(tmp_path: Path) -> None:
    ports = tuple(free_port() for _ in range(5))
    env = user_env(tmp_path, ports)
    premise = subprocess.run(["python3", "-c", "import nsqpy"], env=env, capture_output=True)
    assert premise.returncode != 0, "python3 on the user's PATH must lack nsqpy for this test to mean anything"

    work = scratch_dir(tmp_path)
    script = work / "clicks.py"
    script.write_text(rewrite_ports(readme_spark_snippet(), ports)
                      + 'import sys\nprint("query ready", flush=True)\n'
                        "sys.stdin.readline()   # the test writes a line once it saw every row\n"
                        "query.stop()\nspark.stop()\n")
    cluster = Cluster([str(VENV_BIN / "nsqpy-dev")], ports, work, env, tmp_path / "cluster.log")
    proc = subprocess.Popen([".venv/bin/python", "clicks.py"], cwd=work, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode(errors="replace"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()

    def read_until(done, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if line is None:
                raise AssertionError(f"the script exited ({proc.poll()}) before {what}:\n{''.join(output)}")
            output.append(line)
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} in {timeout:g}s:\n{''.join(output)}")

    try:
        read_until(lambda: any("query ready" in line for line in output), 240, "query ready")
        # branch only (until #33 merges, whose source creates the channel while planning, before
        # start() returns): wait until the first read has created channel "metrics"
        deadline = time.monotonic() + 60
        while not _channel_exists(ports[1], "clicks", "metrics"):
            assert time.monotonic() < deadline, "channel clicks/metrics never appeared"
            time.sleep(0.2)
        bodies = [f"click-{i:02d}" for i in range(20)]
        req = urllib.request.Request(f"http://127.0.0.1:{ports[1]}/mpub?topic=clicks",
                                     data="\n".join(bodies).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.read() == b"OK"
        seen: set[str] = set()

        def all_rows() -> bool:
            for line in output[-50:]:
                seen.update(re.findall(r"\|(click-\d\d)\s*\|", line))
            return len(seen) == 20

        read_until(all_rows, 120, "20 rows on the console")
        assert seen == set(bodies)
        assert "nsq source: driver-side reader" in "".join(output), "the mode choice is printed"
        assert "ModuleNotFoundError" not in "".join(output)
        proc.stdin.write(b"stop\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        assert proc.wait(60) == 0, "".join(output)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # the JVM and its Python workers
        except ProcessLookupError:
            pass
        cluster.stop()


def test_probe_tells_which_python_lacks_nsqpy(monkeypatch: pytest.MonkeyPatch) -> None:
    # a worker process that ran tests/spark has src/ on PYTHONPATH (nsq_spark_util): not a user's
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert probe(sys.executable) is None
    why = probe(BASE_PYTHON)
    assert why is not None and "nsqpy" in why
    assert probe(str(Path(BASE_PYTHON).with_name("no-such-python"))) is not None


@pytest.mark.timeout(240)
def test_explicit_worker_python_without_nsqpy_fails_at_register(tmp_path: Path) -> None:
    """The user chose PYSPARK_PYTHON: register() keeps it and says at once what to set."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    env["PYSPARK_PYTHON"] = BASE_PYTHON
    code = ("from pyspark.sql import SparkSession\nimport nsqpy.spark\n"
            "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
            "try:\n    nsqpy.spark.register(spark)\nexcept nsqpy.spark.workers.WorkerPythonError as err:\n"
            "    print('REFUSED', err)\nelse:\n    print('REGISTERED')\nspark.stop()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=200, start_new_session=True)
    assert "REFUSED" in done.stdout, done.stdout + done.stderr
    assert f"PYSPARK_PYTHON={sys.executable}" in done.stdout
    assert BASE_PYTHON in done.stdout and "No module named 'nsqpy'" in done.stdout
