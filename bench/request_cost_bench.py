"""What one request costs nsqd's Python code alone: no socket, no kernel, no other process.

A real ``NSQD`` (not started: no listeners, its data in a temporary directory) with its HTTP
app on :mod:`nsqpy.httpserver` and its V2 connection, each fed request bytes by hand through a
transport that only counts what it is given. What a request costs between the bytes arriving
(``data_received``) and the answer handed to ``transport.write`` is then measured without the
machine's noise: the other figures (``bench/measure_bench.py``) include the kernel and share
the cores with the load generator.

Rows (each request answered before the next is fed, as a client waiting for its answer sends):

==========  ==============================================================================
ping        ``GET /ping``
pub         ``POST /pub?topic=h``, 200-byte body
mpub        ``POST /mpub?topic=h``, 100 x 200 B text body
tcp_mpub1   V2 ``MPUB h`` with one 200-byte message (upstream's ``bench_writer --batch-size=1``)
tcp_pub     V2 ``PUB h``, 200-byte body
tcp_mpub    V2 ``MPUB h`` of 200 x 200 B to a topic whose one channel has no consumer (kept in
            memory, the channel emptied every 500 requests): bench_writer's publish alone
tcp_pubsub  V2 ``MPUB h`` of 200 x 200 B delivered to a consumer (RDY 2500) that FINs them
tcp_drain   that consumer alone on a backlog of 500k queued messages: 2,500 FINs, 2,500 sent
tcp_replay  the same consumer on a channel replaying a log of 500k (``--flags=--retention=1h``):
            what a rewind costs against ``tcp_drain`` with the same flags
stats       ``GET /stats?format=json`` with 2,000 V2 consumers subscribed to one channel
stats_topics  ``GET /stats?format=json`` with 5,000 topics x 2 channels
==========  ==============================================================================

Prints microseconds of CPU per request (``time.process_time``, median of ``--rounds``).
``--instructions`` runs each row twice under ``valgrind --tool=callgrind`` (``--count`` and
three times as many requests) and prints the instructions per request from the difference:
the same figure on a loaded machine as on a quiet one. ``--flags`` gives nsqd more flags
(``--retention=1h``: the history is installed as the server installs it, and its appends are
in the figures; the CPU figure then includes their ``pwrite`` and fsyncs, the instruction count
only our code's side of them)::

    .venv/bin/python bench/request_cost_bench.py [--rows ping,pub] [--rounds 5]
    .venv/bin/python bench/request_cost_bench.py --rows ping,mpub --instructions
    .venv/bin/python bench/request_cost_bench.py --rows tcp_mpub --flags=--retention=1h
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import uvloop  # noqa: E402

from nsqpy.httpserver import HTTPServer  # noqa: E402
from nsqpy.nsqd.history.install import install_history  # noqa: E402
from nsqpy.nsqd.http import NsqdHTTP  # noqa: E402
from nsqpy.nsqd.lifecycle.controls import install as install_lifecycle  # noqa: E402
from nsqpy.nsqd.main import parse_options, tune_gc  # noqa: E402
from nsqpy.nsqd.nsqd import NSQD  # noqa: E402
from nsqpy.nsqd.v2.connection import V2Connection  # noqa: E402

BODY = b"m" * 200


class CountingTransport:
    """A transport that takes every write and keeps only its count and size."""

    def __init__(self, peer: tuple[str, int] = ("127.0.0.1", 40000)) -> None:
        self.writes = 0
        self.written = 0
        self.peer = peer

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.written += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def http_request(method: str, target: str, body: bytes = b"") -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: bench\r\n"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def v2_mpub(topic: bytes, bodies: list[bytes]) -> bytes:
    pack = struct.Struct(">i").pack
    payload = pack(len(bodies)) + b"".join(pack(len(b)) + b for b in bodies)
    return b"MPUB " + topic + b"\n" + pack(len(payload)) + payload


class Rig:
    """nsqd's HTTP app and V2 connections on one NSQD, fed by hand."""

    def __init__(self, data: str, *flags: str) -> None:
        self.nsqd = NSQD(parse_options([f"--data-path={data}", "--mem-queue-size=100000000",
                                        *flags]), logging.getLogger("bench"))
        if flags:  # the features the flags turn on, installed as the server installs them
            install_lifecycle(self.nsqd)
            install_history(self.nsqd)
        self.api = NsqdHTTP(self.nsqd)
        self.server = HTTPServer(self.api, before_write=self.api.request_log.flush)
        self.server._loop = self.nsqd.loop  # (serve() sets it; nothing is served here)
        self.consumers: list[V2Connection] = []

    def http(self) -> tuple[Any, CountingTransport]:
        conn = self.server._make_connection()
        transport = CountingTransport()
        conn.connection_made(transport)
        return conn, transport

    def v2(self) -> tuple[V2Connection, CountingTransport]:
        conn = V2Connection(self.nsqd)
        transport = CountingTransport()
        conn.connection_made(transport)
        conn.data_received(b"  V2")
        return conn, transport

    def subscribe(self, n: int, topic: str = "t", channel: str = "c") -> None:
        for _ in range(n):
            conn, _ = self.v2()
            conn.data_received(f"SUB {topic} {channel}\n".encode())
            self.consumers.append(conn)

    def close(self) -> None:
        for conn in self.consumers:
            conn.connection_lost(None)
        for topic in list(self.nsqd.topics.values()):
            topic.close(flush=False)


async def _turn() -> None:
    """One loop iteration: the answers queued with ``call_soon`` are written."""
    await asyncio.sleep(0)


async def feed(conn: Any, request: bytes, count: int) -> None:
    """``count`` requests, each fed and answered (in the loop turn after it) before the next."""
    receive = conn.data_received
    for _ in range(count):
        receive(request)
        await _turn()


class PubSub:
    """One publisher and one consumer (RDY 2500) of topic ``h``: each request is the
    consumer's FINs for what the last one delivered, then the publisher's MPUB (delivered in
    the loop turn after it): bench_writer and bench_reader at once, in our code alone."""

    def __init__(self, rig: Rig) -> None:
        self.publisher, self.transport = rig.v2()
        rig.subscribe(1, "h", "c")
        self.consumer = rig.consumers[-1]
        self.consumer.data_received(b"RDY 2500\n")

    def data_received(self, request: bytes) -> None:
        in_flight = self.consumer.client.in_flight
        if in_flight:
            self.consumer.data_received(b"".join([b"FIN %s\n" % mid for mid in in_flight]))
        self.publisher.data_received(request)


class Drain(PubSub):
    """The consumer of :class:`PubSub` alone, on a backlog of 500k messages queued in its
    channel beforehand: each request is its FINs for the 2,500 it got, which makes room for the
    next 2,500 (bench_reader on a backlog)."""

    def __init__(self, rig: Rig) -> None:
        super().__init__(rig)
        fill = v2_mpub(b"h", [BODY] * 200)
        self.consumer.data_received(b"RDY 0\n")
        for _ in range(2_500):
            self.publisher.data_received(fill)
        self.consumer.data_received(b"RDY 2500\n")
        self.transport = self.consumer.transport

    def data_received(self, request: bytes) -> None:
        in_flight = self.consumer.client.in_flight
        self.consumer.data_received(b"".join([b"FIN %s\n" % mid for mid in in_flight]))


class Publish:
    """A publisher of MPUBs to topic ``h`` whose channel ``c`` has no consumer: what it is sent
    stays in memory, so the channel is emptied every 500 requests (a bounded footprint)."""

    def __init__(self, rig: Rig) -> None:
        self.publisher, self.transport = rig.v2()
        self.channel = rig.nsqd.get_topic("h").get_channel("c")
        self.requests = 0

    def data_received(self, request: bytes) -> None:
        self.publisher.data_received(request)
        self.requests += 1
        if self.requests % 500 == 0:
            self.channel.mem.clear()


class Replaying(Drain):
    """:class:`Drain`'s consumer on channel ``r``, made to replay the topic's log from its
    start once the backlog was published (the history needs ``--retention``): each request
    is its FINs for the 2,500 the replay sent, which makes room for the next 2,500."""

    def __init__(self, rig: Rig) -> None:
        topic = rig.nsqd.get_topic("h")
        if topic.history is None:
            raise SystemExit("tcp_replay needs the history: --flags=--retention=1h")
        super().__init__(rig)
        from nsqpy.nsqd.history.replay import start_replay  # (the history's own rewind)

        replay_channel = topic.get_channel("r")
        topic.channels.pop("c").delete()  # (only the replaying channel is consumed)
        self.consumer.data_received(b"RDY 0\n")
        self.consumer, self.transport = rig.v2()
        self.consumer.data_received(b"SUB h r\n")
        start_replay(replay_channel, topic.history, 0)
        self.consumer.data_received(b"RDY 2500\n")


def _drain(rig: Rig) -> tuple[Any, CountingTransport, bytes]:
    drain = Drain(rig)
    return drain, drain.transport, b""


def _pubsub(rig: Rig) -> tuple[Any, CountingTransport, bytes]:
    both = PubSub(rig)
    return both, both.transport, v2_mpub(b"h", [BODY] * 200)


ROWS: dict[str, Callable[[Rig], tuple[Any, CountingTransport, bytes]]] = {
    "ping": lambda rig: (*rig.http(), http_request("GET", "/ping")),
    "pub": lambda rig: (*rig.http(), http_request("POST", "/pub?topic=h", BODY)),
    "mpub": lambda rig: (*rig.http(),
                         http_request("POST", "/mpub?topic=h", b"\n".join([BODY] * 100))),
    "tcp_mpub1": lambda rig: (*rig.v2(), v2_mpub(b"h", [BODY])),
    "tcp_pub": lambda rig: (*rig.v2(), b"PUB h\n" + struct.pack(">i", len(BODY)) + BODY),
    "tcp_mpub": lambda rig: (*(lambda p: (p, p.transport))(Publish(rig)),
                             v2_mpub(b"h", [BODY] * 200)),
    "tcp_pubsub": _pubsub,
    "tcp_drain": _drain,
    "tcp_replay": lambda rig: (*(lambda r: (r, r.transport))(Replaying(rig)), b""),
    "stats": lambda rig: (rig.subscribe(2000), *rig.http(),
                          http_request("GET", "/stats?format=json"))[1:],
    "stats_topics": lambda rig: (_topics(rig, 5000, 2), *rig.http(),
                                 http_request("GET", "/stats?format=json"))[1:],
}
#: requests per round (``--callgrind``: per run)
COUNTS = {"ping": 20000, "pub": 20000, "mpub": 2000, "tcp_mpub1": 20000, "tcp_pub": 20000,
          "tcp_mpub": 2000, "tcp_pubsub": 2000, "tcp_drain": 30, "tcp_replay": 30, "stats": 20, "stats_topics": 10}


def _topics(rig: Rig, topics: int, channels: int) -> None:
    for i in range(topics):
        topic = rig.nsqd.get_topic(f"topic{i:05d}")
        for j in range(channels):
            topic.get_channel(f"c{j}")


def measure(row: str, rounds: int, count: int, flags: list[str]) -> list[float]:
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    with tempfile.TemporaryDirectory(prefix="request_cost") as data:
        rig = Rig(data, *flags)
        try:
            conn, transport, request = ROWS[row](rig)
            # warm (the same number of requests whatever --count says, so that two runs
            # differ by their measured requests only)
            loop.run_until_complete(feed(conn, request, min(COUNTS[row], 200)))
            count = count or COUNTS[row]
            gc.collect()
            gc.freeze()
            results = []
            for _ in range(rounds):
                writes = transport.writes
                start = time.process_time()
                loop.run_until_complete(feed(conn, request, count))
                results.append((time.process_time() - start) / count * 1e6)
                if transport.writes - writes < count:
                    raise SystemExit(f"{row}: {transport.writes - writes} of {count} answered")
            return results
        finally:
            rig.close()
            loop.close()


def instructions(row: str, count: int, flags: list[str]) -> float:
    """Instructions per request: two runs under callgrind, ``count`` and ``3 * count``
    requests, so start-up and set-up cancel out."""
    totals = []
    with tempfile.TemporaryDirectory(prefix="request_cost_cg") as tmp:
        for n in (count, 3 * count):
            out = Path(tmp) / f"cg.{n}"
            done = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                 sys.executable, __file__, "--rows", row, "--rounds", "1", "--count", str(n),
                 *(f"--flags={flag}" for flag in flags)],
                capture_output=True, text=True)
            found = re.search(r"Collected : (\d+)", done.stderr)
            if done.returncode or not found:
                raise SystemExit(f"valgrind failed: {done.stderr[-500:]}")
            totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / (2 * count)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--count", type=int, default=0, help="requests per round (default: per row)")
    ap.add_argument("--instructions", action="store_true",
                    help="instructions per request, counted by valgrind (slow: minutes per row)")
    ap.add_argument("--flags", action="append", default=[],
                    help="a flag for nsqd (repeat it for several), e.g. --flags=--retention=1h")
    args = ap.parse_args()
    if args.instructions:
        for row in args.rows.split(","):
            print(f"{row:<13} {instructions(row, args.count or max(2, COUNTS[row] // 20), args.flags):12,.0f} "
                  "instructions/request", flush=True)
        return
    tune_gc()
    for row in args.rows.split(","):
        results = measure(row, args.rounds, args.count, args.flags)
        print(f"{row:<13} {statistics.median(results):9.2f} us CPU/request "
              f"(rounds: {', '.join(f'{r:.2f}' for r in results)})", flush=True)


if __name__ == "__main__":
    main()
