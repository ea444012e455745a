"""Side by side with upstream: upstream's own bench_writer / bench_reader against upstream nsqd and ours.

Issue #11's yardstick in one command. For each flag set (in memory, and default flags that spill to disk)
and each server, on a fresh data directory and free ports:

1. ``bench_writer`` for ``--backlog`` times ``--runfor`` (MPUB 200 x 200 B, upstream's defaults) ->
   publish rate;
2. ``bench_reader`` for ``--runfor`` (RDY 2500, one FIN per message) draining that backlog -> consume rate.
   ``bench_reader`` divides what it got by its whole ``--runfor``, so a backlog that runs dry early
   only shows the publish rate again: the channel's depth is read afterwards and a drained run is
   marked ``(drained)`` -- that figure is a lower bound, rerun with a larger ``--backlog``;
3. both at once on a fresh server -> publish and consume rates while the other runs, and the
   server's CPU time (user + system, ``/proc/<pid>/stat``) per message: on a small machine the
   tools share the server's cores, so this is the figure a server change moves most steadily.

Servers alternate within each round so that the machine's drift hits both alike; ``--rounds`` repeats.
The tools and upstream's nsqd are found in ``$NSQ_UPSTREAM_BIN`` (a directory) or on PATH; without an
upstream ``nsqd`` only ours is measured.

    NSQ_UPSTREAM_BIN=/path/to/upstream/bin python bench/upstream_bench.py --runfor 10s --rounds 2

``--server NAME=PATH`` adds another nsqd (say, a wrapper running an older checkout) to the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Iterator

OPS = re.compile(r"([0-9.]+)ops/s")
FLAG_SETS = {
    "memory": ["--mem-queue-size=1000000"],
    "default": [],
}


def go_seconds(duration: str) -> float:
    """Seconds in a simple Go duration (``10s``, ``1m30s``, ``500ms``)."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([0-9.]+)(h|ms|us|ns|m|s)", duration)
    if not parts or "".join(a + b for a, b in parts) != duration:
        raise SystemExit(f"bad duration {duration!r}")
    return sum(float(a) * units[b] for a, b in parts)


def find_tool(name: str) -> str | None:
    folder = os.environ.get("NSQ_UPSTREAM_BIN")
    if folder and (Path(folder) / name).is_file():
        return str(Path(folder) / name)
    return shutil.which(name)


def ours_nsqd() -> str:
    venv_bin = Path(sys.executable).parent / "nsqd"
    return str(venv_bin) if venv_bin.is_file() else "nsqd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def nsqd(binary: str, flags: list[str]) -> Iterator[tuple[str, subprocess.Popen]]:
    """A fresh nsqd on free ports with its own data directory; stopped (by PID) and removed after."""
    data = tempfile.mkdtemp(prefix="upstream-bench-")
    tcp, http = free_port(), free_port()
    proc = subprocess.Popen(
        [binary, f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}",
         f"--data-path={data}", "--log-level=warn", *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http}/ping", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{binary} did not start")
                time.sleep(0.05)
        yield f"127.0.0.1:{tcp}", f"127.0.0.1:{http}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def channel_depth(http: str) -> int:
    """Depth of bench_reader's channel (``sub_bench``/``ch``) from /stats, -1 when unknown."""
    try:
        with urllib.request.urlopen(f"http://{http}/stats?format=json&topic=sub_bench", timeout=10) as r:
            stats = json.load(r)
    except (OSError, ValueError):
        return -1
    stats = stats.get("data", stats)  # upstream v1.3.0 answers without the old "data" wrapper
    for topic in stats.get("topics") or []:
        for channel in topic.get("channels") or []:
            if channel.get("channel_name") == "ch":
                return int(channel.get("depth", 0)) + int(channel.get("in_flight_count", 0))
    return -1


def start_tool(tool: str, addr: str, runfor: str) -> subprocess.Popen:
    return subprocess.Popen([tool, f"--nsqd-tcp-address={addr}", f"--runfor={runfor}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ops_of(proc: subprocess.Popen) -> float:
    out, _ = proc.communicate(timeout=600)
    found = OPS.findall(out)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"{proc.args[0]} failed: {out.strip()[-400:]}")
    return float(found[-1])


@dataclass
class Figures:
    publish: list[float] = field(default_factory=list)
    consume: list[float] = field(default_factory=list)
    both_pub: list[float] = field(default_factory=list)
    both_sub: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    both_cpu_us: list[float] = field(default_factory=list)  # nsqd CPU per message, both at once
    drained: int = 0  # consume runs whose backlog ran dry (their figure is a lower bound)


def measure(binary: str, flags: list[str], writer: str, reader: str, runfor: str, backlog: str,
            fig: Figures) -> None:
    with nsqd(binary, flags) as (addr, http, proc):
        fig.publish.append(ops_of(start_tool(writer, addr, backlog)))
        fig.consume.append(ops_of(start_tool(reader, addr, runfor)))
        fig.rss.append(rss_mib(proc.pid))
        fig.drained += channel_depth(http) == 0
    with nsqd(binary, flags) as (addr, _, proc):
        cpu = cpu_seconds(proc.pid)
        w, r = start_tool(writer, addr, runfor), start_tool(reader, addr, runfor)
        fig.both_pub.append(ops_of(w))
        fig.both_sub.append(ops_of(r))
        cpu = cpu_seconds(proc.pid) - cpu
        # what the server spent per message taken in and handed out (the tools share its cores)
        messages = (fig.both_pub[-1] + fig.both_sub[-1]) / 2 * go_seconds(runfor)
        fig.both_cpu_us.append(cpu / messages * 1e6 if messages else 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runfor", default="10s", help="each tool's --runfor (Go duration)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--server", action="append", default=[], metavar="NAME=NSQD",
                    help="one more nsqd to measure in the same run (e.g. another branch's build)")
    ap.add_argument("--backlog", type=float, default=2.0,
                    help="the backlog's bench_writer runs this many times --runfor")
    ap.add_argument("--flags", choices=sorted(FLAG_SETS), nargs="*", default=sorted(FLAG_SETS, reverse=True))
    args = ap.parse_args()
    writer, reader = find_tool("bench_writer"), find_tool("bench_reader")
    if not writer or not reader:
        raise SystemExit("bench_writer/bench_reader not found: set NSQ_UPSTREAM_BIN or put them on PATH")
    servers = {"nsqpy": ours_nsqd()}
    upstream = find_tool("nsqd")
    if upstream and Path(upstream).resolve() != Path(servers["nsqpy"]).resolve():
        servers = {"upstream": upstream, **servers}
    for extra in args.server:
        name, _, binary = extra.partition("=")
        servers[name] = binary
    seconds = go_seconds(args.runfor)
    backlog = f"{seconds * args.backlog:g}s"
    for flag_set in args.flags:
        figures = {name: Figures() for name in servers}
        for _ in range(args.rounds):
            for name, binary in servers.items():
                measure(binary, FLAG_SETS[flag_set], writer, reader, args.runfor, backlog, figures[name])
        print(f"\n## {flag_set} ({' '.join(FLAG_SETS[flag_set]) or 'default flags'}), "
              f"runfor {args.runfor} (backlog written for {backlog}), {args.rounds} round(s), median msgs/s")
        rows = [("publish", "publish"), ("consume the backlog", "consume"),
                ("publish, both at once", "both_pub"), ("consume, both at once", "both_sub")]
        names = list(servers)
        # ratios of every other server to the first (upstream when it was found)
        print("| | " + " | ".join(names) + " |" + "".join(f" {n}/{names[0]} |" for n in names[1:]))
        print("|---|" + "---:|" * (2 * len(names) - 1))
        for label, key in rows:
            vals = [median(getattr(figures[n], key)) for n in names]
            ratios = "".join(f" {v / vals[0]:.2f}x |" if vals[0] else " |" for v in vals[1:])
            marks = [" (drained)" if key == "consume" and figures[n].drained else "" for n in names]
            print(f"| {label} | " + " | ".join(f"{v:,.0f}{m}" for v, m in zip(vals, marks)) + " |" + ratios)
        print("| nsqd CPU per message, both at once (us) | "
              + " | ".join(f"{median(figures[n].both_cpu_us):.2f}" for n in names) + " |")
        print("| RSS after the backlog run (MiB) | "
              + " | ".join(f"{median(figures[n].rss):.0f}" for n in names) + " |")


if __name__ == "__main__":
    main()
