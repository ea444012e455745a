"""Utilities' throughput: how fast each console script moves a pre-filled topic.

Scenarios (``--messages`` bodies of ``--size`` bytes, one nsqd started here, or two for
nsq_to_nsq):

* ``to_nsq``            — stdin lines published (pipelined PUBs), until the process exits;
* ``nsq_to_file``       — plain file, FIN after fsync, until the channel is drained;
* ``nsq_to_file-gzip``  — ``--gzip --rotate-size=64MB``, same;
* ``nsq_to_nsq``        — relayed to a second nsqd, until the source channel is drained;
* ``nsq_tail``          — ``--n`` messages printed to /dev/null, until the process exits.

Each figure is messages per second of wall time including start-up (about 0.3 s), so use
enough messages. The box is shared: compare columns of the same run.

    python bench/tools_bench.py
    python bench/tools_bench.py --messages 500000 --only nsq_to_file,nsq_to_file-gzip
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nsqd:
    def __init__(self, data: Path) -> None:
        self.tcp = f"127.0.0.1:{free_port()}"
        self.http = f"127.0.0.1:{free_port()}"
        data.mkdir(parents=True)
        self.proc = subprocess.Popen(
            [str(BIN / "nsqd"), f"--tcp-address={self.tcp}", f"--http-address={self.http}",
             f"--data-path={data}", "--mem-queue-size=10000000", "--log-level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://{self.http}/ping", timeout=0.5).read()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nsqd did not start")

    def post(self, path: str, body: bytes = b"") -> None:
        urllib.request.urlopen(f"http://{self.http}{path}", data=body, timeout=30).read()

    def channel(self, topic: str, channel: str) -> dict:
        data = json.load(urllib.request.urlopen(f"http://{self.http}/stats?format=json&topic={topic}"))
        for t in data["topics"]:
            for c in t["channels"]:
                if c["channel_name"] == channel:
                    return c
        return {}

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def fill(nsqd: Nsqd, topic: str, channel: str, n: int, size: int) -> None:
    nsqd.post(f"/topic/create?topic={topic}")
    nsqd.post(f"/channel/create?topic={topic}&channel={channel}")
    body = b"x" * (size - 7)
    for start in range(0, n, 10_000):
        batch = b"\n".join(b"%07d" % i + body for i in range(start, min(n, start + 10_000)))
        nsqd.post(f"/mpub?topic={topic}", batch)


def until_drained(nsqd: Nsqd, topic: str, channel: str, n: int, proc: subprocess.Popen) -> float:
    started = time.monotonic()
    while True:
        c = nsqd.channel(topic, channel)
        if c and c["message_count"] >= n and c["depth"] == 0 and c["in_flight_count"] == 0:
            return time.monotonic() - started
        if proc.poll() is not None:
            raise RuntimeError(f"tool exited with {proc.returncode}")
        time.sleep(0.02)


def run(name: str, args: argparse.Namespace, tmp: Path) -> float:
    n, size = args.messages, args.size
    src = Nsqd(tmp / f"{name}-src")
    extra: list[Nsqd] = []
    proc: subprocess.Popen | None = None
    try:
        if name == "to_nsq":
            data = b"".join(b"%07d" % i + b"x" * (size - 7) + b"\n" for i in range(n))
            started = time.monotonic()
            subprocess.run([str(BIN / "to_nsq"), "--topic=bench", f"--nsqd-tcp-address={src.tcp}"],
                           input=data, check=True, stderr=subprocess.DEVNULL, timeout=600)
            return time.monotonic() - started
        if name == "nsq_tail":
            fill(src, "bench", "tail", n, size)
            started = time.monotonic()
            subprocess.run([str(BIN / "nsq_tail"), "--topic=bench", "--channel=tail", f"--n={n}",
                            f"--nsqd-tcp-address={src.tcp}"], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=600)
            return time.monotonic() - started
        if name.startswith("nsq_to_file"):
            fill(src, "bench", "nsq_to_file", n, size)
            argv = [str(BIN / "nsq_to_file"), "--topic=bench", f"--nsqd-tcp-address={src.tcp}",
                    f"--output-dir={tmp / name}", "--log-level=warn"]
            if name.endswith("gzip"):
                argv += ["--gzip", "--rotate-size=67108864"]
            proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
            return until_drained(src, "bench", "nsq_to_file", n, proc)
        if name == "nsq_to_nsq":
            dst = Nsqd(tmp / f"{name}-dst")
            extra.append(dst)
            fill(src, "bench", "nsq_to_nsq", n, size)
            proc = subprocess.Popen([str(BIN / "nsq_to_nsq"), "--topic=bench", f"--nsqd-tcp-address={src.tcp}",
                                     f"--destination-nsqd-tcp-address={dst.tcp}", "--status-every=0"],
                                    stderr=subprocess.DEVNULL)
            return until_drained(src, "bench", "nsq_to_nsq", n, proc)
        raise ValueError(name)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for node in (src, *extra):
            node.stop()


SCENARIOS = ["to_nsq", "nsq_to_file", "nsq_to_file-gzip", "nsq_to_nsq", "nsq_tail"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--only", default="", help="comma-separated scenarios: " + ", ".join(SCENARIOS))
    args = ap.parse_args()
    chosen = [s for s in args.only.split(",") if s] or SCENARIOS
    tmp = Path(tempfile.mkdtemp(prefix="tools-bench-"))
    try:
        print(f"{args.messages} messages of {args.size} bytes")
        for name in chosen:
            seconds = run(name, args, tmp)
            print(f"{name:18s} {seconds:7.2f}s  {args.messages / seconds:10,.0f} msgs/s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
