"""Data directories side by side with upstream nsqd v1.3.0 (its binary, ``NSQ_UPSTREAM_BIN``):
the files either writes are the ones the other reads, and the same operations leave the same
files, byte for byte but for message ids and timestamps.

What a directory holds after a clean stop: ``nsqd.dat`` (topics, channels, paused flags), each
topic's and channel's disk queue with what was in memory, in flight and deferred flushed into it.
An operator moving between upstream and nsqpy in either direction keeps every message and every
pause.

Without upstream's binaries (``NSQ_UPSTREAM_BIN``) the files upstream leaves are compared as
recorded (``tests/recordings/files/``); moving a directory between the two is live only: one side
must read what the other wrote just now.
"""

from __future__ import annotations

import json
import struct
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers.nsqd_http import http, stats
from helpers.polling import wait_for
from helpers.servers import Nsqd
from helpers.recording import live, recording
from helpers.wire import Wire
from helpers.upstream import live_only, upstream_binary, upstream_dir

UPSTREAM = upstream_dir()
RECORDED = recording("files", "test_upstream_datadir")
pytestmark = pytest.mark.timeout(120)

MEM = 4  # --mem-queue-size: some messages in memory, the rest on disk, on both sides


class UpstreamNsqd(Nsqd):
    bin_dir = UPSTREAM

    def own_flags(self) -> list[str]:
        return [f"--data-path={self.directory}"]


SIDES = {"upstream": UpstreamNsqd, "nsqpy": Nsqd}


def _write(node: Nsqd) -> Counter:
    """The same operations on either side; the bodies each channel should hold afterwards."""
    http(node, "POST", "/topic/create?topic=t")
    http(node, "POST", "/channel/create?topic=t&channel=c1")
    http(node, "POST", "/channel/create?topic=t&channel=c2")
    http(node, "POST", "/channel/pause?topic=t&channel=c2")
    http(node, "POST", "/topic/create?topic=held")
    http(node, "POST", "/topic/pause?topic=held")
    http(node, "POST", "/channel/create?topic=held&channel=c")
    http(node, "POST", "/channel/create?topic=t&channel=gone%23ephemeral")  # not persisted
    wire = Wire(node.tcp_address)
    try:
        bodies = [b"m%02d" % i for i in range(12)]
        wire.mpub("t", bodies[:10])
        for body in bodies[10:]:
            wire.pub("t", body)
        wire.cmd(b"DPUB", "t", "3600000", body=b"deferred")
        wire.expect_ok()
        wire.mpub("held", [b"h1", b"h2"])
        # wait until the topic's pump has handed everything to the channels
        wait_for(lambda: _depth(node, "t", "c2") == 13, timeout=30)
    finally:
        wire.close()
    consumer = Wire(node.tcp_address)
    consumer.sub("t", "c1", rdy=3)
    in_flight = [consumer.read_message() for _ in range(3)]  # left in flight at the stop
    assert len(in_flight) == 3
    node.consumer = consumer  # type: ignore[attr-defined]  (closed after the stop)
    return Counter(bodies + [b"deferred"])


def _depth(node: Nsqd, topic: str, channel: str) -> int:
    for t in stats(node)["topics"]:
        if t["topic_name"] == topic:
            for c in t["channels"]:
                if c["channel_name"] == channel:
                    return c["depth"] + c["in_flight_count"] + c["deferred_count"]
    return -1


def _stop(node: Nsqd) -> None:
    node.stop()
    consumer = getattr(node, "consumer", None)
    if consumer is not None:
        consumer.close()


def _drain(node: Nsqd, topic: str, channel: str, expect: int) -> Counter:
    """Every message the channel delivers (FINished), once ``expect`` came or 3 s passed."""
    wire = Wire(node.tcp_address, timeout=3)
    got: Counter = Counter()
    try:
        wire.sub(topic, channel, rdy=100)
        while sum(got.values()) < expect:
            msg = wire.read_message()
            got[msg.body] += 1
            wire.cmd(b"FIN", msg.id.decode() if isinstance(msg.id, bytes) else msg.id)
    finally:
        wire.close()
    return got


def _entities(node: Nsqd) -> dict:
    return {t["topic_name"]: (t["paused"], sorted((c["channel_name"], c["paused"])
                                                   for c in t["channels"]))
            for t in stats(node)["topics"]}


@pytest.mark.parametrize("writer, reader", [("upstream", "nsqpy"), ("nsqpy", "upstream")])
def test_a_directory_moves_between_upstream_and_nsqpy(tmp_path, writer, reader):
    if not live():
        pytest.skip(live_only("a data directory moved between upstream's nsqd and ours"))
    upstream_binary("nsqd")  # (or skip)
    node = SIDES[writer](tmp_path / "data", f"--mem-queue-size={MEM}")
    try:
        expected = _write(node)
    finally:
        _stop(node)
    node = SIDES[reader](tmp_path / "data", f"--mem-queue-size={MEM}")
    try:
        assert _entities(node) == {
            "t": (False, [("c1", False), ("c2", True)]),
            "held": (True, [("c", False)]),
        }
        # the deferred message comes back from disk without its defer, as upstream's does
        assert _drain(node, "t", "c1", 13) == expected
        http(node, "POST", "/channel/unpause?topic=t&channel=c2")
        assert _drain(node, "t", "c2", 13) == expected
        http(node, "POST", "/topic/unpause?topic=held")
        assert _drain(node, "held", "c", 2) == Counter([b"h1", b"h2"])
    finally:
        node.stop()


def _queues(directory: Path) -> dict[str, tuple[int, Counter]]:
    """Each disk queue's depth and its unread records (ids and timestamps masked), from its
    meta file: which files hold them and where reading stopped depend on timing on both sides
    (a topic whose pump kept up never spills; one read from disk is rewritten at the stop)."""
    out = {}
    for meta in sorted(directory.glob("*.diskqueue.meta.dat")):
        name = meta.name[:-len(".diskqueue.meta.dat")]
        depth_line, read_line, write_line = meta.read_text().split("\n")[:3]
        read_file, read_pos = map(int, read_line.split(","))
        write_file, write_pos = map(int, write_line.split(","))
        records: Counter = Counter()
        for num in range(read_file, write_file + 1):
            path = directory / f"{name}.diskqueue.{num:06d}.dat"
            if not path.exists():
                continue
            data = path.read_bytes()
            begin = read_pos if num == read_file else 0
            end = write_pos if num == write_file else len(data)
            records += _masked_records(data[begin:end])
        out[name] = (int(depth_line), records)
    return out


def _masked_records(data: bytes) -> Counter:
    """A disk queue's records (4-byte size, then timestamp, attempts, id, body) with the
    timestamp and the id zeroed."""
    out: Counter = Counter()
    pos = 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        record = bytearray(data[pos + 4:pos + 4 + size])
        record[0:8] = bytes(8)
        record[10:26] = bytes(16)
        out[bytes(record)] += 1
        pos += 4 + size
    assert pos == len(data)
    return out


def test_the_same_operations_leave_the_same_files(tmp_path):
    def files(side: str) -> tuple[list[str], dict, dict]:
        """The file names (sorted), each queue's depth and records (``_split``), nsqd.dat's
        document (topics and channels sorted by name: Go walks its maps in random order)."""
        if side == "upstream":
            upstream_binary("nsqd")  # (or skip)
        node = SIDES[side](tmp_path / side, f"--mem-queue-size={MEM}")
        try:
            _write(node)
            time.sleep(0.2)
        finally:
            _stop(node)
        directory = tmp_path / side
        doc = json.loads((directory / "nsqd.dat").read_bytes())
        doc["topics"].sort(key=lambda t: t["name"])
        for topic in doc["topics"]:
            (topic["channels"] or []).sort(key=lambda c: c["name"])
        # every file is one of upstream's kinds: no file of ours beside them by default
        names = sorted(p.name for p in directory.iterdir()
                       if p.suffix != ".log" and not p.name.endswith("0.dat"))
        return names, _split(_queues(directory)), doc

    up_names, up_queues, upstream = RECORDED.answer(None, lambda: files("upstream"))
    names, queues, _ = files("nsqpy")
    assert names == up_names
    # which three of t:c1's messages were in flight at the stop (attempts 1) is the order each
    # side delivered in (upstream picks from memory and disk at random): compared apart
    assert queues == up_queues
    assert queues["t:c2"][0] == 13 and queues["held"][0] == 2
    # the same document, the same bytes in our order
    our_bytes = (tmp_path / "nsqpy" / "nsqd.dat").read_bytes()
    ours = json.loads(our_bytes)
    order = [t["name"] for t in ours["topics"]]
    upstream["topics"].sort(key=lambda t: order.index(t["name"]))
    for our_topic, up_topic in zip(ours["topics"], upstream["topics"]):
        order = [c["name"] for c in our_topic["channels"]]
        up_topic["channels"].sort(key=lambda c: order.index(c["name"]))
    assert our_bytes == json.dumps(upstream, separators=(",", ":")).encode()


def _split(queues: dict[str, tuple[int, Counter]]) -> dict[str, tuple[int, Counter, Counter]]:
    """Per queue: depth, the records without their attempts, the attempts counts."""
    out = {}
    for name, (depth, records) in queues.items():
        plain: Counter = Counter()
        attempts: Counter = Counter()
        for record, n in records.items():
            plain[record[:8] + record[10:]] += n
            attempts[record[8:10]] += n
        out[name] = (depth, plain, attempts)
    return out
