"""Cost of nsqd's opt-in lifecycle controls (issue #13): publish and consume rates, off vs on.

Same load as nsqd_bench.py (upstream's bench_writer/bench_reader shape: 200-byte messages, MPUB
batches of 200, RDY 2500, one FIN per message, 2 connections each). Every round starts a fresh
nsqd per configuration, in rotating order, so machine noise spreads over all of them; the
report is the median per configuration and its difference to "off".

    python bench/lifecycle_bench.py                       # 200k messages, 3 rounds
    python bench/lifecycle_bench.py --messages 1000000 --rounds 5 --mem-queue-size 10000
    python bench/lifecycle_bench.py --micro               # CPU cost of the hooks, in-process

On a shared, loaded machine the end-to-end rates swing by tens of percent between runs; the
``--micro`` mode measures only nsqd's own work per message (Topic.put_many -> Channel delivery
-> FIN, best of many repeats, no sockets) and is the stable way to see a few-percent cost.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nsqd_bench import create_channel, run_pub, run_sub  # noqa: E402

CONFIGS = {
    "off": [],
    "max-attempts": ["--max-attempts=5"],
    "msg-ttl": ["--msg-ttl=1h"],
    "bounded reject": ["--max-disk-bytes=10000000000", "--disk-full-policy=reject"],
    "bounded drop-oldest": ["--max-disk-bytes=10000000000", "--disk-full-policy=drop-oldest"],
    "all": ["--max-attempts=5", "--msg-ttl=1h", "--max-disk-bytes=10000000000",
            "--requeue-on-disconnect"],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(nsqd_bin: str, flags: list[str], messages: int, mem: int, conns: int) -> tuple:
    tmp = tempfile.mkdtemp(prefix="nsqlcbench")
    tcp, http = f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"
    proc = subprocess.Popen([nsqd_bin, f"--tcp-address={tcp}", f"--http-address={http}",
                             f"--data-path={tmp}", f"--mem-queue-size={mem}", "--log-level=warn",
                             *flags])
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://{http}/ping", timeout=0.5)
                break
            except OSError:
                time.sleep(0.1)
        q: mp.Queue = mp.Queue()
        topic = f"lc_{int(time.time() * 1000)}"
        create_channel(tcp, topic)
        n, pub_secs = run_pub(tcp, topic, messages, conns, q)
        got, sub_secs = run_sub(tcp, topic, n, conns, q)
        assert got == n, (got, n)
        return n / pub_secs, got / sub_secs
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


class _Consumer:
    """Just what Channel's delivery path touches on a connection (bench only, no socket)."""

    def __init__(self) -> None:
        self.writable = True
        self.ready_count = 10**9
        self.in_flight: dict = {}
        self.out: list = []
        self.msg_timeout = 60.0
        self.sample_rate = 0
        self.message_count = self.finish_count = self.requeue_count = 0

    def schedule_flush(self) -> None:
        self.out.clear()


def micro(flags: list[str], batches: int, repeats: int) -> float:
    """Best ns per message for publish (MPUB of 200) + delivery + FIN, in-process."""
    import asyncio
    import logging

    from nsqpy.nsqd.lifecycle.controls import install
    from nsqpy.nsqd.main import parse_options
    from nsqpy.nsqd.nsqd import NSQD

    tmp = tempfile.mkdtemp(prefix="nsqlcmicro")
    asyncio.set_event_loop(asyncio.new_event_loop())
    try:
        nsqd = NSQD(parse_options([f"--data-path={tmp}", *flags]), logging.getLogger("bench"))
        install(nsqd)  # the lifecycle controls, as the nsqd server installs them
        topic = nsqd.get_topic("t")
        channel = topic.get_channel("c")
        client = _Consumer()
        channel.add_client(client)
        ids = nsqd.id_factory
        body = b"x" * 200
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            for _ in range(batches):
                now = time.time_ns()
                topic.put_many([(mid, body, now, 0) for mid in ids.next_ids(200)], 200 * 200)
                for mid in list(client.in_flight):
                    channel.finish(client, mid)
            best = min(best, (time.perf_counter_ns() - t0) / (batches * 200))
        return best
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main_micro(names: list[str], rounds: int) -> None:
    print(f"# lifecycle micro bench {time.strftime('%Y-%m-%d %H:%M')}: ns per message for "
          "MPUB(200) -> deliver -> FIN, in-process, best of 20 x 50 batches per round")
    results: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            results[name].append(micro(CONFIGS[name], 50, 20))
    base = min(results["off"]) if "off" in results else None
    for name in names:
        best = min(results[name])
        diff = f"{(best / base - 1) * 100:+.1f}%" if base else ""
        print(f"{name:<22} {best:8.0f} ns/msg {diff:>7}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mem-queue-size", type=int, default=1_000_000)
    ap.add_argument("--conns", type=int, default=2)
    ap.add_argument("--only", default=",".join(CONFIGS), help="comma-separated configurations")
    ap.add_argument("--nsqd-bin", default=os.path.join(os.path.dirname(sys.executable), "nsqd"))
    ap.add_argument("--micro", action="store_true", help="in-process CPU cost per message")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    if args.micro:
        main_micro(names, args.rounds)
        return
    print(f"# lifecycle bench {time.strftime('%Y-%m-%d %H:%M')} cpus={os.cpu_count()} "
          f"messages={args.messages} rounds={args.rounds} mem-queue-size={args.mem_queue_size}",
          flush=True)
    rates: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            rates[name].append(one_run(args.nsqd_bin, CONFIGS[name], args.messages,
                                       args.mem_queue_size, args.conns))
            pub, sub = rates[name][-1]
            print(f"  round {r + 1} {name:<20} publish {pub:>10,.0f}/s  consume {sub:>10,.0f}/s",
                  flush=True)
    base = None
    print(f"{'configuration':<22} {'publish msgs/s':>15} {'vs off':>7} {'consume msgs/s':>15} "
          f"{'vs off':>7}")
    for name in names:
        pub = statistics.median(p for p, _ in rates[name])
        sub = statistics.median(s for _, s in rates[name])
        if name == "off":
            base = (pub, sub)
        dp = f"{(pub / base[0] - 1) * 100:+.1f}%" if base else ""
        ds = f"{(sub / base[1] - 1) * 100:+.1f}%" if base else ""
        print(f"{name:<22} {pub:>15,.0f} {dp:>7} {sub:>15,.0f} {ds:>7}")


if __name__ == "__main__":
    main()
