"""kill -9 of the Spark driver (Python driver, its JVM, the source runner: the whole tree) while a
query streams; the same query restarted on the same checkpoint gets every message at least
once, and the upsert recipe leaves each exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from helpers.servers import unique_name

from spark.nsq_spark_util import channel_stats, create_channel, publish_n, wait_until

SCRIPT = Path(__file__).resolve().parent / "driver_script.py"


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def process_tree(pid: int) -> set[int]:
    kids = _children()
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p not in tree:
            tree.add(p)
            todo.extend(kids.get(p, []))
    return tree


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the driver and everything it started (snapshot first: orphans get re-parented)."""
    tree = process_tree(proc.pid)
    for pid in sorted(tree):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(10)
    wait_until(lambda: not any(alive(p) for p in tree), 20, what="the killed driver's processes to exit")


def _offset_seq(ckpt: Path, batch: int) -> int:
    """The source's end offset ``seq`` of a planned batch (last line of offsets/<batch>)."""
    if batch < 0:
        return 0
    lines = (ckpt / "offsets" / str(batch)).read_text().splitlines()
    return int(orjson.loads(lines[-1])["seq"])


def committed_data_batch(ckpt: Path, at_least: int) -> bool:
    """The last batch Spark committed carried messages (it is not an ack-flush batch) and is at
    least the ``at_least``-th: its messages now wait for the FIN the next planning sends."""
    commits = ckpt / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    if not done or max(done) + 1 < at_least:
        return False
    last = max(done)
    try:
        return _offset_seq(ckpt, last) > _offset_seq(ckpt, last - 1)
    except (OSError, ValueError, KeyError):
        return False


def run_driver(mode: str, nsqd, topic: str, work: Path, log: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, str(SCRIPT), mode, "--nsqd-tcp", nsqd.tcp_address, "--nsqd-http", nsqd.http_address,
            "--topic", topic, "--work", str(work), *extra]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.timeout(300)
def test_kill9_driver_mid_stream_then_restart_delivers_everything(spark, nsqd, tmp_path):
    topic = unique_name("kill9")
    n = 4000
    create_channel(nsqd.http_address, topic, "spark")
    expected = publish_n(nsqd.tcp_address, topic, n)
    work, log = tmp_path / "work", tmp_path / "driver.log"
    work.mkdir()

    # batches of 300 with 300 in flight at most and a 4 s poll: after each commit the source
    # waits 4 s before the FIN, so killing right after a commit makes that batch come again
    proc = run_driver("stream", nsqd, topic, work, log, "--max-in-flight=300", "--poll-ms=4000")
    try:
        wait_until(lambda: committed_data_batch(work / "ckpt", 3) or proc.poll() is not None, 150,
                   interval=0.1, what="a third committed micro-batch with data")
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
    finally:
        kill_tree(proc)
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert ch["depth"] + ch["in_flight_count"] > 0, "killed after the end of the stream: test proves nothing"
    assert ch["in_flight_count"] > 0  # un-FINed messages held by the dead driver

    proc = run_driver("drain", nsqd, topic, work, log)
    try:
        rc = proc.wait(200)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    assert rc == 0, log.read_text(errors="replace")[-3000:]

    raw = spark.read.parquet(str(work / "raw")).select("body", "id", "nsqd_address").collect()
    assert {bytes(r.body) for r in raw} == set(expected)  # at least once (4.0 gives bytearray)
    assert len(raw) > n  # the batch committed before the kill was delivered again
    assert len({r.id for r in raw}) == n
    dedup = spark.read.parquet(str(work / "dedup")).select("body", "id").collect()
    assert sorted(r.body for r in dedup) == sorted(expected)  # exactly once after the recipe
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert (ch["depth"], ch["in_flight_count"]) == (0, 0)
    print(f"raw rows {len(raw)} for {n} messages ({len(raw) - n} redelivered duplicates); "
          f"timeouts {ch['timeout_count']}", file=sys.stderr)
