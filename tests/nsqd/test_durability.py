"""Durability with real processes: restarts, kill -9, corrupt files, a full disk, upstream's format."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
import urllib.request

import pytest

from helpers.disk import publishes_again, small_tmpfs
from helpers.servers import Nsqd, unique_name
from helpers.wire import Wire, drain
from nsqpy.protocol.message import encode_message

pytestmark = pytest.mark.timeout(120)


def stats(node: Nsqd, topic: str) -> dict:
    with urllib.request.urlopen(f"http://{node.http_address}/stats?format=json&topic={topic}") as r:
        return json.load(r)


def test_backlog_survives_sigterm_restart(tmp_path):
    node = Nsqd(tmp_path / "d", "--mem-queue-size=1000")
    try:
        topic = unique_name()
        w = Wire(node.tcp_address)
        w.sub(topic, "ch")  # creates the channel; no RDY
        pub = Wire(node.tcp_address)
        for i in range(0, 100_000, 500):
            pub.mpub(topic, [b"msg-%06d" % j for j in range(i, i + 500)])
        urllib.request.urlopen(urllib.request.Request(
            f"http://{node.http_address}/channel/pause?topic={topic}&channel=ch", method="POST"))
        w.close()
        assert node.stop() == 0
        node = node.restart("--mem-queue-size=1000")
        st = stats(node, topic)["topics"][0]
        ch = st["channels"][0]
        assert ch["channel_name"] == "ch" and ch["paused"] is True and ch["depth"] == 100_000
        urllib.request.urlopen(urllib.request.Request(
            f"http://{node.http_address}/channel/unpause?topic={topic}&channel=ch", method="POST"))
        got = drain(node.tcp_address, topic, "ch", 100_000)
        assert sorted(m.body for m in got) == [b"msg-%06d" % j for j in range(100_000)]
        assert all(m.attempts == 1 for m in got)
        assert "Traceback" not in node.log()
    finally:
        node.stop()


def test_in_flight_and_deferred_survive_restart_with_attempts_and_delay(tmp_path):
    node = Nsqd(tmp_path / "d", "--keep-deferred-delays")
    try:
        topic = unique_name()
        c = Wire(node.tcp_address)
        c.sub(topic, "ch", rdy=10)
        pub = Wire(node.tcp_address)
        pub.mpub(topic, [b"a", b"b"])
        held = [c.read_message(), c.read_message()]
        c.cmd(b"REQ", held[0].id, "0")  # attempts 1 -> redelivered with 2
        m = c.read_message()
        assert m.attempts == 2
        pub.cmd(b"DPUB", topic, "4000", body=b"deferred")
        pub.expect_ok()
        time.sleep(0.3)
        t_stop = time.monotonic()
        node.stop()
        assert list(node.data_path.glob("*.deferred.json"))
        node = node.restart("--keep-deferred-delays")
        assert not list(node.data_path.glob("*.deferred.json"))  # read, then removed
        got = drain(node.tcp_address, topic, "ch", 2, quiet=1.5)
        assert sorted((x.body, x.attempts) for x in got) == [(b"a", 3), (b"b", 2)]
        late = drain(node.tcp_address, topic, "ch", 1, quiet=6.0)
        assert [x.body for x in late] == [b"deferred"]
        assert time.monotonic() - t_stop >= 3.2  # the delay was kept across the restart
    finally:
        node.stop()


def test_deferred_messages_lose_their_delay_at_a_restart_by_default(tmp_path):
    """Upstream's behaviour (its issue #1375), and its data directory: no file of ours."""
    node = Nsqd(tmp_path / "d")
    try:
        topic = unique_name()
        pub = Wire(node.tcp_address)
        pub.cmd(b"SUB", topic, "ch")
        pub.expect_ok()
        pub.close()
        pub = Wire(node.tcp_address)
        pub.cmd(b"DPUB", topic, "60000", body=b"deferred")
        pub.expect_ok()
        time.sleep(0.2)
        node.stop()
        assert not list(node.data_path.glob("*.json"))
        node = node.restart()
        got = drain(node.tcp_address, topic, "ch", 1, quiet=3.0)
        assert [x.body for x in got] == [b"deferred"]
    finally:
        node.stop()


def test_kill9_loses_no_acknowledged_message(tmp_path):
    node = Nsqd(tmp_path / "d", "--mem-queue-size=0", "--sync-every=1")
    topic = unique_name()
    acked = 0
    pub = Wire(node.tcp_address)
    deadline = time.monotonic() + 1.5
    try:
        while time.monotonic() < deadline:
            pub.pub(topic, b"m%d" % acked)
            acked += 1
        # keep publishing in flight while the process is killed
        for i in range(50):
            pub.cmd(b"PUB", topic, body=b"unacked%d" % i)
        node.kill9()
        node = node.restart("--mem-queue-size=0", "--sync-every=1")
        # the topic has no channel yet: its backlog moves to the first channel created
        got = drain(node.tcp_address, topic, "ch", acked + 50, quiet=2.0)
        bodies = {m.body for m in got}
        missing = [i for i in range(acked) if b"m%d" % i not in bodies]
        assert acked > 100 and not missing
        assert not list(node.data_path.glob("*.bad"))
    finally:
        node.stop()


def test_corrupt_segment_is_moved_aside_and_the_rest_served(tmp_path):
    data = tmp_path / "d"
    node = Nsqd(data, "--mem-queue-size=0", "--max-bytes-per-file=1000")
    topic = unique_name()
    try:
        c = Wire(node.tcp_address)
        c.sub(topic, "ch")
        c.close()
        Wire(node.tcp_address).mpub(topic, [b"x%03d" % i for i in range(100)])
        node.stop()
        files = sorted(data.glob(f"{topic}:ch.diskqueue.0*.dat"))
        assert len(files) >= 3
        with open(files[1], "r+b") as fh:  # garbage length prefix in the middle segment
            fh.write(struct.pack(">i", 0x7FFFFFF0))
        node = node.restart("--mem-queue-size=0", "--max-bytes-per-file=1000")
        got = drain(node.tcp_address, topic, "ch", 100, quiet=2.0)
        assert 50 < len(got) < 100
        assert list(data.glob("*.bad"))
        assert stats(node, topic)["topics"][0]["channels"][0]["depth"] == 0
        assert "Traceback" not in node.log()
    finally:
        node.stop()


def test_second_nsqd_on_same_data_path_refuses(tmp_path):
    node = Nsqd(tmp_path / "d")
    try:
        other = subprocess.run([*node.argv[:1], "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                                f"--data-path={node.data_path}"], capture_output=True, text=True, timeout=20)
        assert other.returncode != 0
        assert "in use" in other.stderr
    finally:
        node.stop()


def test_upstream_format_written_byte_by_byte_is_served(tmp_path):
    """A data directory as upstream Go nsqd leaves it: nsqd.dat, segments and .meta.dat files."""
    data = tmp_path / "d"
    data.mkdir()
    topic = "legacy"
    (data / "nsqd.dat").write_text(json.dumps({
        "topics": [{"name": topic, "paused": False, "channels": [{"name": "arch", "paused": False}]}],
        "version": "1.3.0"}))
    records = b""
    for i in range(5):
        payload = encode_message(b"%016x" % (0xABC000 + i), b"legacy-%d" % i, 1_700_000_000_000_000_000 + i, 1)
        records += struct.pack(">i", len(payload)) + payload
    (data / f"{topic}:arch.diskqueue.000000.dat").write_bytes(records)
    (data / f"{topic}:arch.diskqueue.meta.dat").write_text(f"5\n0,0\n0,{len(records)}\n")
    node = Nsqd(data)
    try:
        got = drain(node.tcp_address, topic, "arch", 5)
        assert [m.body for m in got] == [b"legacy-%d" % i for i in range(5)]
        assert [m.attempts for m in got] == [2] * 5  # attempts on disk are kept, +1 on delivery
        assert got[0].id == b"%016x" % 0xABC000 and got[0].timestamp == 1_700_000_000_000_000_000
    finally:
        node.stop()
    # and what we leave behind is upstream's format again
    meta = json.loads((data / "nsqd.dat").read_text())
    assert meta["topics"][0]["name"] == topic and meta["version"] == "1.3.0"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_disk_full_gives_pub_failed_and_recovers(tmp_path):
    with small_tmpfs(tmp_path) as mnt:
        _disk_full_gives_pub_failed_and_recovers(mnt)


def _disk_full_gives_pub_failed_and_recovers(mnt):
    node = None
    try:
        node = Nsqd(mnt / "d", "--mem-queue-size=0", "--max-bytes-per-file=50000")
        topic = unique_name()
        sub = Wire(node.tcp_address)
        sub.sub(topic, "ch")  # messages go straight to the channel's disk queue
        sub.close()
        pub = Wire(node.tcp_address)
        body = b"z" * 10_000
        error = None
        for _ in range(200):
            pub.cmd(b"PUB", topic, body=body)
            frame = pub.read_frame()
            if frame.frame_type == 1:
                error = frame.data
                break
        assert error is not None and error.startswith(b"E_PUB_FAILED PUB failed")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://{node.http_address}/ping")
        assert err.value.code == 500 and err.value.read().startswith(b"NOK - ")
        # free space: consume what was stored, then publishing works again
        got = drain(node.tcp_address, topic, "ch", 10**6, quiet=1.0)
        assert len(got) > 0
        publishes_again(node, topic, mnt / "d")
    finally:
        if node is not None:
            node.stop()
