"""Real server processes on free loopback ports, always stopped by PID."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

VENV_BIN = Path(sys.executable).parent


def _worker_share() -> tuple[int, int]:
    """(this xdist worker's index, the number of workers); (0, 1) outside a parallel run."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return (int(worker[2:]), count) if worker.startswith("gw") and count > 1 else (0, 1)


def _port_range() -> range:
    """The ports this pytest run hands out: ``NSQPY_TEST_PORTS`` (``low-high``), else 20000 up to
    the kernel's ephemeral range. Never a port from that range: the kernel gives those to any
    process binding port 0 or connecting out (Spark's Py4J gateway did, between our check and
    nsqadmin's bind), so a port below it stays ours from the check to the server's bind."""
    text = os.environ.get("NSQPY_TEST_PORTS", "")
    if text:
        low, _, high = text.partition("-")
        return range(int(low), int(high) + 1)
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    return range(20000, max(ephemeral, 20000 + 4096))


def _ports() -> Iterator[int]:
    """This worker's share of the range (port modulo the worker count is its index, so two
    workers never get the same port, and a port one worker's test let go, where a stopped
    test's nsqd may still try to reach its nsqlookupd, never serves another's), from a place
    that differs between runs, round and round."""
    index, workers = _worker_share()
    ports = [p for p in _port_range() if p % workers == index]
    start = random.randrange(len(ports))
    while True:
        yield from ports[start:]
        yield from ports[:start]
        start = 0


_next_port = _ports()


def free_port() -> int:
    """A loopback port nothing listens on, not handed out before by this process (until the
    whole share has gone round): an nsqd given the same TCP and HTTP port fails."""
    while True:
        port = next(_next_port)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def wait_http_ok(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Until ``url`` answers 200 (a server started: about a second on a quiet machine, several
    on a busy one), or ``proc`` exits."""
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

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
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
