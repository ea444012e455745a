"""Real server processes on free loopback ports, always stopped by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


_issued: set[int] = set()


def _worker_share() -> tuple[int, int]:
    """(this xdist worker's index, the number of workers); (0, 1) outside a parallel run."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return (int(worker[2:]), count) if worker.startswith("gw") and count > 1 else (0, 1)


_INDEX, _WORKERS = _worker_share()


def free_port() -> int:
    """A loopback port nothing listens on, never handed out twice by this process: the kernel
    may return a just-closed port again, and an nsqd given the same TCP and HTTP port fails.

    In a parallel run each worker takes only its share of the ports (half the port number modulo
    the worker count is its index: Linux hands out even ports to ``bind`` first), so two workers
    never get the same port, and a port one worker's test let go (where a stopped test's nsqd may
    still try to reach its nsqlookupd) never serves another's."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _issued and (port >> 1) % _WORKERS == _INDEX:
            _issued.add(port)
            return port


def wait_http_ok(url: str, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=0.5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer in {timeout}s")


class ServerProcess:
    """A server started as a subprocess; :meth:`stop` signals it by PID and reaps it."""

    def __init__(self, argv: list[str], health_url: str, log_path: Path) -> None:
        self.argv = argv
        self.health_url = health_url
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_http_ok(health_url, self.proc)
        except Exception:
            self.stop()
            raise AssertionError(f"server failed to start: {self.log()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)


class NsqServer(ServerProcess):
    """An nsqd or nsqlookupd on 127.0.0.1 with a TCP and an HTTP port (kept across restarts)."""

    program = ""
    bin_dir = VENV_BIN  # where the program is (upstream's binaries for side-by-side tests)

    def __init__(self, directory: Path, *extra: str, tcp_port: int | None = None,
                 http_port: int | None = None) -> None:
        self.directory = directory
        self.tcp_port = tcp_port or free_port()
        self.http_port = http_port or free_port()
        directory.mkdir(parents=True, exist_ok=True)
        argv = [str(self.bin_dir / self.program), f"--tcp-address=127.0.0.1:{self.tcp_port}",
                f"--http-address=127.0.0.1:{self.http_port}", "--broadcast-address=127.0.0.1",
                *self.own_flags(), *extra]
        super().__init__(argv, f"http://127.0.0.1:{self.http_port}/ping",
                         directory / f"{self.program}.log")

    def own_flags(self) -> list[str]:
        return []

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def restart(self, *extra: str):
        """Stop, then start the same program on the same ports and directory."""
        self.stop()
        # remembered, so that whoever stops this server at the end stops the one after it too
        self.successor = type(self)(self.directory, *extra, tcp_port=self.tcp_port,
                                    http_port=self.http_port)
        return self.successor

    def stop_all(self) -> None:
        """Stop this server and every one :meth:`restart` made after it (by PID)."""
        node: NsqServer | None = self
        while node is not None:
            node.stop()
            node = getattr(node, "successor", None)


class Nsqd(NsqServer):
    program = "nsqd"

    @property
    def data_path(self) -> Path:
        return self.directory

    def own_flags(self) -> list[str]:
        # NSQPY_TEST_NSQD_FLAGS: run a suite against nsqd with opt-in features on (issues #12, #13)
        return [f"--data-path={self.directory}", *os.environ.get("NSQPY_TEST_NSQD_FLAGS", "").split()]


class Nsqlookupd(NsqServer):
    program = "nsqlookupd"


def unique_name(prefix: str = "t") -> str:
    """A topic/channel name no other test uses."""
    return f"{prefix}_{os.getpid()}_{time.monotonic_ns() % 10**12}"
