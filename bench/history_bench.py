"""History (docs/history.md): what keeping every message costs, and how fast a rewind replays.

Every measurement starts fresh nsqd processes on loopback and runs the two sides in turns within
one run (off, on, off, on...), so a busy machine hits both alike; ratios are what to read.

* publish: upstream bench_writer's shape (2 connections of pipelined MPUB 200 x 200 B) to a topic
  with one channel, retention off vs ``--retention=1h``, in memory mode (``--mem-queue-size``
  holding everything) and disk mode (``--mem-queue-size=0``); then the channel is consumed
  (2 connections, RDY 2500, FIN each): consume speed with and without history. Each run prints
  nsqd's CPU per message, all its threads and the event loop's thread alone (what a publish
  costs the core that answers it, and what other threads took beside it). ``--before-bin``
  adds another nsqd (an earlier commit's: a script that runs it from a checkout) as two more
  sides, retention off and on, alternating with the others round by round, so that a change
  is measured before/after in one run.
* rss: an nsqd whose topic has no channel and ``--mem-queue-size=0``, fed N messages of 200 B
  (the topic's own queue emptied every 100k, so only the history grows), retention off vs on;
  then the history's nsqd restarted on its N-message log.
* rewind: per round, N messages published to a topic whose channel ``normal`` is consumed as
  usual (a topic per round), and a channel created ``from=earliest`` consumed the same way
  (the replay), the two taking turns going first; nsqd's CPU per message too;
  then the time from a ``/channel/rewind?to=earliest`` to the first MSG on a connected consumer.
* spark: ``spark.read.format("nsq")`` of 1M retained messages on local[2] into Parquet against
  the partitioned ceiling with the same rows and partitions (bench/spark_history_bench.py), and
  the partitions planned for a topic of one large segment.
* expiry: 1,000 topics with ``--retention=10s`` (a segment rolls every 1.25 s of each, and one
  expires as often) fed all the time, while PUB latency is measured on another topic at 2,000
  msgs/s after a warm-up of 15 s; retention off vs on.

    python bench/history_bench.py                          # everything, 300k messages per run
    python bench/history_bench.py --only rss --rss-messages 10000000
    python bench/history_bench.py --only rewind,spark     # issue #44's read rows
    python bench/history_bench.py --only publish --rounds 3 --before-bin /tmp/before/nsqd
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nsqd_bench import I32, MSG_SIZE, _connect, create_channel, rss_mib, run_pub, run_sub  # noqa: E402
from replication_bench import cpu_seconds, paced_pub_latency, start_nsqd  # noqa: E402


def post(http: str, path: str, body: bytes = b"") -> bytes:
    req = urllib.request.Request(f"http://{http}{path}", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read()


def stop(proc) -> None:
    proc.terminate()
    proc.wait(60)


def history_of(http: str, topic: str) -> dict:
    with urllib.request.urlopen(f"http://{http}/stats?format=json&topic={topic}") as r:
        return json.load(r)["topics"][0].get("history") or {}


def loop_cpu_seconds(proc) -> float:
    """user+system CPU time of nsqd's main thread, the one running the event loop."""
    with open(f"/proc/{proc.pid}/task/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def publish_sides(args) -> list[tuple[str, str, list[str]]]:
    """(name, nsqd, extra flags): retention off and on, and the same for ``--before-bin``."""
    sides = [("off", args.nsqd_bin, []), ("on", args.nsqd_bin, ["--retention=1h"])]
    if args.before_bin:
        sides += [("before-off", args.before_bin, []),
                  ("before-on", args.before_bin, ["--retention=1h"])]
    return sides


def bench_publish(args, tmp: str) -> None:
    print("## publish and consume (MPUB 200 x 200 B, 2 conns; consume 2 conns, RDY 2500)")
    results: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    sides = publish_sides(args)
    for rnd in range(args.rounds):
        for mode, mem in (("memory", str(args.messages + 1000)), ("disk", "0")):
            for side, binary, extra in (sides if rnd % 2 == 0 else sides[::-1]):
                proc, tcp, _ = start_nsqd(binary, tmp, f"pub_{mode}_{side}_{rnd}",
                                          f"--mem-queue-size={mem}", *extra)
                try:
                    topic = "hbench"
                    create_channel(tcp, topic)
                    q: mp.Queue = mp.Queue()
                    cpu0, loop0 = cpu_seconds(proc), loop_cpu_seconds(proc)
                    n, secs = run_pub(tcp, topic, args.messages, 2, q)
                    cpu1, loop1 = cpu_seconds(proc), loop_cpu_seconds(proc)
                    m, csecs = run_sub(tcp, topic, n, 2, q)
                    cpu2 = cpu_seconds(proc)
                    row = (n / secs, m / csecs, (cpu1 - cpu0) / n * 1e6, (cpu2 - cpu1) / m * 1e6,
                           (loop1 - loop0) / n * 1e6)
                    results.setdefault((mode, side), []).append(row)
                    print(f"  round {rnd} {mode:<6} {side:<10} pub {row[0]:>10,.0f} msgs/s"
                          f" ({row[2]:.2f} us CPU/msg, loop {row[4]:.2f})   sub {row[1]:>10,.0f}"
                          f" msgs/s ({row[3]:.2f} us CPU/msg)  load {os.getloadavg()[0]:.1f}",
                          flush=True)
                finally:
                    stop(proc)
    for mode in ("memory", "disk"):
        for prefix in ("", "before-") if args.before_bin else ("",):
            off, on = results[(mode, prefix + "off")], results[(mode, prefix + "on")]
            ratio = [sum(r[i] for r in on) / sum(r[i] for r in off) for i in range(5)]
            best = [max(r[i] for r in on) / max(r[i] for r in off) for i in range(2)]
            print(f"{prefix}{mode:<6}: publish on/off {ratio[0]:.2f}x (best runs {best[0]:.2f}x), "
                  f"consume on/off {ratio[1]:.2f}x (best runs {best[1]:.2f}x); nsqd CPU per "
                  f"message on/off: publish {ratio[2]:.2f}x (the loop's thread {ratio[4]:.2f}x), "
                  f"consume {ratio[3]:.2f}x")
        if args.before_bin:
            now, before = results[(mode, "on")], results[(mode, "before-on")]
            med = [median(r[i] for r in now) / median(r[i] for r in before) for i in (0, 2, 4)]
            print(f"{mode:<6}: retention on, now/before (medians): publish {med[0]:.2f}x, "
                  f"nsqd CPU per message {med[1]:.2f}x, the loop's thread {med[2]:.2f}x")


def _feed(tcp: str, http: str, topic: str, total: int) -> None:
    q: mp.Queue = mp.Queue()
    done = 0
    while done < total:
        step = min(100_000, total - done)
        n, _ = run_pub(tcp, topic, step, 2, q)
        done += n
        post(http, f"/topic/empty?topic={topic}")


def bench_rss(args, tmp: str) -> None:
    n = args.rss_messages
    print(f"## RSS with {n:,} retained 200 B messages (topic without channel, --mem-queue-size=0)")
    rss = {}
    for side in ("off", "on"):
        flags = ["--mem-queue-size=0"] + (["--retention=1000h"] if side == "on" else [])
        proc, tcp, http = start_nsqd(args.nsqd_bin, tmp, f"rss_{side}", *flags)
        try:
            _feed(tcp, http, "rss", 100_000)
            time.sleep(1)
            first = rss_mib(proc.pid)
            t0 = time.perf_counter()
            _feed(tcp, http, "rss", n - 100_000)
            secs = time.perf_counter() - t0
            time.sleep(1)
            rss[side] = (first, rss_mib(proc.pid))
            hist = history_of(http, "rss") if side == "on" else {}
            print(f"  retention {side:<3}: RSS {first:7.1f} MiB after 100k, {rss[side][1]:7.1f} MiB "
                  f"after {n:,} ({(n - 100_000) / secs:,.0f} msgs/s)"
                  + (f"; history {hist.get('messages', 0):,} messages, "
                     f"{hist.get('bytes', 0) / 2**20:,.0f} MiB in {hist.get('segments')} segments"
                     if hist else ""), flush=True)
        finally:
            stop(proc)
        if side == "on":
            path = os.path.join(tmp, f"rss_{side}")
            proc, tcp, http = _restart(args, path)
            try:
                time.sleep(1)
                print(f"  retention on, restarted on the log: RSS {rss_mib(proc.pid):7.1f} MiB, "
                      f"{history_of(http, 'rss').get('messages', 0):,} messages", flush=True)
            finally:
                stop(proc)
    grow_on = rss["on"][1] - rss["on"][0]
    grow_off = rss["off"][1] - rss["off"][0]
    print(f"RSS: on {rss['on'][1]:.1f} MiB vs off {rss['off'][1]:.1f} MiB "
          f"({rss['on'][1] - rss['off'][1]:+.1f} MiB); growth from 100k to {n:,}: "
          f"on {grow_on:+.1f} MiB, off {grow_off:+.1f} MiB")


def _restart(args, path: str):
    import subprocess

    def port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    tcp, http = f"127.0.0.1:{port()}", f"127.0.0.1:{port()}"
    proc = subprocess.Popen([args.nsqd_bin, f"--tcp-address={tcp}", f"--http-address={http}",
                             f"--data-path={path}", "--log-level=warn", "--mem-queue-size=0",
                             "--retention=1000h"])
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://{http}/ping", timeout=0.5)
            break
        except OSError:
            time.sleep(0.1)
    return proc, tcp, http


def bench_rewind(args, tmp: str) -> None:
    n = args.rewind_messages
    print(f"## rewind of {n:,} messages (consume: 1 conn, RDY 2500, FIN each)")
    proc, tcp, http = start_nsqd(args.nsqd_bin, tmp, "rewind", f"--mem-queue-size={n + 1000}",
                                 "--retention=1h")
    try:
        q: mp.Queue = mp.Queue()
        rates: dict[str, list[float]] = {}
        cpus: dict[str, list[float]] = {}
        for rnd in range(args.rounds):
            topic = f"rewind{rnd}"
            create_channel(tcp, topic, f"normal{rnd}")
            run_pub(tcp, topic, n, 2, q)
            post(http, f"/channel/create?topic={topic}&channel=replay{rnd}&from=earliest")
            # the two take turns going first (a shared machine's load drifts)
            for kind in (("normal", "replay") if rnd % 2 == 0 else ("replay", "normal")):
                cpu0 = cpu_seconds(proc)
                got, secs = run_sub(tcp, topic, n, 1, q, channel=f"{kind}{rnd}")
                assert got == n, (kind, got)
                rates.setdefault(kind, []).append(got / secs)
                cpus.setdefault(kind, []).append((cpu_seconds(proc) - cpu0) / got * 1e6)
            print(f"  round {rnd}: normal {rates['normal'][-1]:>10,.0f} msgs/s (nsqd "
                  f"{cpus['normal'][-1]:.2f} us CPU/msg), replay {rates['replay'][-1]:>10,.0f} msgs/s "
                  f"({cpus['replay'][-1]:.2f} us CPU/msg)", flush=True)
            for name in (f"normal{rnd}", f"replay{rnd}"):
                post(http, f"/channel/delete?topic={topic}&channel={name}")
        firsts = [_first_message_after_rewind(tcp, http, topic) for _ in range(5)]
        ratio = sum(rates["replay"]) / sum(rates["normal"])
        best = max(rates["replay"]) / max(rates["normal"])
        mid = median(rates["replay"]) / median(rates["normal"])
        cpu = sum(cpus["replay"]) / sum(cpus["normal"])
        print(f"replay/normal consume {ratio:.2f}x (best runs {best:.2f}x, medians {mid:.2f}x; goal "
              f">= 0.9x), nsqd CPU per message replay/normal {cpu:.2f}x; first message after a "
              f"rewind of {n:,}: "
              f"{', '.join(f'{f * 1000:.1f}' for f in firsts)} ms")
    finally:
        stop(proc)


def _first_message_after_rewind(tcp: str, http: str, topic: str) -> float:
    s = _connect(tcp)
    s.sendall(b"SUB %s first\nRDY 1\n" % topic.encode())
    s.recv(64)  # OK
    time.sleep(0.2)
    t0 = time.perf_counter()
    post(http, f"/channel/rewind?topic={topic}&channel=first&to=earliest")
    buf = b""
    while True:
        buf += s.recv(65536)
        while len(buf) >= 8:
            size, ftype = I32.unpack_from(buf, 0)[0], I32.unpack_from(buf, 4)[0]
            if len(buf) < 4 + size:
                break
            if ftype == 2:
                elapsed = time.perf_counter() - t0
                s.close()
                post(http, f"/channel/delete?topic={topic}&channel=first")
                return elapsed
            buf = buf[4 + size:]


def bench_spark(args, tmp: str) -> None:
    """The batch read against its ceiling (bench/spark_history_bench.py: the same rows, the same
    partitions, alternating), and how a topic with a single large segment is planned."""
    from pathlib import Path

    import spark_history_bench as shb

    n = args.spark_messages
    print(f"## Spark batch read of {n:,} retained {MSG_SIZE} B messages (local[2], into Parquet) "
          "vs the partitioned ceiling")
    work = Path(tempfile.mkdtemp(dir=tmp))
    (work / "nsqd").mkdir()
    proc, addr, http = shb.start_nsqd(work / "nsqd")
    spark = None
    try:
        shb.prefill(addr, "spark_read", n, MSG_SIZE)
        shb.prefill(addr, "one_segment", 250_000, MSG_SIZE)
        spark = shb.spark_session()
        parts, hist, ceil = shb.history_vs_ceiling(spark, http, "spark_read", n, MSG_SIZE, {},
                                                   args.rounds, work)
        print(f"  {len(shb.segments(http, 'spark_read'))} segments, {parts} partitions (planned by "
              f"bytes): history {', '.join(f'{r:,.0f}' for r in hist)} rows/s, ceiling "
              f"{', '.join(f'{r:,.0f}' for r in ceil)} rows/s", flush=True)
        one = shb.segments(http, "one_segment")
        planned = (spark.read.format("nsq").option("nsqd_http_addresses", http)
                   .option("topic", "one_segment").load().rdd.getNumPartitions())
        print(f"batch read/ceiling {max(hist) / max(ceil):.2f}x best/best, "
              f"{median(hist) / median(ceil):.2f}x median/median (goal >= 0.9x); a topic of one "
              f"{one[0]['bytes'] / 2**20:.0f} MiB segment: {planned} partitions on "
              f"{spark.sparkContext.defaultParallelism} cores (goal >= 1 per core)")
    finally:
        if spark is not None:
            spark.stop()
        stop(proc)


def bench_expiry(args, tmp: str) -> None:
    print(f"## PUB latency (2,000 msgs/s, 10 s) while 1,000 topics are fed and expire "
          f"(--retention={args.expiry_retention})")
    for side in ("off", "on"):
        flags = [f"--retention={args.expiry_retention}"] if side == "on" else []
        proc, tcp, http = start_nsqd(args.nsqd_bin, tmp, f"expiry_{side}", *flags)
        stop_feed = threading.Event()
        try:
            feeder = threading.Thread(target=_feed_topics, args=(tcp, 1000, stop_feed))
            feeder.start()
            time.sleep(args.expiry_warmup)  # every topic has segments, the oldest expiring
            q: mp.Queue = mp.Queue()
            p = mp.Process(target=paced_pub_latency, args=(tcp, "latency", 2000, 10.0, q))
            p.start()
            sent, _, lat = q.get()
            p.join()
            stop_feed.set()
            feeder.join()
            lat.sort()
            hist = history_of(http, "t0") if side == "on" else {}
            print(f"  retention {side:<3}: {sent:,} PUBs, p50 {lat[len(lat) // 2] * 1e3:.2f} ms, "
                  f"p99 {lat[int(len(lat) * .99)] * 1e3:.2f} ms, p99.9 "
                  f"{lat[int(len(lat) * .999)] * 1e3:.2f} ms, max {lat[-1] * 1e3:.2f} ms"
                  + (f"; topic t0 keeps {hist.get('messages', 0)} messages in "
                     f"{hist.get('segments')} segments" if hist else ""), flush=True)
        finally:
            stop_feed.set()
            stop(proc)


def _feed_topics(tcp: str, topics: int, stop_event: threading.Event) -> None:
    """MPUB 10 x 200 B to each topic in turn, about 20,000 messages/s in all."""
    s = _connect(tcp)
    body = b"x" * MSG_SIZE
    payload = I32.pack(10) + (I32.pack(MSG_SIZE) + body) * 10
    cmds = [b"MPUB t%d\n" % i + I32.pack(len(payload)) + payload for i in range(topics)]
    i = 0
    s.settimeout(10)
    while not stop_event.is_set():
        t0 = time.perf_counter()
        s.sendall(b"".join(cmds[(i + k) % topics] for k in range(20)))
        got = 0
        buf = b""
        while got < 20:
            buf += s.recv(65536)
            while len(buf) >= 4 and len(buf) >= 4 + I32.unpack_from(buf, 0)[0]:
                buf = buf[4 + I32.unpack_from(buf, 0)[0]:]
                got += 1
        i += 20
        time.sleep(max(0.0, 0.01 - (time.perf_counter() - t0)))
    s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rss-messages", type=int, default=2_000_000)
    ap.add_argument("--rewind-messages", type=int, default=1_000_000)
    ap.add_argument("--spark-messages", type=int, default=1_000_000)
    ap.add_argument("--nsqd-bin", default=os.path.join(os.path.dirname(sys.executable), "nsqd"))
    ap.add_argument("--before-bin", default="",
                    help="another nsqd (an earlier commit's) run as two sides of the publish row")
    ap.add_argument("--expiry-retention", default="10s")
    ap.add_argument("--expiry-warmup", type=float, default=15.0)
    ap.add_argument("--only", default="publish,rss,rewind,spark,expiry")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="history_bench_")
    try:
        for part in args.only.split(","):
            {"publish": bench_publish, "rss": bench_rss, "rewind": bench_rewind,
             "spark": bench_spark, "expiry": bench_expiry}[part](args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
