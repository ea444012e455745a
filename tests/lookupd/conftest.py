"""Fixtures for the nsqlookupd tests: real ``nsqlookupd`` processes on loopback, raw V1 clients.

Processes listen on free loopback ports and are ready when ``/ping`` answers; a restart reuses
the ports of the first run. Every process is stopped by PID at teardown (SIGTERM, then SIGKILL
after 10 s) and must have exited.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.servers import free_port

_BIN = Path(sys.executable).parent / "nsqlookupd"




class HTTPResult:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<HTTPResult {self.status} {self.body[:200]!r}>"


def http_request(port: int, method: str, path: str, timeout: float = 5.0) -> HTTPResult:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return HTTPResult(resp.status, headers, body)
    finally:
        conn.close()


class LookupdProcess:
    """An ``nsqlookupd`` subprocess; ``tcp_port``/``http_port`` are the bound ports."""

    def __init__(self, log_path: Path, *extra: str, tcp_port: int = 0, http_port: int = 0,
                 broadcast_address: str = "127.0.0.1") -> None:
        self.log_path = log_path
        self.extra = extra
        self.tcp_port = tcp_port or free_port()
        self.http_port = http_port or free_port()
        argv = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "nsqpy.lookupd.main"]
        argv += [f"--tcp-address=127.0.0.1:{self.tcp_port}",
                 f"--http-address=127.0.0.1:{self.http_port}",
                 f"--broadcast-address={broadcast_address}", *extra]
        self.argv = argv
        self._log = open(log_path, "ab")
        self._log_start = self._log.tell()
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        with open(self.log_path, "rb") as fh:
            fh.seek(self._log_start)
            return fh.read().decode("utf-8", "replace")

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"nsqlookupd exited with {self.proc.returncode}: {self.log()}")
            try:
                if http_request(self.http_port, "GET", "/ping", timeout=1.0).status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"/ping did not answer: {self.log()}")
            time.sleep(0.02)

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def request(self, method: str, path: str) -> HTTPResult:
        return http_request(self.http_port, method, path)

    def get(self, path: str) -> HTTPResult:
        return self.request("GET", path)

    def post(self, path: str) -> HTTPResult:
        return self.request("POST", path)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Signal by PID, escalate to SIGKILL, reap. Returns the exit status."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if not self._log.closed:
            self._log.close()
        return self.proc.returncode

    def restart(self, *extra: str) -> "LookupdProcess":
        self.stop()
        return LookupdProcess(self.log_path, *(extra or self.extra), tcp_port=self.tcp_port,
                              http_port=self.http_port)


class V1Client:
    """A raw nsqlookupd V1 client on a blocking socket (every read has a deadline)."""

    def __init__(self, port: int, *, magic: bytes | None = b"  V1", timeout: float = 5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        if magic is not None:
            self.sock.sendall(magic)

    @property
    def local_address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, n: int) -> None:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(f"connection closed with {len(self.buf)} bytes buffered")
            self.buf += chunk

    def read_response(self) -> bytes:
        self._fill(4)
        (size,) = struct.unpack(">i", self.buf[:4])
        self._fill(4 + size)
        data, self.buf = self.buf[4 : 4 + size], self.buf[4 + size :]
        return data

    def command(self, line: bytes | str) -> bytes:
        if isinstance(line, str):
            line = line.encode()
        self.send(line + b"\n")
        return self.read_response()

    def identify(self, **fields: Any) -> bytes:
        info = {"version": "1.3.0", "tcp_port": 4150, "http_port": 4151,
                "broadcast_address": "127.0.0.1", "hostname": "testhost"}
        info.update(fields)
        body = json.dumps(info).encode()
        self.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        return self.read_response()

    def identify_raw(self, body: bytes) -> bytes:
        self.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        return self.read_response()

    def expect_closed(self, timeout: float = 5.0) -> bytes:
        """Read until EOF; returns any bytes received meanwhile (must come within timeout)."""
        self.sock.settimeout(timeout)
        data = self.buf
        self.buf = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return data
            if not chunk:
                return data
            data += chunk

    def close(self) -> None:
        self.sock.close()


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "") -> Any:
    """Poll ``predicate`` until it returns a truthy value; AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what or predicate} (last: {last!r})")


@pytest.fixture
def lookupd_factory(tmp_path):
    """Start ``nsqlookupd`` processes; all are stopped (and checked to have exited) at teardown."""
    started: list[LookupdProcess] = []

    def start(*extra: str, **kwargs: Any) -> LookupdProcess:
        proc = LookupdProcess(tmp_path / f"nsqlookupd{len(started)}.log", *extra, **kwargs)
        started.append(proc)
        return proc

    def restart(proc: LookupdProcess, *extra: str) -> LookupdProcess:
        new = proc.restart(*extra)
        started.append(new)
        return new

    start.restart = restart  # type: ignore[attr-defined]
    yield start
    for proc in started:
        proc.stop()
        assert proc.proc.poll() is not None, f"nsqlookupd pid {proc.pid} still running"


@pytest.fixture
def lookupd(lookupd_factory) -> LookupdProcess:
    return lookupd_factory()


@pytest.fixture
def v1():
    """``v1(port, magic=...)`` opens a raw V1 client; all are closed at teardown."""
    clients: list[V1Client] = []

    def connect(port: int, **kwargs: Any) -> V1Client:
        client = V1Client(port, **kwargs)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


@pytest.fixture
def helpers():
    """Module-level helpers for the test files (conftest is not importable under importlib)."""

    class H:
        pass

    H.wait_for = staticmethod(wait_for)
    H.free_port = staticmethod(free_port)
    H.http_request = staticmethod(http_request)
    return H
