"""Helpers for the utilities' tests: run a console script as a subprocess, talk to nsqd over HTTP.

Every process started through :class:`Tools` is signalled by PID and reaped at teardown, whatever
the test did, so no utility outlives its test.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any, Callable

from helpers.servers import ServerProcess, free_port

VENV_BIN = Path(sys.executable).parent


def script(name: str) -> str:
    return str(VENV_BIN / name)


class ToolProcess:
    """A utility running in the background; stdout/stderr go to files under ``log_dir``."""

    def __init__(self, name: str, args: list[str], log_dir: Path, stdin: Any = subprocess.DEVNULL) -> None:
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.monotonic_ns()
        self.out_path = log_dir / f"{name}.{stamp}.out"
        self.err_path = log_dir / f"{name}.{stamp}.err"
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen([script(name), *args], stdin=stdin, stdout=self._out,
                                     stderr=self._err)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stdout(self) -> bytes:
        self._out.flush()
        return self.out_path.read_bytes()

    def stderr(self) -> str:
        self._err.flush()
        return self.err_path.read_text(errors="replace")

    def send_signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} pid {self.pid} still running after {timeout}s; "
                                 f"stderr: {self.stderr()[-2000:]}") from None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal, wait, and reap; returns the exit status."""
        self.send_signal(sig)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.close_files()

    def close_files(self) -> None:
        for fh in (self._out, self._err):
            if not fh.closed:
                fh.close()


class Tools:
    """Starts utilities for one test; :meth:`cleanup` kills any still running, by PID."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[ToolProcess] = []

    def start(self, name: str, *args: str, stdin: Any = subprocess.DEVNULL) -> ToolProcess:
        proc = ToolProcess(name, list(args), self.log_dir, stdin=stdin)
        self.started.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.started:
            proc.kill()


def run_tool(name: str, *args: str, input: bytes | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run a utility to completion (bounded); ``subprocess.run`` kills it on timeout."""
    return subprocess.run([script(name), *args], input=input, capture_output=True, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)


# --- nsqd / nsqlookupd over HTTP ----------------------------------------------------------------


def http(method: str, url: str, body: bytes | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def mpub(http_address: str, topic: str, bodies: list[bytes], batch: int = 5000) -> None:
    for start in range(0, len(bodies), batch):
        status, answer = http("POST", f"http://{http_address}/mpub?topic={topic}&binary=true",
                              _binary_mpub(bodies[start : start + batch]))
        assert status == 200, answer


def _binary_mpub(bodies: list[bytes]) -> bytes:
    parts = [len(bodies).to_bytes(4, "big")]
    for body in bodies:
        parts.append(len(body).to_bytes(4, "big"))
        parts.append(body)
    return b"".join(parts)


def create_channel(http_address: str, topic: str, channel: str) -> None:
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel={channel}"):
        status, answer = http("POST", f"http://{http_address}{path}")
        assert status == 200, answer


def channel_stats(http_address: str, topic: str, channel: str) -> dict[str, Any] | None:
    status, body = http("GET", f"http://{http_address}/stats?format=json&topic={topic}")
    assert status == 200, body
    for t in json.loads(body).get("topics") or ():
        if t["topic_name"] == topic:
            for c in t.get("channels") or ():
                if c["channel_name"] == channel:
                    return c
    return None


def topic_message_count(http_address: str, topic: str) -> int:
    status, body = http("GET", f"http://{http_address}/stats?format=json&topic={topic}")
    assert status == 200, body
    for t in json.loads(body).get("topics") or ():
        if t["topic_name"] == topic:
            return int(t["message_count"])
    return 0


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
             what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what or predicate} (last: {last!r})")


def drained(http_address: str, topic: str, channel: str, total: int) -> Callable[[], bool]:
    """True once the channel got ``total`` messages and holds none (queued or in flight)."""

    def check() -> bool:
        c = channel_stats(http_address, topic, channel)
        return bool(c and c["message_count"] >= total and c["depth"] == 0
                    and c["in_flight_count"] == 0 and c["deferred_count"] == 0)

    return check


class Nsqlookupd(ServerProcess):
    def __init__(self, data_dir: Path) -> None:
        self.tcp_port = free_port()
        self.http_port = free_port()
        data_dir.mkdir(parents=True, exist_ok=True)
        argv = [script("nsqlookupd"), f"--tcp-address=127.0.0.1:{self.tcp_port}",
                f"--http-address=127.0.0.1:{self.http_port}", "--broadcast-address=127.0.0.1"]
        super().__init__(argv, f"http://127.0.0.1:{self.http_port}/ping", data_dir / "nsqlookupd.log")

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"


# --- reading archives -------------------------------------------------------------------------


def read_gzip_members(data: bytes) -> tuple[bytes, bool]:
    """Decompress concatenated gzip members; returns (content, whether the tail was cut short).

    A crash can leave the last member unfinished: what it decompresses to is returned too (it
    was written, maybe not acknowledged), the flag says the file did not end cleanly.
    """
    out = []
    truncated = False
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out.append(d.decompress(data))
        except zlib.error:
            truncated = True
            break
        if not d.eof:
            truncated = True
            break
        data = d.unused_data
    return b"".join(out), truncated


def archive_lines(paths: list[Path]) -> list[bytes]:
    """Every complete line in the given files (gzip ones decompressed, torn tails tolerated)."""
    lines: list[bytes] = []
    for path in paths:
        raw = path.read_bytes()
        data, _ = read_gzip_members(raw) if path.name.endswith(".gz") else (raw, False)
        parts = data.split(b"\n")
        lines.extend(parts[:-1])  # the last part is "" or a torn line
    return lines


def files_under(*dirs: Path) -> list[Path]:
    return sorted(p for d in dirs if d.exists() for p in d.rglob("*") if p.is_file())


def gzip_lines(path: Path) -> list[bytes]:
    """Strict reading: the file must be a complete gzip stream (every member finished)."""
    return gzip.decompress(path.read_bytes()).split(b"\n")[:-1]
