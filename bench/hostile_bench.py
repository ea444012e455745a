"""Others' PUB latency while a hostile client works on nsqd (fault matrix rows 5-8 and 11).

tests/security/test_limits.py asserts what must happen (others are served, memory is bounded,
the hostile client is cut off); how fast others are served depends on the machine, so the
figures live here. Each scenario starts a fresh nsqd, times ``--probes`` PUBs of another
producer (one at a time, each waiting for its OK) and prints p50/p99/max:

* ``quiet``: nothing else;
* ``deflate-bomb``: 20 MiB of NOPs in ~20 KiB of deflate sent at once (worked off in steps);
* ``pub-flood``: a producer sending PUBs without reading its answers until nsqd cuts it off;
* ``idle-2000``: 2,000 idle connections (half sent the magic, half nothing).

    python bench/hostile_bench.py                              # our nsqd (.venv/bin/nsqd)
    python bench/hostile_bench.py --nsqd-bin $NSQ_UPSTREAM_BIN/nsqd   # upstream's, same flags

Results: docs/benchmarks.md ("Others' latency under hostile clients").
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak_idle import free_port, raise_nofile, wait_http  # noqa: E402

VENV_NSQD = os.path.join(os.path.dirname(sys.executable), "nsqd")


def command(line: bytes, body: bytes | None = None) -> bytes:
    return line + b"\n" + (b"" if body is None else struct.pack(">i", len(body)) + body)


def read_frame(sock: socket.socket) -> bytes:
    """One frame's data (heartbeats included), read off a plain V2 connection."""
    head = _read(sock, 8)
    size, _ = struct.unpack(">ii", head)
    return _read(sock, size - 4)


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("closed by nsqd")
        buf += part
    return buf


def probe(tcp_port: int, count: int) -> list[float]:
    """Seconds from each PUB sent to its OK read, one PUB at a time."""
    sock = socket.create_connection(("127.0.0.1", tcp_port), timeout=60)
    sock.sendall(b"  V2" + command(b"IDENTIFY", b"{}"))
    read_frame(sock)
    out = []
    for _ in range(count):
        started = time.perf_counter()
        sock.sendall(command(b"PUB probe", b"probe"))
        while read_frame(sock) != b"OK":
            sock.sendall(b"NOP\n")  # a heartbeat
        out.append(time.perf_counter() - started)
    sock.close()
    return out


def deflate_bomb(tcp_port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", tcp_port), timeout=60)
    identify = json.dumps({"feature_negotiation": True, "deflate": True}).encode()
    sock.sendall(b"  V2" + command(b"IDENTIFY", identify))
    read_frame(sock)  # the JSON answer; what follows is compressed
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    sock.sendall(packer.compress(b"NOP\n" * (5 << 20)) + packer.flush(zlib.Z_SYNC_FLUSH))
    return sock


def pub_flood(tcp_port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", tcp_port))
    sock.sendall(b"  V2" + command(b"IDENTIFY", b'{"heartbeat_interval": 1000}'))
    chunk = command(b"PUB flood", b"payload!") * 2000

    def send() -> None:
        try:
            while True:
                sock.sendall(chunk)
        except OSError:
            pass  # cut off by nsqd's write deadline

    threading.Thread(target=send, daemon=True).start()
    time.sleep(1.0)
    return sock


def idle_connections(tcp_port: int, count: int = 2000) -> list[socket.socket]:
    raise_nofile(2 * count + 200)
    socks = [socket.create_connection(("127.0.0.1", tcp_port)) for _ in range(count)]
    for s in socks[1::2]:
        s.sendall(b"  V2")
    time.sleep(1.0)
    return socks


SCENARIOS = {"quiet": None, "deflate-bomb": deflate_bomb, "pub-flood": pub_flood,
             "idle-2000": idle_connections}


def run(nsqd_bin: str, name: str, probes: int) -> list[float]:
    raise_nofile(4500)  # inherited by nsqd, for the idle connections
    tcp, http = free_port(), free_port()
    with tempfile.TemporaryDirectory() as data:
        proc = subprocess.Popen([nsqd_bin, f"--tcp-address=127.0.0.1:{tcp}",
                                 f"--http-address=127.0.0.1:{http}", f"--data-path={data}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_http(f"http://127.0.0.1:{http}/ping")
            hostile = SCENARIOS[name]
            held = hostile(tcp) if hostile else None
            latencies = probe(tcp, probes)
            del held
            return latencies
        finally:
            proc.terminate()
            proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nsqd-bin", default=VENV_NSQD)
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    args = ap.parse_args()
    print(f"{'scenario':<14} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}   ({args.nsqd_bin})")
    for name in args.scenario or SCENARIOS:
        lat = sorted(run(args.nsqd_bin, name, args.probes))
        p99 = lat[max(0, int(len(lat) * 0.99) - 1)]
        print(f"{name:<14} {statistics.median(lat) * 1e3:8.2f} {p99 * 1e3:8.2f} "
              f"{lat[-1] * 1e3:8.2f}", flush=True)


if __name__ == "__main__":
    main()
