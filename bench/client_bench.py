"""Client throughput: nsqpy.client against pynsq (tornado), same nsqd, same run.

Scenarios (200-byte messages by default):

* ``mpub``  — MPUB batches of ``--batch``, ``--window`` batches awaiting their OK at once;
* ``pub``   — single PUBs pipelined on one connection, ``--window`` awaiting their OK at once;
* ``sub``   — consume a pre-filled topic with RDY ``--rdy`` and one FIN per message
  (nsqpy both with an ``async def`` handler on worker coroutines and with a plain function).

Each client runs in its own subprocess, one at a time, against one nsqd (started here with a
memory queue big enough that no message touches disk, unless ``--nsqd-tcp-address`` is given).
Figures on a shared 2-vCPU box move a lot between runs: compare columns of the same run.

    python bench/client_bench.py
    python bench/client_bench.py --messages 500000 --uvloop
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# --- workers (run in a subprocess, print one JSON line) ------------------------------------


def _nsqpy_loop(use_uvloop: bool):
    import asyncio

    if use_uvloop:
        import uvloop

        return uvloop.run
    return asyncio.run


def nsqpy_pub(args: argparse.Namespace) -> dict:
    import asyncio

    from nsqpy.client import Producer

    body = b"x" * args.size
    n, window = args.messages, args.window

    async def main() -> float:
        async with Producer(args.addr) as p:
            per_worker = n // window

            async def worker() -> None:
                pub, topic = p.pub, args.topic
                for _ in range(per_worker):
                    await pub(topic, body)

            t0, c0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(worker() for _ in range(window)))
            return time.perf_counter() - t0, time.process_time() - c0

    secs, cpu = _nsqpy_loop(args.uvloop)(main())
    return {"msgs": (n // window) * window, "secs": secs, "cpu": cpu}


def nsqpy_mpub(args: argparse.Namespace) -> dict:
    import asyncio

    from nsqpy.client import Producer

    batch = [b"x" * args.size] * args.batch
    batches = args.messages // args.batch
    window = min(args.window, batches)

    async def main() -> float:
        async with Producer(args.addr) as p:
            async def worker(count: int) -> None:
                for _ in range(count):
                    await p.mpub(args.topic, batch)

            share = [batches // window + (1 if i < batches % window else 0) for i in range(window)]
            t0, c0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(worker(c) for c in share))
            return time.perf_counter() - t0, time.process_time() - c0

    secs, cpu = _nsqpy_loop(args.uvloop)(main())
    return {"msgs": batches * args.batch, "secs": secs, "cpu": cpu}


def nsqpy_sub(args: argparse.Namespace, async_handler: bool) -> dict:
    import asyncio

    from nsqpy.client import Consumer

    n = args.messages
    state = {"count": 0, "t0": 0.0, "t1": 0.0, "c0": 0.0, "c1": 0.0}

    async def main() -> None:
        done = asyncio.Event()

        def count(_msg) -> None:
            c = state["count"] = state["count"] + 1
            if c == 1:
                state["t0"], state["c0"] = time.perf_counter(), time.process_time()
            elif c == n:
                state["t1"], state["c1"] = time.perf_counter(), time.process_time()
                done.set()

        async def async_count(msg) -> None:
            count(msg)

        handler = async_count if async_handler else count
        async with Consumer(
            args.topic, args.channel, handler, nsqd_tcp_addresses=[args.addr],
            max_in_flight=args.rdy, concurrency=min(args.rdy, 256),
        ):
            await done.wait()

    _nsqpy_loop(args.uvloop)(main())
    return {"msgs": n - 1, "secs": state["t1"] - state["t0"], "cpu": state["c1"] - state["c0"]}


def pynsq_pub(args: argparse.Namespace, batch: int) -> dict:
    import nsq
    import tornado.ioloop

    body = b"x" * args.size
    bodies = [body] * batch
    total = args.messages // batch
    window = min(args.window, total)
    state = {"sent": 0, "acked": 0, "t0": 0.0, "t1": 0.0, "c0": 0.0, "c1": 0.0}
    loop = tornado.ioloop.IOLoop.current()
    writer = nsq.Writer([args.addr])

    def send_one() -> None:
        state["sent"] += 1
        if batch == 1:
            writer.pub(args.topic, body, callback=done)
        else:
            writer.mpub(args.topic, bodies, callback=done)

    def done(conn, data) -> None:
        if isinstance(data, Exception):
            raise SystemExit(f"pynsq publish failed: {data!r}")
        state["acked"] += 1
        if state["acked"] == total:
            state["t1"], state["c1"] = time.perf_counter(), time.process_time()
            loop.stop()
        elif state["sent"] < total:
            send_one()

    def start() -> None:
        if not writer.conns:
            loop.call_later(0.05, start)
            return
        state["t0"], state["c0"] = time.perf_counter(), time.process_time()
        for _ in range(window):
            send_one()

    loop.call_later(0.05, start)
    loop.start()
    return {"msgs": total * batch, "secs": state["t1"] - state["t0"], "cpu": state["c1"] - state["c0"]}


def pynsq_sub(args: argparse.Namespace) -> dict:
    import nsq
    import tornado.ioloop

    n = args.messages
    state = {"count": 0, "t0": 0.0, "t1": 0.0, "c0": 0.0, "c1": 0.0}
    loop = tornado.ioloop.IOLoop.current()

    def handler(_msg) -> bool:
        c = state["count"] = state["count"] + 1
        if c == 1:
            state["t0"], state["c0"] = time.perf_counter(), time.process_time()
        elif c == n:
            state["t1"], state["c1"] = time.perf_counter(), time.process_time()
            loop.add_callback(loop.stop)
        return True

    nsq.Reader(
        message_handler=handler, nsqd_tcp_addresses=[args.addr], topic=args.topic,
        channel=args.channel, max_in_flight=args.rdy,
    )
    loop.start()
    return {"msgs": n - 1, "secs": state["t1"] - state["t0"], "cpu": state["c1"] - state["c0"]}


WORKERS = {
    "nsqpy:mpub": nsqpy_mpub,
    "nsqpy:pub": nsqpy_pub,
    "nsqpy:sub-async": lambda a: nsqpy_sub(a, True),
    "nsqpy:sub-sync": lambda a: nsqpy_sub(a, False),
    "pynsq:mpub": lambda a: pynsq_pub(a, a.batch),
    "pynsq:pub": lambda a: pynsq_pub(a, 1),
    "pynsq:sub": pynsq_sub,
}


# --- orchestration -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nsqd(data: str) -> tuple[subprocess.Popen, str, str]:
    tcp, http = free_port(), free_port()
    exe = Path(sys.executable).parent / "nsqd"
    proc = subprocess.Popen(
        [str(exe), f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}",
         f"--data-path={data}", "--mem-queue-size=100000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/ping", timeout=0.5):
                return proc, f"127.0.0.1:{tcp}", f"127.0.0.1:{http}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("nsqd did not start")


def prefill(addr: str, topic: str, n: int, size: int) -> None:
    from nsqpy.client import SyncPublisher

    body = b"x" * size
    with SyncPublisher(addr, timeout=30) as p:
        for i in range(0, n, 500):
            p.mpub(topic, [body] * min(500, n - i))


def empty_topic(http: str, topic: str) -> None:
    req = urllib.request.Request(f"http://{http}/topic/delete?topic={topic}", data=b"", method="POST")
    try:
        urllib.request.urlopen(req, timeout=10).read()
    except OSError:
        pass


def run_worker(name: str, args: argparse.Namespace, topic: str, uvloop: bool = False) -> dict | None:
    cmd = [
        sys.executable, __file__, "--worker", name, "--addr", args.addr, "--topic", topic,
        "--channel", "bench", "--messages", str(args.messages), "--size", str(args.size),
        "--batch", str(args.batch), "--window", str(args.window), "--rdy", str(args.rdy),
    ]
    if uvloop:
        cmd.append("--uvloop")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"  {name}: timed out", file=sys.stderr)
        return None
    if out.returncode != 0:
        print(f"  {name}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--window", type=int, default=200, help="publishes awaiting their OK at once")
    ap.add_argument("--rdy", type=int, default=2500)
    ap.add_argument("--uvloop", action="store_true", help="also run nsqpy on uvloop")
    ap.add_argument("--scenarios", default="mpub,pub,sub")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--nsqd-tcp-address")
    ap.add_argument("--nsqd-http-address")
    # worker mode
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--addr", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--channel", default="bench", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)))
        return

    data = None
    proc = None
    if args.nsqd_tcp_address:
        args.addr, http = args.nsqd_tcp_address, args.nsqd_http_address
    else:
        data = tempfile.mkdtemp(prefix="client_bench_")
        proc, args.addr, http = start_nsqd(data)
    rows: list[tuple[str, str, float | None, float | None]] = []
    try:
        scenarios = args.scenarios.split(",")
        clients = [("nsqpy", False)] + ([("nsqpy", True)] if args.uvloop else []) + [("pynsq", False)]
        for scen in scenarios:
            for client, uv in clients:
                label = client + ("+uvloop" if uv else "")
                names = [f"{client}:{scen}"]
                if scen == "sub" and client == "nsqpy":
                    names = ["nsqpy:sub-async", "nsqpy:sub-sync"]
                for name in names:
                    topic = f"bench_{scen}_{int(time.time() * 1000) % 10**9}"
                    if scen == "sub":
                        prefill(args.addr, topic, args.messages, args.size)
                    res = run_worker(name, args, topic, uv)
                    rate = res["msgs"] / res["secs"] if res and res["secs"] > 0 else None
                    cpu_us = res["cpu"] / res["msgs"] * 1e6 if res and res["msgs"] else None
                    suffix = name.split(":")[1]
                    rows.append((suffix, label, rate, cpu_us))
                    shown = f"{rate:>12,.0f} msgs/s  {cpu_us:6.2f} µs CPU/msg" if rate else "      failed"
                    print(f"{suffix:<10} {label:<14} {shown}", flush=True)
                    if http:
                        empty_topic(http, topic)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if data:
            shutil.rmtree(data, ignore_errors=True)

    print(f"\n{args.messages:,} messages of {args.size} B; MPUB batch {args.batch}; "
          f"publish window {args.window}; RDY {args.rdy}")
    print("| scenario | client | msgs/s | client CPU µs/msg | vs pynsq (msgs/s) |")
    print("|---|---|---:|---:|---:|")
    pynsq = {s: r for s, c, r, _ in rows if c == "pynsq"}
    for scen, client, rate, cpu_us in rows:
        base = pynsq.get("sub" if scen.startswith("sub") else scen)
        ratio = f"{rate / base:.2f}x" if rate and base and client != "pynsq" else ""
        shown = f"{rate:,.0f}" if rate else "failed"
        cpu = f"{cpu_us:.2f}" if cpu_us else ""
        print(f"| {scen} | {client} | {shown} | {cpu} | {ratio} |")


if __name__ == "__main__":
    main()
