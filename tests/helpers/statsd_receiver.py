"""A UDP socket standing in for a statsd daemon's port, shared by the statsd tests and
bench/metrics_bench.py.

A thread stamps each datagram's arrival, so a push can be told apart from one that began before
the state under test settled.
"""

from __future__ import annotations

import socket
import threading
import time


class StatsdReceiver:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)  # no drops here
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.received: list[tuple[float, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            self.received.append((time.monotonic(), data))

    def pushes(self, last_key: str) -> list[tuple[float, list[bytes]]]:
        """Whole pushes so far: (arrival of the first datagram, datagrams), each ending with
        the datagram whose last line is ``last_key``."""
        out: list[tuple[float, list[bytes]]] = []
        current: list[bytes] = []
        first = 0.0
        for when, data in list(self.received):
            if not current:
                first = when
            current.append(data)
            last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1].split(b":")[0]
            if last.endswith(last_key.encode()):
                out.append((first, current))
                current = []
        return out

    def pushes_after(self, t0: float, last_key: str, count: int,
                     timeout: float = 20.0) -> list[tuple[float, list[bytes]]]:
        """Wait for ``count`` whole pushes begun after ``t0``; returns every whole push."""
        deadline = time.monotonic() + timeout
        while True:
            pushes = self.pushes(last_key)
            if sum(1 for first, _ in pushes if first > t0) >= count:
                return pushes
            if time.monotonic() >= deadline:
                raise AssertionError(f"no {count} pushes ending with {last_key}")
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
