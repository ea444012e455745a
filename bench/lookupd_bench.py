"""nsqlookupd benchmark: ``/lookup`` requests/s with N nodes x M topics registered over real TCP
connections, and registration churn (REGISTER/UNREGISTER per second), pipelined and round-trip.

By default it starts ``nsqlookupd`` (ours) on free loopback ports and stops it by PID at the end.
``--tcp``/``--http`` point it at an already running nsqlookupd instead (e.g. upstream's Go binary)
so the same figures can be compared. The load generator is one asyncio (uvloop) process with
keep-alive connections; on a small machine it shares the CPUs with the server, so read the
figures as relative, not absolute.

    .venv/bin/python bench/lookupd_bench.py [--duration 5] [--concurrency 16] [--log-level warn]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

MAGIC = b"  V1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lookupd(log_level: str) -> tuple[subprocess.Popen, int, int]:
    tcp, http = free_port(), free_port()
    exe = Path(sys.executable).parent / "nsqlookupd"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "nsqpy.lookupd.main"]
    proc = subprocess.Popen(argv + [f"--tcp-address=127.0.0.1:{tcp}",
                                    f"--http-address=127.0.0.1:{http}",
                                    "--broadcast-address=127.0.0.1", f"--log-level={log_level}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"nsqlookupd exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/ping", timeout=1) as r:
                if r.status == 200:
                    return proc, tcp, http
        except OSError:
            time.sleep(0.05)
    stop(proc)
    raise SystemExit("nsqlookupd did not start")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


# --- V1 client ----------------------------------------------------------------------------------


class V1:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> "V1":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(MAGIC)
        return cls(reader, writer)

    async def reply(self) -> bytes:
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        data = await self.reader.readexactly(size)
        if data.startswith(b"E_"):
            raise RuntimeError(data.decode())
        return data

    async def identify(self, node: int) -> None:
        body = json.dumps({"version": "1.3.0", "tcp_port": 4150 + node, "http_port": 5150 + node,
                           "broadcast_address": f"10.0.{node // 250}.{node % 250}",
                           "hostname": f"nsqd-{node}"}).encode()
        self.writer.write(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        await self.reply()

    async def pipeline(self, commands: list[bytes]) -> None:
        self.writer.write(b"".join(commands))
        for _ in commands:
            await self.reply()

    def close(self) -> None:
        self.writer.close()


# --- HTTP load ----------------------------------------------------------------------------------


async def http_worker(port: int, paths: list[str], stop_at: float, latencies: list[float],
                      offset: int) -> tuple[int, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    requests = [f"GET {p} HTTP/1.1\r\nHost: bench\r\n\r\n".encode() for p in paths]
    n = offset
    done = 0
    nbytes = 0
    try:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            writer.write(requests[n % len(requests)])
            n += 1
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
                    break
            if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.1 404")):
                raise RuntimeError(head[:80])
            body = await reader.readexactly(length)
            nbytes += len(body)
            latencies.append(time.perf_counter() - t0)
            done += 1
    finally:
        writer.close()
    return done, nbytes


async def http_load(port: int, paths: list[str], duration: float, concurrency: int) -> dict:
    latencies: list[float] = []
    t0 = time.perf_counter()
    stop_at = t0 + duration
    results = await asyncio.gather(*(http_worker(port, paths, stop_at, latencies, i * 7)
                                     for i in range(concurrency)))
    elapsed = time.perf_counter() - t0
    count = sum(r[0] for r in results)
    nbytes = sum(r[1] for r in results)
    latencies.sort()
    return {
        "rps": count / elapsed,
        "count": count,
        "avg_body": nbytes / max(count, 1),
        "p50_ms": statistics.median(latencies) * 1e3 if latencies else 0,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3 if latencies else 0,
    }


# --- scenarios ----------------------------------------------------------------------------------


async def register_nodes(tcp: int, nodes: int, topics: int, channels: int) -> tuple[list[V1], float]:
    conns = [await V1.connect(tcp) for _ in range(nodes)]
    for i, c in enumerate(conns):
        await c.identify(i)
    t0 = time.perf_counter()

    async def register(c: V1) -> None:
        cmds = []
        for t in range(topics):
            cmds.append(b"REGISTER bench_topic_%d\n" % t)
            for ch in range(channels):
                cmds.append(b"REGISTER bench_topic_%d ch%d\n" % (t, ch))
        await c.pipeline(cmds)

    await asyncio.gather(*(register(c) for c in conns))
    return conns, time.perf_counter() - t0


async def churn(tcp: int, duration: float, batch: int, pipelined: bool) -> float:
    c = await V1.connect(tcp)
    await c.identify(9999)
    pairs = [(b"REGISTER churn_%d ch\n" % i, b"UNREGISTER churn_%d ch\n" % i) for i in range(batch)]
    cmds = [x for pair in pairs for x in pair]
    done = 0
    t0 = time.perf_counter()
    stop_at = t0 + duration
    while time.perf_counter() < stop_at:
        if pipelined:
            await c.pipeline(cmds)
            done += len(cmds)
        else:
            for cmd in cmds[:200]:
                c.writer.write(cmd)
                await c.reply()
            done += 200
    elapsed = time.perf_counter() - t0
    c.close()
    return done / elapsed


async def main_async(args) -> None:
    proc = None
    if args.tcp and args.http:
        tcp, http = args.tcp, args.http
        target = f"external nsqlookupd tcp:{tcp} http:{http}"
    else:
        proc, tcp, http = start_lookupd(args.log_level)
        target = f"nsqpy nsqlookupd (log-level={args.log_level})"
    try:
        print(f"# {target}; client: {'uvloop' if args.uvloop else 'asyncio'}, "
              f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}")
        conns, reg_s = await register_nodes(tcp, args.nodes, args.topics, args.channels)
        nreg = args.nodes * args.topics * (1 + args.channels)
        print(f"register   {args.nodes} nodes x {args.topics} topics x {args.channels} channels: "
              f"{nreg} REGISTER in {reg_s:.2f}s = {nreg / reg_s:,.0f} cmds/s (pipelined, "
              f"{args.nodes} conns)")

        paths = [f"/lookup?topic=bench_topic_{t}" for t in range(args.topics)]
        r = await http_load(http, paths, args.duration, args.concurrency)
        print(f"/lookup    {r['rps']:,.0f} req/s  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms"
              f"  ({args.nodes} producers/topic, {r['avg_body'] / 1024:.1f} KiB/response, "
              f"{args.concurrency} conns, {args.duration:.0f}s)")
        r = await http_load(http, ["/ping"], args.duration / 2, args.concurrency)
        print(f"/ping      {r['rps']:,.0f} req/s  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms"
              "  (HTTP stack baseline)")
        r = await http_load(http, ["/nodes"], args.duration / 2, args.concurrency)
        print(f"/nodes     {r['rps']:,.0f} req/s  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms"
              f"  ({r['avg_body'] / 1024:.1f} KiB/response)")

        rate = await churn(tcp, args.duration, 500, pipelined=True)
        print(f"churn      {rate:,.0f} REGISTER+UNREGISTER cmds/s pipelined (batches of 1000, "
              f"1 conn, {nreg} registrations in the DB)")
        rate = await churn(tcp, args.duration / 2, 500, pipelined=False)
        print(f"churn      {rate:,.0f} cmds/s round-trip (one command in flight, like nsqd)")
        for c in conns:
            c.close()
    finally:
        if proc is not None:
            stop(proc)
            print(f"# nsqlookupd exit status {proc.returncode}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--channels", type=int, default=1, help="channels per topic per node")
    ap.add_argument("--log-level", default="warn",
                    help="our nsqlookupd's --log-level (info logs every request, as upstream)")
    ap.add_argument("--tcp", type=int, help="TCP port of an already running nsqlookupd")
    ap.add_argument("--http", type=int, help="HTTP port of an already running nsqlookupd")
    ap.add_argument("--no-uvloop", dest="uvloop", action="store_false")
    args = ap.parse_args()
    if args.uvloop:
        try:
            import uvloop
        except ImportError:
            args.uvloop = False
        else:
            uvloop.run(main_async(args))
            return
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
