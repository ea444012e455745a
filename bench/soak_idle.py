"""Soak: 10,000 idle connections held open while a normal pub/sub load runs (fault matrix row 6).

Starts its own nsqd (raising RLIMIT_NOFILE for itself and for that nsqd), measures the pub/sub
load alone, then opens the idle connections (magic + IDENTIFY, answering heartbeats as real idle
clients do), measures nsqd's RSS growth per idle connection, runs the same load again for at
least ``--hold`` seconds (past nsqd's 30 s heartbeat, so all idle connections get heartbeats
while the load runs) and checks that the load keeps at least 80% of its median throughput. Publisher, consumer and idle holder are separate
processes (the load generator of bench/nsqd_bench.py: 200-byte messages, MPUB batches of 200,
RDY 2500, FIN each).

    python bench/soak_idle.py                      # 10,000 idle connections, 1,000,000 messages
    python bench/soak_idle.py --idle 20000 --messages 2000000 --rounds 5 --hold 90

Exit status 1 if the load loses more than 20% of its throughput. Results: docs/security.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nsqd_bench import BATCH, MSG_SIZE, consumer, publisher, rss_mib  # noqa: E402


def raise_nofile(want: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not answer")


# --- idle connections ------------------------------------------------------------------------------

class IdleClient(asyncio.Protocol):
    """Says hello (magic + IDENTIFY) and then only answers heartbeats, like an idle producer."""

    def __init__(self, i: int, stats: dict) -> None:
        self.i = i
        self.stats = stats
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        body = json.dumps({"client_id": f"idle-{self.i}", "user_agent": "soak_idle"}).encode()
        transport.write(b"  V2IDENTIFY\n" + len(body).to_bytes(4, "big") + body)  # type: ignore[attr-defined]
        self.stats["open"] += 1

    def data_received(self, data: bytes) -> None:
        if b"_heartbeat_" in data and self.transport is not None:
            self.transport.write(b"NOP\n")
            self.stats["heartbeats"] += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.stats["open"] -= 1
        self.stats["lost"] += 1


def idle_holder(addr: str, count: int, ready: mp.Event, stop: mp.Event, out: mp.Queue) -> None:
    raise_nofile(count + 1000)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def main() -> None:
        loop = asyncio.get_running_loop()
        host, port = addr.rsplit(":", 1)
        stats = {"open": 0, "lost": 0, "heartbeats": 0, "failed": 0}
        transports = []
        batch = 500
        for start in range(0, count, batch):
            results = await asyncio.gather(*[
                loop.create_connection(lambda i=i: IdleClient(i, stats), host, int(port))
                for i in range(start, min(count, start + batch))], return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    stats["failed"] += 1
                else:
                    transports.append(r[0])
        await asyncio.sleep(1.0)  # let nsqd answer every IDENTIFY
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.2)
        out.put(dict(stats))
        for t in transports:
            t.close()

    asyncio.run(main())


# --- the load ---------------------------------------------------------------------------------------

def run_load(addr: str, topic: str, messages: int) -> tuple[float, float]:
    """One publisher and one consumer at once; returns (consumed msgs/s, published msgs/s)."""
    result: mp.Queue = mp.Queue()
    shared = mp.Value("q", 0)
    batches = messages // BATCH
    cons = mp.Process(target=consumer, args=(addr, topic, "ch", batches * BATCH, 2500, result, False, shared))
    cons.start()
    time.sleep(0.3)  # subscribed before the first message
    pub = mp.Process(target=publisher, args=(addr, topic, batches, 8, result))
    pub.start()
    pub.join()
    cons.join()
    got = [result.get() for _ in range(2)]
    sub = next(r for r in got if r[0] == "sub")
    pubr = next(r for r in got if r[0] == "pub")
    return sub[1] / sub[2], pubr[1] / pubr[2]


def latency_probe(addr: str, n: int = 300) -> tuple[float, float]:
    """PUB round trips from a fresh connection: (p50, p99) in ms."""
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"  V2")
    cmd = b"PUB soak_probe\n" + (5).to_bytes(4, "big") + b"probe"
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        s.sendall(cmd)
        got = b""
        while len(got) < 10:
            got += s.recv(64)
        out.append((time.perf_counter() - t0) * 1e3)
    s.close()
    out.sort()
    return statistics.median(out), out[int(len(out) * 0.99) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle", type=int, default=10_000, help="idle connections to hold")
    ap.add_argument("--messages", type=int, default=1_000_000, help="messages per load round")
    ap.add_argument("--rounds", type=int, default=3, help="load rounds at least, per phase")
    ap.add_argument("--hold", type=float, default=40.0,
                    help="seconds the idle connections are held while the load runs")
    ap.add_argument("--nsqd-bin", default=os.path.join(os.path.dirname(sys.executable), "nsqd"))
    args = ap.parse_args()

    limit = raise_nofile(args.idle + 2000)  # the nsqd started below inherits it
    if limit < args.idle + 500:
        print(f"RLIMIT_NOFILE is {limit}: too low for {args.idle} connections", file=sys.stderr)
        return 2
    data = tempfile.mkdtemp(prefix="soak_idle_")
    tcp, http = free_port(), free_port()
    addr = f"127.0.0.1:{tcp}"
    log = open(os.path.join(data, "nsqd.log"), "wb")
    nsqd = subprocess.Popen([args.nsqd_bin, f"--tcp-address={addr}", f"--http-address=127.0.0.1:{http}",
                             f"--data-path={data}", "--mem-queue-size=1000000", "--log-level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    stop = mp.Event()
    holder = None
    try:
        wait_http(f"http://127.0.0.1:{http}/ping")
        print(f"nsqd pid {nsqd.pid}, RLIMIT_NOFILE {limit}, {os.cpu_count()} CPUs")
        run_load(addr, "soak_warmup", 200_000)
        base_rates = [run_load(addr, f"soak_base{i}", args.messages) for i in range(args.rounds)]
        base = statistics.median(r[0] for r in base_rates)
        base_lat = latency_probe(addr)
        print(f"load alone:            {base:>10,.0f} msgs/s consumed, median "
              f"(rounds: {', '.join(f'{r[0]:,.0f}' for r in base_rates)}); "
              f"PUB p50 {base_lat[0]:.2f} ms p99 {base_lat[1]:.2f} ms")

        rss0 = rss_mib(nsqd.pid)
        ready = mp.Event()
        out: mp.Queue = mp.Queue()
        t0 = time.perf_counter()
        holder = mp.Process(target=idle_holder, args=(addr, args.idle, ready, stop, out))
        holder.start()
        if not ready.wait(120):
            raise SystemExit("idle connections did not open in 120 s")
        opened_in = time.perf_counter() - t0
        time.sleep(1.0)
        rss1 = rss_mib(nsqd.pid)
        per_conn = (rss1 - rss0) * 1024 * 1024 / args.idle
        print(f"{args.idle} idle connections opened in {opened_in:.1f}s: nsqd RSS {rss0:.1f} -> "
              f"{rss1:.1f} MiB, {per_conn:,.0f} bytes per idle connection")

        idle_rates = []
        while len(idle_rates) < args.rounds or time.perf_counter() - t0 < args.hold:
            idle_rates.append(run_load(addr, f"soak_idle{len(idle_rates)}", args.messages))
        with_idle = statistics.median(r[0] for r in idle_rates)
        idle_lat = latency_probe(addr)
        ratio = with_idle / base if base else 0.0
        print(f"load + idle conns:     {with_idle:>10,.0f} msgs/s consumed, median "
              f"(rounds: {', '.join(f'{r[0]:,.0f}' for r in idle_rates)}); "
              f"PUB p50 {idle_lat[0]:.2f} ms p99 {idle_lat[1]:.2f} ms")
        stop.set()
        holder.join(60)
        stats = out.get(timeout=10) if not out.empty() else {}
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/ping", timeout=5) as r:
            ping = r.read().decode()
        print(f"idle holder after {time.perf_counter() - t0:.0f}s: {stats}; /ping {ping}; "
              f"nsqd RSS at the end {rss_mib(nsqd.pid):.1f} MiB")
        ok = ratio >= 0.8 and stats.get("lost", 1) == 0 and stats.get("failed", 1) == 0
        print(f"throughput kept: {ratio:.0%} ({'PASS' if ok else 'FAIL'}: >= 80% needed, "
              f"no idle connection lost)")
        return 0 if ok else 1
    finally:
        stop.set()
        if holder is not None and holder.is_alive():
            holder.terminate()
            holder.join(10)
        nsqd.terminate()
        try:
            nsqd.wait(30)
        except subprocess.TimeoutExpired:
            nsqd.kill()
            nsqd.wait(10)
        log.close()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
