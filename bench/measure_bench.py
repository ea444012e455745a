"""Issue #42's Measure table in one command: every row, ours beside upstream v1.3.0, with ratios.

Rows (each on fresh daemons on free loopback ports, the two sides alternating round by round,
the same flags on both sides):

===============  ===============================================================================
mpub             HTTP ``POST /mpub`` 100 x 200 B (text), wrk, 16 connections,
                 ``--mem-queue-size=100000000`` (nothing written to disk): messages/s
mpub_channel     the same to a topic with one channel and no consumer (the messages queue in
                 the channel rather than at the topic)
writer_batch1    upstream's ``bench_writer --batch-size=1 --size=200`` (one MPUB of one message
                 per round trip, one connection per core): messages/s
stats_clients    ``GET /stats?format=json`` with 2,000 V2 consumers subscribed to one channel:
                 median of 15 requests, ms (lower is better), and the daemon's CPU per request
stats_topics     the same with 5,000 topics x 2 channels (loaded from an ``nsqd.dat``)
pub, ping        HTTP ``POST /pub`` 200 B (32 connections), ``GET /ping`` (8): requests/s
gc_pause         the longest collector pause (``/stats`` ``gc_pause_usec_100``) with 1M messages
                 queued in a channel and 10,000 in flight to 4 consumers, while a publisher keeps
                 MPUBing and another PUBs one at a time: ms (lower is better); for ours also
                 the CPU time of the longest pass (``gc_probe/``), which a loaded machine
                 does not stretch
tcp_mpub         ``bench_writer`` / ``bench_reader`` (MPUB 200 x 200 B, default flags):
                 publish and consume messages/s (the "nothing else slower" row)
===============  ===============================================================================

The HTTP rows also print each side's CPU time per request (all its threads): on a loaded machine
that is the steadier figure, since req/s then measures how much CPU each side got; and its minor
page faults per request (pages the kernel mapped and zeroed on first touch: with nothing
consuming, ``mpub``'s queue only grows, and fresh memory is part of each request's cost). The load
average at the start and end of each row is printed with it; run on a quiet machine for the
table in docs/benchmarks.md, and read ``bench/request_cost_bench.py`` (our code alone, or its
instructions under valgrind) when the machine is busy.

    NSQ_UPSTREAM_BIN=<dir of upstream's binaries> .venv/bin/python bench/measure_bench.py
    ... [--rounds 3] [--rows mpub,pub,ping] [--duration 5] [--side base=<dir>]

``--side base=<dir>`` adds a side whose ``<dir>/nsqd`` is, say, a two-line script running
another checkout of ours (``PYTHONPATH=<checkout>/src exec .venv/bin/nsqd "$@"``): the rows
then print it beside ours and upstream, every side in turn, for a before/after in one run.

Without ``NSQ_UPSTREAM_BIN`` only ours is measured (and the rows needing upstream's
``bench_writer``/``bench_reader`` are skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import http_bench  # noqa: E402
import scale_bench  # noqa: E402
import upstream_bench  # noqa: E402

OURS = Path(sys.executable).parent
MEMORY = "--mem-queue-size=100000000"

#: row -> (unit, higher is better)
UNITS = {"mpub": ("msgs/s", True), "mpub_channel": ("msgs/s", True),
         "writer_batch1": ("msgs/s", True),
         "stats_clients": ("ms", False), "stats_topics": ("ms", False),
         "pub": ("req/s", True), "ping": ("req/s", True), "gc_pause": ("ms", False),
         "gc_pause_cpu_ms": ("ms CPU", False),
         "tcp_publish": ("msgs/s", True), "tcp_consume": ("msgs/s", True)}
GOALS = {"mpub": ">= 1.0x (goal 1.5x)", "writer_batch1": ">= 1.2x", "stats_clients": "<= 1.0x",
         "stats_topics": "<= 1.0x", "pub": ">= 1.5x", "ping": ">= 1.5x",
         "gc_pause": "<= 5 ms", "gc_pause_cpu_ms": "<= 5 ms", "tcp_publish": "as today", "tcp_consume": "as today"}


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- HTTP rows (wrk) ---------------------------------------------------------------------------

def http_row(name: str, flags: tuple[str, ...], duration: float, row_name: str = "",
             before: tuple[str, ...] = ()) -> Callable[[Path, Path], dict]:
    """wrk on ``http_bench``'s row ``row_name`` (``name`` by default), reported as ``name``;
    ``before``: paths POSTed first (a channel created, say)."""
    row = http_bench.ROWS[row_name or name]

    def run(bin_dir: Path, workdir: Path) -> dict:
        server = http_bench.Server("nsqd", bin_dir, workdir, flags)
        try:
            for path in before:
                urllib.request.urlopen(urllib.request.Request(
                    f"http://127.0.0.1:{server.http}{path}", method="POST"), timeout=10).close()
            http_bench.run_wrk(row, server.http, 1.0, workdir)  # warm-up
            got = http_bench.run_wrk(row, server.http, duration, workdir, server.proc.pid)
        finally:
            server.close()
        return {name: got["rps"] * row.messages, f"{name}_cpu_us": got["cpu_us"],
                f"{name}_faults": got["faults"]}

    return run


# --- upstream's bench tools --------------------------------------------------------------------

def writer_batch1(runfor: str) -> Callable[[Path, Path], dict]:
    def run(bin_dir: Path, workdir: Path) -> dict:
        writer = upstream_bench.find_tool("bench_writer")
        with upstream_bench.nsqd(str(bin_dir / "nsqd"), []) as (addr, _, proc):
            cpu = upstream_bench.cpu_seconds(proc.pid)
            tool = upstream_bench.subprocess.Popen(
                [writer, f"--nsqd-tcp-address={addr}", f"--runfor={runfor}", "--batch-size=1",
                 "--size=200"], stdout=upstream_bench.subprocess.PIPE,
                stderr=upstream_bench.subprocess.STDOUT, text=True)
            ops = upstream_bench.ops_of(tool)
            cpu = upstream_bench.cpu_seconds(proc.pid) - cpu
        seconds = upstream_bench.go_seconds(runfor)
        return {"writer_batch1": ops, "writer_batch1_cpu_us": cpu / (ops * seconds) * 1e6}

    return run


def tcp_mpub(runfor: str) -> Callable[[Path, Path], dict]:
    def run(bin_dir: Path, workdir: Path) -> dict:
        writer = upstream_bench.find_tool("bench_writer")
        reader = upstream_bench.find_tool("bench_reader")
        backlog = f"{upstream_bench.go_seconds(runfor) * 2:g}s"
        with upstream_bench.nsqd(str(bin_dir / "nsqd"), []) as (addr, _, _proc):
            publish = upstream_bench.ops_of(upstream_bench.start_tool(writer, addr, backlog))
            consume = upstream_bench.ops_of(upstream_bench.start_tool(reader, addr, runfor))
        return {"tcp_publish": publish, "tcp_consume": consume}

    return run


# --- /stats ------------------------------------------------------------------------------------

def stats_clients(bin_dir: Path, workdir: Path, n: int = 2000) -> dict:
    d = scale_bench.Daemon(bin_dir, workdir)
    socks: list[socket.socket] = []
    try:
        socks = scale_bench.consumers(d.tcp, n)
        got = scale_bench.time_stats(d, 15)
        return {"stats_clients": got["ms"], "stats_clients_cpu_ms": got["cpu_ms"]}
    finally:
        for s in socks:
            s.close()
        d.stop()


def stats_topics(bin_dir: Path, workdir: Path) -> dict:
    d = scale_bench.Daemon(bin_dir, workdir, metadata=scale_bench.topics_metadata(5000, 2))
    try:
        got = scale_bench.time_stats(d, 15)
        return {"stats_topics": got["ms"], "stats_topics_cpu_ms": got["cpu_ms"]}
    finally:
        d.stop()


# --- the collector's longest pause -------------------------------------------------------------

def _subscribe(port: int, topic: bytes, channel: bytes, rdy: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(b"  V2SUB " + topic + b" " + channel + b"\n")
    scale_bench._read_ok(sock, 1)
    sock.sendall(b"RDY %d\n" % rdy)
    return sock


def _drain_until(sock: socket.socket, messages: int, size: int) -> None:
    """Read ``messages`` message frames of ``size``-byte bodies (heartbeats aside, none come
    within the run), and keep them unanswered: they stay in flight."""
    want = messages * (4 + 4 + 26 + size)
    got = 0
    while got < want:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("nsqd closed a consumer")
        got += len(chunk)


def _probed_daemon(bin_dir: Path, workdir: Path, probe: Path, *flags: str) -> scale_bench.Daemon:
    """Our nsqd with ``gc_probe/sitecustomize.py`` loaded: it writes the CPU time of its
    longest collection pass to ``probe`` on SIGUSR1."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "NSQPY_GC_PROBE")}
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE / "gc_probe"),
                                                            saved["PYTHONPATH"]]))
    os.environ["NSQPY_GC_PROBE"] = str(probe)
    try:
        return scale_bench.Daemon(bin_dir, workdir, *flags)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _probed_cpu_ms(d: scale_bench.Daemon, probe: Path) -> float:
    os.kill(d.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not (probe.exists() and probe.read_text()):
        if time.monotonic() > deadline:
            raise SystemExit("gc_pause: the probe did not answer")
        time.sleep(0.05)
    return int(probe.read_text()) / 1e6


def gc_pause(bin_dir: Path, workdir: Path, queued: int = 1_000_000, in_flight: int = 10_000,
             seconds: float = 10.0) -> dict:
    ours = bin_dir == OURS
    probe = workdir / f"gc_probe.{time.monotonic_ns()}"
    d = (_probed_daemon(bin_dir, workdir, probe, MEMORY) if ours
         else scale_bench.Daemon(bin_dir, workdir, MEMORY))
    body = b"m" * 200
    socks: list[socket.socket] = []
    try:
        # the channel exists before the messages, so they queue in it (not at the topic)
        socks = [_subscribe(d.tcp, b"q", b"c", 0) for _ in range(in_flight // 2500)]
        loader = socket.create_connection(("127.0.0.1", d.tcp), timeout=60)
        loader.sendall(b"  V2")
        batch = scale_bench._mpub_command(b"q", [body] * 200)
        for _ in range((queued + in_flight) // 200):
            loader.sendall(batch)
        scale_bench._read_ok(loader, (queued + in_flight) // 200)
        for s in socks:
            s.sendall(b"RDY 2500\n")
        for s in socks:
            _drain_until(s, 2500, len(body))
        stop = threading.Event()

        def load() -> None:  # a topic without channels: its queue grows by 100k msgs/s at most
            sent = 0
            while not stop.is_set():
                loader.sendall(scale_bench._mpub_command(b"busy", [body] * 20))
                sent += 1
                if sent % 10 == 0:
                    scale_bench._read_ok(loader, 10)
                time.sleep(0.002)

        th = threading.Thread(target=load, daemon=True)
        th.start()
        pub = socket.create_connection(("127.0.0.1", d.tcp), timeout=60)
        pub.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pub.sendall(b"  V2")
        cmd = scale_bench._pub_command(b"lat", body)
        lat = []
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                t = time.perf_counter()
                pub.sendall(cmd)
                scale_bench._read_ok(pub, 1)
                lat.append((time.perf_counter() - t) * 1e3)
        finally:
            stop.set()
            th.join(10)
        stats = json.loads(d.get("/stats?format=json&topic=q&include_clients=false"))
        channel = stats["topics"][0]["channels"][0]
        if channel["in_flight_count"] != in_flight or channel["depth"] < queued:
            raise SystemExit(f"gc_pause: {channel['in_flight_count']} in flight, "
                             f"{channel['depth']} queued")
        lat.sort()
        figures = {"gc_pause": stats["memory"]["gc_pause_usec_100"] / 1000,
                   "gc_pub_p999_ms": lat[int(len(lat) * 0.999)], "gc_pub_max_ms": lat[-1]}
        if ours:  # (Go's pauses are short stop-the-world phases: wall time is theirs)
            figures["gc_pause_cpu_ms"] = _probed_cpu_ms(d, probe)
        return figures
    finally:
        for s in socks:
            s.close()
        d.stop()


# --- the table ---------------------------------------------------------------------------------

def scenarios(args: argparse.Namespace, upstream: bool) -> dict[str, Callable[[Path, Path], dict]]:
    runfor = f"{args.duration:g}s"
    found = {
        "mpub": http_row("mpub", (MEMORY,), args.duration),
        "mpub_channel": http_row("mpub_channel", (MEMORY,), args.duration, "mpub",
                                 ("/topic/create?topic=h", "/channel/create?topic=h&channel=c")),
        "writer_batch1": writer_batch1(runfor),
        "stats_clients": stats_clients,
        "stats_topics": stats_topics,
        "pub": http_row("pub", (MEMORY,), args.duration),
        "ping": http_row("ping", (), args.duration),
        "gc_pause": gc_pause,
        "tcp_mpub": tcp_mpub(runfor),
    }
    if not upstream:  # upstream's bench tools are needed for these
        found.pop("writer_batch1")
        found.pop("tcp_mpub")
    return found


def ratio(key: str, ours: float, theirs: float) -> str:
    if not theirs or not ours:
        return "-"
    higher_better = UNITS.get(key, ("", False))[1]
    return f"{ours / theirs:.2f}x" if higher_better else f"{ours / theirs:.2f}x time"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per wrk/bench run")
    ap.add_argument("--rows", default="", help="comma-separated rows (default: all)")
    ap.add_argument("--side", action="append", default=[], metavar="NAME=DIR",
                    help="one more side: DIR holds an nsqd (e.g. a script running another "
                         "checkout of ours), measured in turn with the others (A/B of two trees)")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found (Debian: apt-get install wrk; `make bench` installs it)")
    env = os.environ.get("NSQ_UPSTREAM_BIN")
    sides = [("nsqpy", OURS)]
    if env and (Path(env) / "nsqd").exists():
        sides.append(("upstream", Path(env)))
    sides += [(name, Path(path)) for name, _, path in (arg.partition("=") for arg in args.side)]
    rows = scenarios(args, any(name == "upstream" for name, _ in sides))
    names = [n for n in args.rows.split(",") if n] or list(rows)
    print(f"# measure_bench: {args.rounds} round(s), sides {[s for s, _ in sides]}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"load average {load_average()}", flush=True)
    table: list[tuple[str, float, float | None, str]] = []
    with tempfile.TemporaryDirectory(prefix="measure_bench") as tmp:
        workdir = Path(tmp)
        for name in names:
            before = load_average()
            figures = scale_bench.alternate(name, rows[name], sides, args.rounds, workdir)
            print(f"  ({name}: load average {before} before, {load_average()} after)", flush=True)
            for key in figures["nsqpy"]:
                ours = statistics.median(figures["nsqpy"][key])
                theirs = (statistics.median(figures["upstream"][key])
                          if key in figures.get("upstream", {}) else None)
                table.append((key, ours, theirs, ratio(key, ours, theirs or 0)))
                for side, _ in sides:
                    if side not in ("nsqpy", "upstream") and key in figures[side]:
                        other = statistics.median(figures[side][key])
                        table.append((f"{key} ({side})", other, theirs,
                                      ratio(key, other, theirs or 0)))
    print("\n| figure | unit | upstream | nsqpy | ratio | goal |\n|---|---|---:|---:|---:|---|")
    for key, ours, theirs, r in table:
        base = key.split(" ")[0]
        unit = UNITS.get(base, ("us CPU/req" if base.endswith("_cpu_us")
                                else "ms CPU/req" if base.endswith("_cpu_ms")
                                else "page faults/req" if base.endswith("_faults") else "ms",
                                False))[0]
        shown = f"{theirs:,.2f}" if theirs is not None else "-"
        print(f"| {key} | {unit} | {shown} | {ours:,.2f} | {r} | {GOALS.get(key, '')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
