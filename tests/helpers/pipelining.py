"""Clients that pipeline many HTTP requests without reading the answers, then read them all.

Used by the backpressure tests and ``bench/scale_bench.py``: a server that keeps reading such a
client holds every answer it owes; one that stops reading (as Go's ``net/http`` does once its
write blocks) holds a bounded amount whatever the client sends.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable


class Pipeliner:
    """One connection sending ``count`` copies of ``request`` from a thread (blocking when the
    server stops reading), and reading nothing until :meth:`start_reading`."""

    def __init__(self, host: str, port: int, request: bytes, count: int,
                 answer_end: bytes = b"\r\n\r\nOK", batch: int = 1000) -> None:
        self.sock = socket.create_connection((host, port), timeout=120)
        self.request = request
        self.count = count
        self.answer_end = answer_end
        self.batch = batch
        self.sent = 0  # requests handed to the kernel
        self.answered = 0
        self.error: BaseException | None = None
        self._read = threading.Event()
        self._sender = threading.Thread(target=self._send, daemon=True)
        self._reader = threading.Thread(target=self._receive, daemon=True)
        self._sender.start()
        self._reader.start()

    def _send(self) -> None:
        chunk = self.request * self.batch
        try:
            left = self.count
            while left > 0:
                n = min(left, self.batch)
                self.sock.sendall(chunk if n == self.batch else self.request * n)
                left -= n
                self.sent += n
        except OSError as err:
            self.error = err

    def _receive(self) -> None:
        self._read.wait()
        end = self.answer_end
        tail = b""
        try:
            while self.answered < self.count:
                data = self.sock.recv(1 << 20)
                if not data:
                    break
                both = tail + data
                self.answered += both.count(end)
                tail = both[-(len(end) - 1):]
        except OSError as err:
            self.error = err

    def start_reading(self) -> None:
        self._read.set()

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._sender.join(max(0.0, deadline - time.monotonic()))
        self._reader.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def settle(clients: list[Pipeliner], quiet: float = 1.0, timeout: float = 60.0) -> None:
    """Wait until no client has sent anything for ``quiet`` seconds (the server stopped
    reading) or all have sent everything."""
    deadline = time.monotonic() + timeout
    last = -1
    since = time.monotonic()
    while time.monotonic() < deadline:
        total = sum(c.sent for c in clients)
        if all(c.sent >= c.count for c in clients):
            return
        now = time.monotonic()
        if total != last:
            last, since = total, now
        elif now - since >= quiet:
            return
        time.sleep(0.1)


def pipelined_growth(host: str, port: int, rss: Callable[[], int], *, connections: int = 4,
                     count: int = 400_000, request: bytes | None = None,
                     timeout: float = 120.0) -> tuple[int, int, list[Pipeliner]]:
    """RSS growth (KiB) while ``connections`` clients pipeline ``count`` requests each without
    reading; then they read: returns (growth, answers read, clients)."""
    if request is None:
        request = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
    before = rss()
    clients = [Pipeliner(host, port, request, count) for _ in range(connections)]
    try:
        settle(clients)
        peak = rss()
        time.sleep(0.5)
        peak = max(peak, rss())
        for c in clients:
            c.start_reading()
        for c in clients:
            c.join(timeout)
        return peak - before, sum(c.answered for c in clients), clients
    finally:
        for c in clients:
            c.close()
