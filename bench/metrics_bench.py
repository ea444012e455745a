"""Cost of observability on nsqd: /metrics and /stats scrapes at 1,000 topics x 10 channels,
the size of one statsd push, and publish/consume rates with statsd + /metrics on vs off.

    python bench/metrics_bench.py                      # both parts, defaults below
    python bench/metrics_bench.py --only scrape --topics 1000 --channels 10 --scrapes 10
    python bench/metrics_bench.py --only rate --messages 500000 --rounds 3

"scrape": one nsqd with ``topics x channels`` channels (one message per topic), then
``--scrapes`` sequential GETs of each endpoint, timed at the client (wall time, which is also
the time nsqd's event loop is busy building the answer). "rate": nsqd_bench's MPUB publisher
and RDY 2500 consumers against nsqd with ``--metrics=false`` and no statsd ("off") and against
nsqd pushing statsd every second while a scraper GETs /metrics every second ("on"), rounds
alternating so the shared machine's drift hits both alike.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nsqd_bench import create_channel, rss_mib, run_pub, run_sub  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from helpers.statsd_receiver import StatsdReceiver  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nsqd:
    def __init__(self, nsqd_bin: str, *flags: str) -> None:
        self.tmp = tempfile.mkdtemp(prefix="metricsbench")
        self.tcp = f"127.0.0.1:{_free_port()}"
        self.http = f"127.0.0.1:{_free_port()}"
        self.proc = subprocess.Popen([nsqd_bin, f"--tcp-address={self.tcp}",
                                      f"--http-address={self.http}", f"--data-path={self.tmp}",
                                      "--log-level=warn", *flags])
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://{self.http}/ping", timeout=0.5)
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nsqd did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(600)  # 11,000 disk queues flush and fsync at exit
        shutil.rmtree(self.tmp, ignore_errors=True)


def populate(addr: str, topics: int, channels: int) -> None:
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)

    def post(path: str, body: bytes = b"") -> None:
        conn.request("POST", path, body=body)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path}: {resp.status}")

    for t in range(topics):
        name = f"topic_{t:04d}"
        post(f"/topic/create?topic={name}")
        for c in range(channels):
            post(f"/channel/create?topic={name}&channel=channel_{c:02d}")
        post(f"/pub?topic={name}", b"x" * 100)
    conn.close()


def time_get(addr: str, path: str, n: int) -> tuple[list[float], int]:
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    times, size = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        times.append((time.perf_counter() - t0) * 1000)
        size = len(body)
    conn.close()
    return times, size


def bench_scrape(args) -> None:
    sink = StatsdReceiver()
    interval = 10
    node = Nsqd(args.nsqd_bin, f"--statsd-address={sink.address}",
                f"--statsd-interval={interval}s")
    try:
        t0 = time.perf_counter()
        populate(node.http, args.topics, args.channels)
        print(f"created {args.topics} topics x {args.channels} channels in "
              f"{time.perf_counter() - t0:.1f}s; RSS {rss_mib(node.proc.pid):.1f} MiB")
        print(f"{'endpoint':<42} {'median ms':>10} {'max ms':>8} {'bytes':>11}")
        for path in ("/metrics", "/stats?format=json", "/stats",
                     "/stats?format=json&include_clients=false"):
            times, size = time_get(node.http, path, args.scrapes)
            print(f"{path:<42} {statistics.median(times):>10.1f} {max(times):>8.1f} {size:>11,}")
        _, body_size = time_get(node.http, "/metrics", 1)
        with urllib.request.urlopen(f"http://{node.http}/metrics") as resp:
            samples = sum(1 for line in resp.read().splitlines() if not line.startswith(b"#"))
        print(f"/metrics samples: {samples:,}; RSS after scrapes {rss_mib(node.proc.pid):.1f} MiB")
        # the statsd formatting of one push, timed in this process on the node's own /stats
        from nsqpy.nsqd.stats.statsd import index_topics, pack_datagrams, stat_lines

        with urllib.request.urlopen(f"http://{node.http}/stats?format=json&include_clients=false",
                                    timeout=30) as resp:
            topics = json.loads(resp.read())["topics"]
        t0 = time.perf_counter()
        lines = stat_lines("nsq.host_4151.", topics, index_topics(topics), False)
        datagrams = pack_datagrams(lines, 508)
        print(f"statsd formatting of one push: {(time.perf_counter() - t0) * 1000:.1f} ms "
              f"({len(lines):,} lines, {len(datagrams):,} datagrams)")
        # a whole statsd push begun after the scrapes (the node no longer changing)
        mark = time.monotonic()
        deadline = mark + 4 * interval
        found = None
        while found is None and time.monotonic() < deadline:
            time.sleep(0.5)
            found = next(((first, p) for first, p in sink.pushes("mem.gc_runs") if first > mark), None)
        if found is not None:
            first, push = found
            arrivals = [when for when, _ in sink.received if when >= first][:len(push)]
            lines = sum(d.count(b"\n") for d in push)
            print(f"statsd push: {len(push):,} datagrams, {lines:,} lines, "
                  f"{sum(len(d) for d in push):,} bytes, spread over "
                  f"{arrivals[-1] - arrivals[0]:.1f}s of the {interval}s interval")
    finally:
        node.stop()
        sink.close()


def _scraper(addr: str, stop: threading.Event, counter: list[int]) -> None:
    while not stop.wait(1.0):
        try:
            urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read()
            counter[0] += 1
        except OSError:
            pass


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process: its CPU use, which other load on the machine disturbs far
    less than wall-clock rates."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_rate_run(args, on: bool) -> tuple[float, float, float]:
    sink = StatsdReceiver() if on else None
    flags = [f"--mem-queue-size={args.mem_queue_size}"]
    flags += ([f"--statsd-address={sink.address}", "--statsd-interval=1s"] if sink
              else ["--metrics=false"])
    node = Nsqd(args.nsqd_bin, *flags)
    stop, scrapes = threading.Event(), [0]
    scraper = threading.Thread(target=_scraper, args=(node.http, stop, scrapes), daemon=True)
    if on:
        scraper.start()
    try:
        q: mp.Queue = mp.Queue()
        topic = f"rate_{int(time.time() * 1000)}"
        create_channel(node.tcp, topic)
        cpu0 = cpu_seconds(node.proc.pid)
        n, secs = run_pub(node.tcp, topic, args.messages, 2, q)
        pub = n / secs
        n, secs = run_sub(node.tcp, topic, n, 2, q)
        sub = n / secs
        cpu_us = (cpu_seconds(node.proc.pid) - cpu0) / n * 1e6
    finally:
        stop.set()
        if on:
            scraper.join()
        node.stop()
        if sink is not None:
            sink.close()
    extra = f" ({scrapes[0]} scrapes, {len(sink.received)} statsd datagrams)" if sink else ""
    print(f"  {'on ' if on else 'off'}: publish {pub:>10,.0f} msgs/s  consume {sub:>10,.0f} msgs/s"
          f"  nsqd CPU {cpu_us:.2f} us/msg{extra}")
    return pub, sub, cpu_us


def bench_rate(args) -> None:
    results: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for r in range(args.rounds):
        print(f"round {r + 1}")
        for on in ((False, True) if r % 2 == 0 else (True, False)):
            results[on].append(one_rate_run(args, on))
    for i, what in enumerate(("publish", "consume")):
        off = statistics.median(x[i] for x in results[False])
        on = statistics.median(x[i] for x in results[True])
        print(f"{what:<8} median off {off:,.0f}  on {on:,.0f} msgs/s  cost {100 * (off - on) / off:+.1f}%")
    off = statistics.median(x[2] for x in results[False])
    on = statistics.median(x[2] for x in results[True])
    print(f"nsqd CPU per message (publish + consume), median: off {off:.2f} us  on {on:.2f} us  "
          f"cost {100 * (on - off) / off:+.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--channels", type=int, default=10)
    ap.add_argument("--scrapes", type=int, default=10)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mem-queue-size", type=int, default=1_000_000)
    ap.add_argument("--nsqd-bin", default=os.path.join(os.path.dirname(sys.executable), "nsqd"))
    ap.add_argument("--only", default="scrape,rate")
    args = ap.parse_args()
    print(f"# metrics bench {time.strftime('%Y-%m-%d %H:%M')} host={socket.gethostname()} "
          f"cpus={os.cpu_count()}")
    only = set(args.only.split(","))
    if "scrape" in only:
        bench_scrape(args)
    if "rate" in only:
        bench_rate(args)


if __name__ == "__main__":
    main()
