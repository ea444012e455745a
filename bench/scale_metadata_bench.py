"""Metadata and idle scans at scale, side by side with upstream nsqd (issue #32).

Scenarios, each on a fresh daemon, fresh data directory and free ports:

* ``create TxC``: T topics with C channels each created over HTTP (``/topic/create`` then C x
  ``/channel/create``, from 4 client processes on keep-alive connections) while a publisher in
  another process PUBs one message every 2 ms on TCP: wall time of the creation, and the
  publisher's wait (PUB to OK) p50 / p99 / max during it; then ~100 of the topics deleted one by
  one (``/topic/delete``, p50 / max);
* ``idle N``: N channels (N/2 topics x 2), loaded from an ``nsqd.dat`` written beforehand (creating
  20k topics over HTTP takes upstream many minutes), no client: the daemon's CPU time over a
  window once settled, as a percentage of one core.

Sides alternate within each round (ours, upstream, ours, ...) so drift hits both alike; every
figure is printed with its ratio ours / upstream. Upstream's nsqd comes from ``$NSQ_UPSTREAM_BIN``
(a directory); without it only ours is measured.

    NSQ_UPSTREAM_BIN=/path/to/upstream/bin python bench/scale_metadata_bench.py --rounds 2
    python bench/scale_metadata_bench.py --create 1000x4 --idle 10000 --window 10

``scale_bench.py`` calls :func:`run` with the same arguments.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from typing import Iterator

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def sides() -> dict[str, str]:
    ours = Path(sys.executable).parent / "nsqd"
    out = {"nsqpy": str(ours if ours.exists() else shutil.which("nsqd"))}
    up = os.environ.get("NSQ_UPSTREAM_BIN")
    if up and (Path(up) / "nsqd").exists():
        out["upstream"] = str(Path(up) / "nsqd")
    return out


@contextmanager
def nsqd(binary: str, data: Path, *flags: str) -> Iterator[tuple[subprocess.Popen, int, int]]:
    tcp, web = free_port(), free_port()
    proc = subprocess.Popen([binary, f"--data-path={data}", f"--tcp-address=127.0.0.1:{tcp}",
                             f"--http-address=127.0.0.1:{web}", "--log-level=warn", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{web}/ping", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{binary} did not start")
                time.sleep(0.1)
        yield proc, tcp, web
    finally:
        proc.terminate()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- the publisher's wait while topics and channels are created --------------------------------


def probe(port: int) -> None:
    """Child process: PUB every 2 ms until stdin closes, then print the waits (ms) as JSON."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"  V2")
    cmd = b"PUB probe\n" + struct.pack(">i", 1) + b"x"
    waits = []
    while not stop.is_set():
        start = time.perf_counter()
        sock.sendall(cmd)
        need = 4
        buf = b""
        while len(buf) < need:
            buf += sock.recv(64)
            if len(buf) >= 4:
                need = 4 + struct.unpack(">i", buf[:4])[0]
        waits.append((time.perf_counter() - start) * 1e3)
        time.sleep(0.002)
    print(json.dumps(waits), flush=True)


def creator(port: int, names: list[str], channels: int) -> None:
    """Child process: create these topics and their channels, one request after another."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    for name in names:
        for path in [f"/topic/create?topic={name}"] + [
                f"/channel/create?topic={name}&channel=c{k}" for k in range(channels)]:
            conn.request("POST", path)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise SystemExit(f"{path}: {resp.status}")


def _child(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def measure_create(binary: str, topics: int, channels: int, clients: int = 4) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, nsqd(binary, Path(tmp)) as (_, tcp, web):
        prober = _child("--probe", str(tcp))
        time.sleep(0.5)
        start = time.perf_counter()
        makers = [_child("--creator", str(web), str(channels), str(k), str(clients), str(topics))
                  for k in range(clients)]
        for m in makers:
            m.communicate()
            if m.returncode:
                raise SystemExit("a creator failed")
        took = time.perf_counter() - start
        out, _ = prober.communicate("")
        waits = sorted(json.loads(out))
        deletes = sorted(delete_times(web, [f"s{i:06d}" for i in range(0, topics, max(1, topics // 100))]))
    return {"create_s": took, "pub_p50_ms": waits[len(waits) // 2],
            "pub_p99_ms": waits[min(len(waits) - 1, len(waits) * 99 // 100)],
            "pub_max_ms": waits[-1], "delete_p50_ms": deletes[len(deletes) // 2],
            "delete_max_ms": deletes[-1]}


def delete_times(port: int, names: list[str]) -> list[float]:
    """``/topic/delete`` of these topics (each with its channels), one after another: ms each."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    out = []
    for name in names:
        start = time.perf_counter()
        conn.request("POST", f"/topic/delete?topic={name}")
        resp = conn.getresponse()
        resp.read()
        out.append((time.perf_counter() - start) * 1e3)
    return out


# --- idle CPU with many channels -----------------------------------------------------------------


def measure_idle(binary: str, channels: int, window: float, settle: float = 5.0) -> dict[str, float]:
    topics = channels // 2
    doc = {"topics": [{"name": f"idle{i:06d}", "paused": False,
                       "channels": [{"name": "c0", "paused": False}, {"name": "c1", "paused": False}]}
                      for i in range(topics)], "version": "1.3.0"}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "nsqd.dat").write_text(json.dumps(doc))
        with nsqd(binary, Path(tmp)) as (proc, _, web):
            stats = json.loads(urllib.request.urlopen(
                f"http://127.0.0.1:{web}/stats?format=json&include_clients=false", timeout=60).read())
            assert sum(len(t["channels"]) for t in stats["topics"]) == channels
            time.sleep(settle)
            c0, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(window)
            used = (cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0)
    return {"idle_cpu_pct": used * 100}


# --- the run ---------------------------------------------------------------------------------------


def run(creates: list[tuple[int, int]], idles: list[int], rounds: int, window: float) -> None:
    bins = sides()
    print(f"sides: {', '.join(f'{k}={v}' for k, v in bins.items())}; rounds {rounds}; "
          f"machine shared: figures are noisy, compare ratios", flush=True)
    results: dict[tuple[str, str, str], list[float]] = {}
    jobs = [(f"create {t}x{c}", lambda b, t=t, c=c: measure_create(b, t, c)) for t, c in creates]
    jobs += [(f"idle {n} channels", lambda b, n=n: measure_idle(b, n, window)) for n in idles]
    for r in range(rounds):
        order = list(bins.items()) if r % 2 == 0 else list(bins.items())[::-1]
        for label, job in jobs:
            for side, binary in order:
                figures = job(binary)
                print(f"  round {r + 1} {label:<22} {side:<9} "
                      + " ".join(f"{k}={v:.2f}" for k, v in figures.items()), flush=True)
                for k, v in figures.items():
                    results.setdefault((label, k, side), []).append(v)
    print("\nmedians (ratio = nsqpy / upstream; lower is better for every figure)")
    for label, _ in jobs:
        keys = sorted({k for (lab, k, _) in results if lab == label})
        for k in keys:
            ours = median(results[(label, k, "nsqpy")])
            line = f"{label:<22} {k:<13} nsqpy {ours:10.2f}"
            if (label, k, "upstream") in results:
                up = median(results[(label, k, "upstream")])
                line += f"   upstream {up:10.2f}   ratio {ours / up if up else float('inf'):.2f}x"
            print(line)


def _size(text: str) -> tuple[int, int]:
    t, c = text.lower().split("x")
    return int(t), int(c)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        return probe(int(sys.argv[2]))
    if len(sys.argv) > 1 and sys.argv[1] == "--creator":
        port, channels, k, clients, topics = map(int, sys.argv[2:7])
        return creator(port, [f"s{i:06d}" for i in range(k, topics, clients)], channels)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--create", action="append", type=_size,
                    help="TOPICSxCHANNELS created over HTTP (default 1000x4 and 5000x2)")
    ap.add_argument("--idle", action="append", type=int,
                    help="idle channel count (default 10000 and 40000)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--window", type=float, default=10.0, help="idle CPU window, seconds")
    args = ap.parse_args()
    run(args.create or [(1000, 4), (5000, 2)], args.idle or [10000, 40000], args.rounds,
        args.window)


if __name__ == "__main__":
    main()
