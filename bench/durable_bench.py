"""Durable publishing (issue #44): group commit against upstream, and what history costs.

One command prints every publish row of the issue's table, each as a ratio measured in the same
run (the two sides alternate round by round, so a busy machine hits both alike):

* ``pub64``: 64 publishers, each with one 200 B ``PUB`` in flight (send, wait for the ``OK``,
  send again), against ``--mem-queue-size=0 --sync-every=1``, a topic without channels (every
  message goes to the topic's disk queue): ours vs upstream v1.3.0, rate and p50/p99 latency;
* ``pub64-history``: the same with ``--retention=1h`` on ours (upstream has no history: its
  durable rate is the reference);
* ``pub1``: one such publisher, same flags, ours vs upstream;
* ``mpub``: upstream bench_writer's shape (2 connections of pipelined ``MPUB`` 200 x 200 B) to a
  topic with one channel, retention off vs ``--retention=1h``, memory mode (``--mem-queue-size``
  holding everything) and disk mode (``--mem-queue-size=0``): rate and nsqd CPU per message.

Upstream's ``nsqd`` comes from ``--upstream-bin`` or ``NSQ_UPSTREAM_BIN`` (docs/testing.md says
how to build it); without it the upstream rows are skipped. ``--before-bin`` adds a third side to
the PUB rows, another nsqd (an earlier commit's, e.g. a script that runs it from a checkout), so
that a change is measured before/after in the same run. Each PUB row prints nsqd's own CPU time
per PUB (all its threads), which a busy machine disturbs less than the rates.

    python bench/durable_bench.py                       # everything, 2 rounds
    python bench/durable_bench.py --only pub64,pub1 --seconds 5 --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import selectors
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nsqd_bench import create_channel, run_pub  # noqa: E402
from replication_bench import cpu_seconds, start_nsqd  # noqa: E402

BODY = b"x" * 200
OK = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
ROWS = ("pub64", "pub64-history", "pub1", "mpub")


def _publishers(addr: str, topic: str, conns: int, seconds: float, out: mp.Queue) -> None:
    """``conns`` connections, one PUB in flight each, for ``seconds``: (count, latencies)."""
    host, port = addr.rsplit(":", 1)
    cmd = b"PUB " + topic.encode() + b"\n" + struct.pack(">i", len(BODY)) + BODY
    sel = selectors.DefaultSelector()
    sent_at: dict[socket.socket, float] = {}
    pending: dict[socket.socket, bytes] = {}
    for _ in range(conns):
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"  V2")
        sel.register(s, selectors.EVENT_READ)
        pending[s] = b""
    latencies: list[float] = []
    start = time.perf_counter()
    end = start + seconds
    for s in pending:
        sent_at[s] = time.perf_counter()
        s.sendall(cmd)
    while sent_at:
        for key, _ in sel.select(timeout=5):
            s = key.fileobj
            data = s.recv(4096)  # type: ignore[union-attr]
            if not data:
                raise SystemExit("nsqd closed a publisher's connection")
            buf = pending[s] + data  # type: ignore[index]
            while len(buf) >= 10:
                if buf[:10] != OK:
                    raise SystemExit(f"unexpected answer {buf[:60]!r}")
                buf = buf[10:]
                now = time.perf_counter()
                latencies.append(now - sent_at.pop(s))  # type: ignore[arg-type]
                if now < end:
                    sent_at[s] = now  # type: ignore[index]
                    s.sendall(cmd)  # type: ignore[union-attr]
            pending[s] = buf  # type: ignore[index]
    wall = time.perf_counter() - start
    for s in pending:
        s.close()
    out.put((len(latencies), wall, latencies))


def run_publishers(addr: str, topic: str, publishers: int, seconds: float) -> tuple[float, float, float]:
    """Rate, p50 and p99 (ms) of ``publishers`` one-in-flight PUB connections over 2 processes."""
    procs = 2 if publishers > 1 else 1
    q: mp.Queue = mp.Queue()
    shares = [publishers // procs + (1 if i < publishers % procs else 0) for i in range(procs)]
    ps = [mp.Process(target=_publishers, args=(addr, topic, n, seconds, q)) for n in shares]
    for p in ps:
        p.start()
    results = [q.get() for _ in ps]
    for p in ps:
        p.join()
    count = sum(r[0] for r in results)
    wall = max(r[1] for r in results)
    lat = sorted(x for r in results for x in r[2])
    return count / wall, lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3


def bench_pub(args, tmp: str, row: str) -> None:
    publishers = 1 if row == "pub1" else 64
    ours_flags = ["--mem-queue-size=0", "--sync-every=1"]
    if row == "pub64-history":
        ours_flags.append("--retention=1h")
    sides = [("ours", args.nsqd_bin, ours_flags)]
    if args.before_bin:
        sides.append(("before", args.before_bin, ours_flags))
    if args.upstream_bin:
        sides.append(("upstream", os.path.join(args.upstream_bin, "nsqd"),
                      ["--mem-queue-size=0", "--sync-every=1"]))
    print(f"## {row}: {publishers} publisher(s), one 200 B PUB in flight each, "
          f"{' '.join(ours_flags)} (ours), {args.seconds:g} s per run")
    got: dict[str, list[tuple[float, float, float, float]]] = {}
    for rnd in range(args.rounds):
        for side, binary, flags in sides:
            proc, tcp, _ = start_nsqd(binary, tmp, f"{row}_{side}_{rnd}", *flags)
            try:
                cpu0 = cpu_seconds(proc)
                rate, p50, p99 = run_publishers(tcp, "durable", publishers, args.seconds)
                # nsqd's own CPU (all threads) per PUB: what a busy machine disturbs least
                cpu = (cpu_seconds(proc) - cpu0) / (rate * args.seconds) * 1e6
            finally:
                proc.terminate()
                proc.wait(60)
            got.setdefault(side, []).append((rate, p50, p99, cpu))
            print(f"  round {rnd} {side:<8} {rate:>10,.0f} PUB/s   p50 {p50:7.2f} ms"
                  f"   p99 {p99:7.2f} ms   {cpu:5.1f} us nsqd CPU/PUB")
    med = {side: [statistics.median(x) for x in zip(*runs)] for side, runs in got.items()}
    for side, (rate, p50, p99, cpu) in med.items():
        print(f"  median   {side:<8} {rate:>10,.0f} PUB/s   p50 {p50:7.2f} ms   p99 {p99:7.2f} ms"
              f"   {cpu:5.1f} us nsqd CPU/PUB")
    ours = med["ours"]
    if "before" in med:
        print(f"  => ours/before: rate {ours[0] / med['before'][0]:.2f}x, "
              f"CPU/PUB {ours[3] / med['before'][3]:.2f}x")
    if "upstream" in med:
        up = med["upstream"]
        print(f"  => rate {ours[0] / up[0]:.1f}x upstream, p99 {ours[2]:.2f} vs {up[2]:.2f} ms, "
              f"CPU/PUB {ours[3]:.1f} vs {up[3]:.1f} us")


def bench_mpub(args, tmp: str) -> None:
    print(f"## mpub: MPUB 200 x 200 B, 2 connections pipelined, {args.messages:,} messages per run,"
          " retention off vs --retention=1h")
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for rnd in range(args.rounds):
        for mode, mem in (("memory", str(args.messages + 1000)), ("disk", "0")):
            for side in ("off", "on"):
                flags = [f"--mem-queue-size={mem}"] + (["--retention=1h"] if side == "on" else [])
                proc, tcp, _ = start_nsqd(args.nsqd_bin, tmp, f"mpub_{mode}_{side}_{rnd}", *flags)
                try:
                    create_channel(tcp, "hbench")
                    q: mp.Queue = mp.Queue()
                    cpu0 = cpu_seconds(proc)
                    n, secs = run_pub(tcp, "hbench", args.messages, 2, q)
                    cpu = (cpu_seconds(proc) - cpu0) / n * 1e6
                finally:
                    proc.terminate()
                    proc.wait(60)
                got.setdefault((mode, side), []).append((n / secs, cpu))
                print(f"  round {rnd} {mode:<6} retention {side:<3} {n / secs:>10,.0f} msgs/s"
                      f"   {cpu:.2f} us nsqd CPU/msg")
    for mode in ("memory", "disk"):
        off = [statistics.median(x) for x in zip(*got[(mode, "off")])]
        on = [statistics.median(x) for x in zip(*got[(mode, "on")])]
        print(f"  => {mode:<6} retention on/off: rate {on[0] / off[0]:.2f}x, "
              f"CPU/msg {on[1] / off[1]:.2f}x ({off[1]:.2f} -> {on[1]:.2f} us)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nsqd-bin", default=shutil.which("nsqd", path=os.path.dirname(sys.executable)) or "nsqd")
    ap.add_argument("--before-bin", default="",
                    help="another nsqd (an earlier commit's) run as a side of its own in the PUB rows")
    ap.add_argument("--upstream-bin", default=os.environ.get("NSQ_UPSTREAM_BIN", ""))
    ap.add_argument("--only", default=",".join(ROWS), help="comma-separated rows: " + ", ".join(ROWS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0, help="per PUB run")
    ap.add_argument("--messages", type=int, default=300_000, help="per MPUB run")
    args = ap.parse_args()
    print(f"# durable_bench {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    tmp = tempfile.mkdtemp(prefix="durable_bench_", dir=os.environ.get("BENCH_TMP"))
    try:
        for row in args.only.split(","):
            if row == "mpub":
                bench_mpub(args, tmp)
            elif row in ROWS:
                bench_pub(args, tmp, row)
            else:
                raise SystemExit(f"unknown row {row!r}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
