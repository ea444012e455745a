"""nsqd at production scale, ours beside upstream's (issue #32): costs that grow with topics,
connections and pipelined HTTP, each printed as a ratio ours/upstream.

Scenarios (each on fresh daemons, the two sides alternating round by round):

=================  ==========================================================================
stats_conns        ``GET /stats?format=json`` time with 5,000 TCP consumers connected: as
                   the client sees it (``ms``) and as each daemon's request log says its
                   handler took (``handler_ms``: no transfer, no wait behind other work)
stats_topics       the same with 20,000 topics x 2 channels (loaded from an ``nsqd.dat``
                   written beforehand, upstream's format)
idle_conn_rss      RSS per idle TCP connection (5,000 connections after IDENTIFY-less SUB)
pipelined_rss      RSS growth while 4 connections pipeline 400,000 ``GET /ping`` each without
                   reading (then every answer is read and counted)
pub_latency_1m     PUB round-trip latency p99.9 and max with 1M messages queued in memory
                   (``--mem-queue-size`` large), while a second publisher keeps loading
=================  ==========================================================================

``bench/scale_metadata_bench.py`` (topic creation, PUB during creates, idle CPU), when it
exists beside this file, runs afterwards as a subprocess, so one command prints every figure.

    .venv/bin/python bench/scale_bench.py [--rounds 2] [--only stats_conns,stats_topics]
    NSQ_UPSTREAM_BIN=<dir of upstream's binaries> .venv/bin/python bench/scale_bench.py

Figures from a shared 2-core machine are noisy: read the ratios, and run again on a quiet one.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
OURS = Path(sys.executable).parent
sys.path.insert(0, str(HERE.parent / "tests"))

from helpers.pipelining import pipelined_growth  # noqa: E402


# --- daemons ----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Daemon:
    """nsqd (ours or upstream's) on free loopback ports in its own data directory."""

    def __init__(self, bin_dir: Path, workdir: Path, *flags: str,
                 metadata: dict | None = None, log_requests: bool = False) -> None:
        self.http = free_port()
        self.tcp = free_port()
        self.data = Path(tempfile.mkdtemp(dir=workdir))
        if metadata is not None:
            (self.data / "nsqd.dat").write_text(json.dumps(metadata))
        argv = [str(bin_dir / "nsqd"), f"--http-address=127.0.0.1:{self.http}",
                f"--tcp-address=127.0.0.1:{self.tcp}", f"--data-path={self.data}",
                f"--log-level={'info' if log_requests else 'warn'}", *flags]
        self.log = self.data / "log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"{argv[0]} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/ping", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"{argv[0]} did not answer /ping")
                time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str, timeout: float = 60) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}{path}", timeout=timeout) as r:
            return r.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def consumers(port: int, n: int, topic: str = "t", channel: str = "c") -> list[socket.socket]:
    """``n`` V2 connections subscribed to ``topic``/``channel`` (RDY 0: idle)."""
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"  V2" + f"SUB {topic} {channel}\n".encode())
        socks.append(s)
    for s in socks:  # each answers OK to SUB
        got = b""
        while len(got) < 10:
            chunk = s.recv(64)
            if not chunk:
                raise SystemExit("nsqd closed a consumer")
            got += chunk
    return socks


_GO_UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


def _go_ms(text: str) -> float:
    """A Go duration as the request log prints it (``12.3ms``, ``1.2s``, ``800µs``) in ms."""
    m = re.fullmatch(r"([\d.]+)(ns|µs|us|ms|s)", text)
    return float(m.group(1)) * _GO_UNITS[m.group(2)] if m else float("nan")


def time_stats(d: Daemon, rounds: int = 7) -> dict[str, float]:
    """The median time of ``GET /stats?format=json`` in ms, as the client sees it and as the
    daemon's request log says its handler took (the second leaves out the time a request
    waits for the daemon, e.g. behind our scans), and the daemon's CPU time per request."""
    d.get("/stats?format=json")  # warm
    times = []
    cpu = cpu_seconds(d.pid)
    for _ in range(rounds):
        t = time.perf_counter()
        d.get("/stats?format=json")
        times.append((time.perf_counter() - t) * 1e3)
    cpu = cpu_seconds(d.pid) - cpu
    time.sleep(0.3)
    logged = re.findall(r"GET /stats\?format=json \([^)]*\) (\S+)",
                        d.log.read_text(errors="replace"))[1:]
    return {"ms": statistics.median(times),
            "handler_ms": statistics.median(map(_go_ms, logged)) if logged else float("nan"),
            # the daemon's CPU time per request (all threads): steadier on a busy machine
            "cpu_ms": cpu / rounds * 1e3}


# --- scenarios --------------------------------------------------------------------------------

def stats_conns(bin_dir: Path, workdir: Path, n: int = 5000) -> dict[str, float]:
    d = Daemon(bin_dir, workdir, log_requests=True)
    socks: list[socket.socket] = []
    try:
        socks = consumers(d.tcp, n)
        return time_stats(d)
    finally:
        for s in socks:
            s.close()
        d.stop()


def topics_metadata(topics: int, channels: int) -> dict:
    return {"topics": [{"channels": [{"name": f"c{j}", "paused": False} for j in range(channels)],
                        "name": f"topic{i:05d}", "paused": False} for i in range(topics)],
            "version": "1.3.0"}


def stats_topics(bin_dir: Path, workdir: Path, topics: int = 20000,
                 channels: int = 2) -> dict[str, float]:
    d = Daemon(bin_dir, workdir, metadata=topics_metadata(topics, channels), log_requests=True)
    try:
        return time_stats(d, 5)
    finally:
        d.stop()


def idle_conn_rss(bin_dir: Path, workdir: Path, n: int = 5000) -> dict[str, float]:
    d = Daemon(bin_dir, workdir)
    socks: list[socket.socket] = []
    try:
        consumers(d.tcp, 1)[0].close()  # the topic and channel exist before the baseline
        time.sleep(0.5)
        before = rss_kib(d.pid)
        socks = consumers(d.tcp, n)
        time.sleep(1.0)
        return {"bytes": (rss_kib(d.pid) - before) * 1024 / n}
    finally:
        for s in socks:
            s.close()
        d.stop()


def pipelined_rss(bin_dir: Path, workdir: Path) -> dict[str, float]:
    d = Daemon(bin_dir, workdir)
    try:
        growth, answered, _ = pipelined_growth("127.0.0.1", d.http, lambda: rss_kib(d.pid))
        if answered != 4 * 400_000:
            print(f"  warning: {answered} of {4 * 400_000} answers read", file=sys.stderr)
        return {"MiB": growth / 1024}
    finally:
        d.stop()


def _pub_command(topic: bytes, body: bytes) -> bytes:
    return b"PUB " + topic + b"\n" + struct.pack(">i", len(body)) + body


def _mpub_command(topic: bytes, bodies: list[bytes]) -> bytes:
    payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b
                                                       for b in bodies)
    return b"MPUB " + topic + b"\n" + struct.pack(">i", len(payload)) + payload


def _read_ok(sock: socket.socket, count: int) -> None:
    """Read ``count`` frames (each an OK response)."""
    buf = b""
    seen = 0
    while seen < count:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise SystemExit("nsqd closed a publisher")
        buf += chunk
        while len(buf) >= 4:
            size = struct.unpack(">i", buf[:4])[0]
            if len(buf) < 4 + size:
                break
            buf = buf[4 + size:]
            seen += 1


def pub_latency_1m(bin_dir: Path, workdir: Path, queued: int = 1_000_000,
                   samples: int = 20000) -> dict[str, float]:
    """PUB latency with ``queued`` messages in memory while another connection keeps MPUBing
    into a second topic (load); no consumer, so nothing leaves."""
    d = Daemon(bin_dir, workdir, f"--mem-queue-size={queued * 2}")
    body = b"m" * 200
    try:
        loader = socket.create_connection(("127.0.0.1", d.tcp))
        loader.sendall(b"  V2")
        batch = _mpub_command(b"load", [body] * 200)
        for _ in range(queued // 200):
            loader.sendall(batch)
        _read_ok(loader, queued // 200)
        stop = threading.Event()

        def load() -> None:
            n = 0
            while not stop.is_set():
                loader.sendall(_mpub_command(b"busy", [body] * 20))
                n += 1
                if n % 10 == 0:
                    _read_ok(loader, 10)
                time.sleep(0.002)

        th = threading.Thread(target=load, daemon=True)
        th.start()
        pub = socket.create_connection(("127.0.0.1", d.tcp))
        pub.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pub.sendall(b"  V2")
        cmd = _pub_command(b"lat", body)
        lat = []
        gc.disable()
        try:
            for _ in range(samples):
                t = time.perf_counter()
                pub.sendall(cmd)
                _read_ok(pub, 1)
                lat.append((time.perf_counter() - t) * 1e3)
        finally:
            gc.enable()
            stop.set()
            th.join(10)
        lat.sort()
        # the longest of the last 256 collector pauses, as each side reports it in /stats
        memory = json.loads(d.get("/stats?format=json&include_clients=false"))["memory"]
        return {"p99.9_ms": lat[int(len(lat) * 0.999)], "max_ms": lat[-1],
                "gc_max_ms": memory["gc_pause_usec_100"] / 1000}
    finally:
        d.stop()


def alternate(name: str, scenario: Callable[[Path, Path], dict[str, float]],
              sides: list[tuple[str, Path]], rounds: int,
              workdir: Path) -> dict[str, dict[str, list[float]]]:
    """Run ``scenario`` ``rounds`` times per side, the sides alternating, each result printed;
    returns every figure per side (``{side: {key: [value per round]}}``)."""
    figures: dict[str, dict[str, list[float]]] = {s: {} for s, _ in sides}
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for side, bin_dir in order:
            result = scenario(bin_dir, workdir)
            for key, value in result.items():
                figures[side].setdefault(key, []).append(value)
            print(f"  {name} round {r + 1} {side}: "
                  + " ".join(f"{k}={v:,.2f}" for k, v in result.items()), flush=True)
    return figures


SCENARIOS: dict[str, Callable[[Path, Path], dict[str, float]]] = {
    "stats_conns": stats_conns,
    "stats_topics": stats_topics,
    "idle_conn_rss": idle_conn_rss,
    "pipelined_rss": pipelined_rss,
    "pub_latency_1m": pub_latency_1m,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--no-metadata", action="store_true",
                    help="skip bench/scale_metadata_bench.py")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    upstream = os.environ.get("NSQ_UPSTREAM_BIN")
    sides = [("nsqpy", OURS)]
    if upstream and (Path(upstream) / "nsqd").exists():
        sides.append(("upstream", Path(upstream)))
    print(f"# scale_bench: {args.rounds} rounds, sides {[s for s, _ in sides]}; "
          f"a shared machine gives noisy figures: read the ratios")
    with tempfile.TemporaryDirectory(prefix="scale_bench") as tmp:
        workdir = Path(tmp)
        for name in names:
            figures = alternate(name, SCENARIOS[name], sides, args.rounds, workdir)
            for key in figures["nsqpy"]:
                ours = statistics.median(figures["nsqpy"][key])
                line = f"{name:<15} {key:<9} nsqpy {ours:10.2f}"
                if "upstream" in figures:
                    theirs = statistics.median(figures["upstream"][key])
                    ratio = ours / theirs if theirs else float("nan")
                    line += f"  upstream {theirs:10.2f}  ratio {ratio:.2f}"
                print(line, flush=True)
    meta = HERE / "scale_metadata_bench.py"
    if meta.exists() and not args.no_metadata:
        print("# bench/scale_metadata_bench.py", flush=True)
        return subprocess.call([sys.executable, str(meta)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
