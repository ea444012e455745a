"""Publish throughput and publish (PUB -> OK) latency with replication off, async and sync.

For each mode a fresh peer (``--accept-replicas``) and origin (``--replicate-to`` the peer, or
no flag for "off") are started on loopback; the load is upstream bench_writer's shape:

* throughput: 2 connections of pipelined ``MPUB`` 200 x 200 B (8 batches in flight each);
* latency: ``PUB`` paced at 10,000 msgs/s for 5 s on one connection; each OK is matched to its
  PUB (answers come in order), so this is what a publisher waits, replication included.

    python bench/replication_bench.py                     # off, async, sync
    python bench/replication_bench.py --modes sync --extra "--sync-every=1"
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nsqd_bench import I32, MSG_SIZE, _connect, create_channel, run_pub  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nsqd(binary: str, tmp: str, name: str, *extra: str) -> tuple[subprocess.Popen, str, str]:
    tcp, http = f"127.0.0.1:{_port()}", f"127.0.0.1:{_port()}"
    path = os.path.join(tmp, name)
    os.makedirs(path)
    proc = subprocess.Popen([binary, f"--tcp-address={tcp}", f"--http-address={http}",
                             f"--data-path={path}", "--log-level=warn", *extra])
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://{http}/ping", timeout=0.5)
            break
        except OSError:
            time.sleep(0.1)
    return proc, tcp, http


def cpu_seconds(proc: subprocess.Popen) -> float:
    """user+system CPU time of a process: a cost per message that survives a busy machine."""
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def paced_pub_latency(addr: str, topic: str, rate: int, seconds: float, result: mp.Queue) -> None:
    """PUB at ``rate``; the latency of each is the time until its OK."""
    s = _connect(addr)
    per_tick = max(1, rate // 1000)
    total = int(rate * seconds)
    sent_at: deque[float] = deque()
    lat: list[float] = []
    buf = b""
    sent = 0
    start = time.perf_counter()
    s.setblocking(False)
    while sent < total or sent_at:
        now = time.perf_counter()
        if sent < total and now >= start + sent / per_tick * 0.001:
            body = b"x" * MSG_SIZE
            s.sendall(b"".join(b"PUB " + topic.encode() + b"\n" + I32.pack(len(body)) + body
                               for _ in range(per_tick)))
            sent_at.extend([now] * per_tick)
            sent += per_tick
        try:
            data = s.recv(65536)
        except BlockingIOError:
            time.sleep(0.0002)
            if time.perf_counter() - start > seconds + 30:
                break
            continue
        if not data:
            break
        buf += data
        t = time.perf_counter()
        while len(buf) >= 8:
            size = I32.unpack_from(buf, 0)[0]
            if len(buf) < 4 + size:
                break
            frame = buf[8:4 + size]
            buf = buf[4 + size:]
            if frame == b"OK" and sent_at:
                lat.append(t - sent_at.popleft())
    result.put((sent, time.perf_counter() - start, lat))
    s.close()


def run_mode(mode: str, args, tmp: str) -> None:
    peer = origin = None
    try:
        peer, peer_tcp, _ = start_nsqd(args.nsqd_bin, tmp, f"peer_{mode}", "--accept-replicas",
                                       *args.extra.split())
        flags = [] if mode == "off" else [f"--replicate-to={peer_tcp}",
                                          f"--replication-ack={mode}"]
        origin, tcp, http = start_nsqd(args.nsqd_bin, tmp, f"origin_{mode}",
                                       "--mem-queue-size=1000000", *flags, *args.extra.split())
        time.sleep(1.5)  # the link comes up
        topic = f"rbench_{mode}_{int(time.time())}"
        create_channel(tcp, topic)
        q: mp.Queue = mp.Queue()
        cpu0 = cpu_seconds(origin), cpu_seconds(peer)
        n, secs = run_pub(tcp, topic, args.messages, 2, q)
        time.sleep(0.5 if mode == "async" else 0.0)  # the peer catches up
        cpu = [(cpu_seconds(p) - c) / n * 1e6 for p, c in zip((origin, peer), cpu0)]
        print(f"{mode:<6} publish (MPUB 200x200B, 2 conns)  {n / secs:>10,.0f} msgs/s   CPU per "
              f"message: origin {cpu[0]:.2f} us, peer {cpu[1]:.2f} us")
        lat_topic = topic + "_lat"
        create_channel(tcp, lat_topic)
        p = mp.Process(target=paced_pub_latency, args=(tcp, lat_topic, args.rate, 5.0, q))
        p.start()
        sent, secs, lat = q.get()
        p.join()
        lat.sort()
        if lat:
            pct = lambda f: lat[min(len(lat) - 1, int(len(lat) * f))] * 1000  # noqa: E731
            print(f"{mode:<6} PUB->OK at {args.rate}/s: p50 {pct(0.5):.2f} ms  p99 {pct(0.99):.2f} "
                  f"ms  max {lat[-1] * 1000:.1f} ms  (n={len(lat)} of {sent})")
        if mode != "off":
            with urllib.request.urlopen(f"http://{http}/stats?format=json") as resp:
                import json
                rep = json.loads(resp.read())["replication"]
            print(f"{mode:<6} link {rep['state']}, shipped {rep['shipped_messages']}, "
                  f"degraded {rep['degraded_messages']}")
    finally:
        for proc in (origin, peer):
            if proc is not None:
                proc.terminate()
                proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--modes", default="off,async,sync")
    ap.add_argument("--nsqd-bin", default=os.path.join(os.path.dirname(sys.executable), "nsqd"))
    ap.add_argument("--extra", default="", help="extra flags for both nsqd")
    args = ap.parse_args()
    print(f"# replication bench {time.strftime('%Y-%m-%d %H:%M')} cpus={os.cpu_count()} "
          f"messages={args.messages} {args.extra}")
    tmp = tempfile.mkdtemp(prefix="nsqrbench")
    try:
        for mode in args.modes.split(","):
            run_mode(mode, args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
