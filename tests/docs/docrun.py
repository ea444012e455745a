"""What the docs tests share: a user's environment, ``make run``'s cluster on free ports, a
scratch working directory that looks like the repository."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def block_env(ports: tuple[int, ...], data: Path) -> dict[str, str]:
    """A user's shell after ``make run``: the venv not activated."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYSPARK_PYTHON",
                                                           "PYSPARK_DRIVER_PYTHON", "MAKEFLAGS", "MAKELEVEL")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != VENV_BIN.resolve())
    env["NSQPY_DEV_PORTS"] = ",".join(map(str, ports))
    env["NSQPY_DATA"] = str(data)
    return env


def _http(url: str, method: str = "GET", timeout: float = 2.0) -> bytes:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


class Cluster:
    """A process group running ``make run`` (or nsqpy-dev directly); stopped like Ctrl-C."""

    def __init__(self, argv: list[str], ports: tuple[int, ...], cwd: Path, env: dict[str, str], log: Path):
        self.ports = ports
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_up(60)
        except Exception:
            self.stop()
            raise

    def _wait_up(self, timeout: float) -> None:
        tcp, http, ltcp, lhttp, admin = self.ports
        deadline = time.monotonic() + timeout
        pending = [f"http://127.0.0.1:{p}/ping" for p in (http, lhttp, admin)]
        while pending:
            if self.proc.poll() is not None:
                raise AssertionError(f"cluster exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"cluster not up in {timeout}s ({pending}):\n{self.output()}")
            try:
                _http(pending[0], timeout=0.5)
                pending.pop(0)
            except OSError:
                time.sleep(0.1)
        # nsqd registered with nsqlookupd, so lookupd-based consumers find what is published
        while b"127.0.0.1" not in _http(f"http://127.0.0.1:{lhttp}/nodes") and time.monotonic() < deadline:
            time.sleep(0.1)

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def create(self, topics: list[str], channels: list[tuple[str, str]]) -> None:
        http = self.ports[1]
        for topic in topics:
            _http(f"http://127.0.0.1:{http}/topic/create?topic={topic}", "POST")
        for topic, channel in channels:
            _http(f"http://127.0.0.1:{http}/channel/create?topic={topic}&channel={channel}", "POST")

    def stop(self) -> None:
        """Ctrl-C to its process group (it is the group's leader), then the group is reaped."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # anything of its group left behind
        except ProcessLookupError:
            pass
        self._log.close()


def scratch_dir(tmp: Path) -> Path:
    """A working directory that looks like the repository (links) but keeps what blocks write."""
    work = tmp / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "data", ".venv"):
            (work / entry.name).symlink_to(entry)
    # ``.venv`` is the venv running the tests: the repository's, or another CPython's (make test)
    (work / ".venv").symlink_to(VENV_BIN.parent)
    return work
