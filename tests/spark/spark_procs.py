"""Spark's own JVMs for the deployment tests, from the jars inside the installed pyspark package:
a Spark Connect server, a standalone master and worker. Loopback, free ports, logs in the test's
directory; every JVM is stopped by PID (and the worker's executor JVMs with it)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyspark

from helpers.servers import free_port
from spark.nsq_spark_util import worker_env

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def spark_env(**extra: str) -> dict[str, str]:
    """The environment of a Spark JVM: its Python workers run as the tests' own sessions' do
    (:func:`worker_env`: pyspark's bytecode cached, for a Spark Connect server's streaming
    source must connect back within Spark's fixed 10 s)."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_NO_DAEMONIZE="1",
        **worker_env(),
    )
    env.update(extra)
    return env


def wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"JVM exited with {proc.returncode}: {log.read_text()[-3000:]}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise AssertionError(f"port {port} not open after {timeout}s: {log.read_text()[-3000:]}")


class SparkJvm:
    """One JVM started with pyspark's bin/ scripts (they exec java, so the PID is the JVM's)."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str], port: int) -> None:
        self.log = log
        self.port = port
        self._out = open(log, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL)
        try:
            wait_port(port, self.proc, log)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def children(self) -> list[int]:
        """PIDs of this JVM's child processes (a worker's executor JVMs)."""
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def stop(self, timeout: float = 20.0) -> None:
        kids = self.children()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for pid in kids:  # executors the worker started; normally gone with it
            _stop_pid(pid)
        self._out.close()


def _stop_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def connect_jar() -> Path:
    jars = sorted((SPARK_HOME / "jars").glob("spark-connect_*.jar"))
    assert jars, f"no spark-connect jar in {SPARK_HOME / 'jars'}"
    return jars[0]


def start_connect_server(work: Path) -> SparkJvm:
    """``spark-submit --class ...SparkConnectServer`` on a free port, local[2], UI off."""
    port = free_port()
    work.mkdir(parents=True, exist_ok=True)
    argv = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.sql.session.timeZone=UTC",
        "--conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC",
        "--conf", f"spark.local.dir={work}",
        str(connect_jar()),
    ]
    return SparkJvm(argv, work / "connect-server.log", spark_env(), port)


def start_master(work: Path) -> SparkJvm:
    port = free_port()
    work.mkdir(parents=True, exist_ok=True)
    argv = [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())]
    return SparkJvm(argv, work / "master.log", spark_env(), port)


def start_worker(work: Path, master_url: str, cores: int = 2, memory: str = "2g") -> SparkJvm:
    port = free_port()
    wdir = work / "worker"
    wdir.mkdir(parents=True, exist_ok=True)
    argv = [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
            "--cores", str(cores), "--memory", memory, "--work-dir", str(wdir), master_url]
    return SparkJvm(argv, work / "worker.log", spark_env(), port)
