"""What the history keeps through failures: kill -9, a torn tail, a full disk."""

from __future__ import annotations

import logging
import struct
import subprocess
import threading
import time

from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers.servers import unique_name
from helpers.wire import Wire
from nsqpy.nsqd.history.log import Cursor, Log
from nsqpy.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE

from .history_util import call, read, segments

pytestmark = pytest.mark.timeout(120)


def _publish_until_killed(node, topic: str, acked: list[bytes], stop: threading.Event) -> None:
    """PUB and MPUB in turn; a body counts as acknowledged once its OK arrived."""
    w = Wire(node.tcp_address, timeout=5)
    i = 0
    try:
        while not stop.is_set():
            if i % 2:
                bodies = [b"m%07d" % (i * 10 + j) for j in range(10)]
                w.mpub(topic, bodies)
            else:
                bodies = [b"p%07d" % i]
                w.pub(topic, bodies[0])
            acked.extend(bodies)
            i += 1
    except (OSError, ConnectionError, AssertionError):
        pass


def test_kill9_during_appends_keeps_every_acknowledged_message(nsqd_factory):
    node = nsqd_factory("--retention=1h", "--sync-every=1")
    topic = unique_name()
    acked: list[bytes] = []
    stop = threading.Event()
    publishers = [threading.Thread(target=_publish_until_killed, args=(node, topic + str(k), acked_k, stop))
                  for k, acked_k in enumerate([acked, [], []])]
    for t in publishers:
        t.start()
    time.sleep(1.5)
    node.kill9()
    stop.set()
    for t in publishers:
        t.join(10)
    assert len(acked) > 50
    node = node.restart("--retention=1h", "--sync-every=1")
    kept = [m.body for m in read(node, topic + "0")]
    missing = set(acked) - set(kept)
    assert not missing, f"{len(missing)} acknowledged messages missing"
    assert kept[:len(acked)] == acked  # in the order they were acknowledged
    assert len(kept) - len(acked) <= 10  # at most the one command whose OK never arrived


def test_a_torn_tail_is_cut_and_appending_goes_on(nsqd_factory):
    node = nsqd_factory("--retention=1h")
    topic = unique_name()
    w = Wire(node.tcp_address)
    w.mpub(topic, [b"a", b"b", b"c"])
    w.pub(topic, b"d")
    w.close()
    node.kill9()
    seg = sorted((node.data_path / f"{topic}.history").glob("*.seg"))[-1]
    good = seg.stat().st_size
    with open(seg, "ab") as f:  # half a block: a head promising more than was written
        f.write(struct.pack(">II", 500, 1234) + b"\x00" * 37)
    node = node.restart("--retention=1h")
    assert [m.body for m in read(node, topic)] == [b"a", b"b", b"c", b"d"]
    assert seg.stat().st_size == good
    assert "cutting a torn tail of 45 bytes" in node.log()
    Wire(node.tcp_address).pub(topic, b"e")
    assert [m.body for m in read(node, topic)] == [b"a", b"b", b"c", b"d", b"e"]
    node.kill9()
    with open(seg, "r+b") as f:  # a block whose bytes were not all written (CRC)
        f.seek(good + 8 + 5)
        f.write(b"X")
    node = node.restart("--retention=1h")
    assert [m.body for m in read(node, topic)] == [b"a", b"b", b"c", b"d"]


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "small"
    where.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                       check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as err:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {err}")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=10)


def test_a_full_disk_refuses_publishes_and_loses_nothing(nsqd_factory, small_disk):
    node = nsqd_factory("--retention=1h", data_path=small_disk / "data")
    topic = unique_name()
    w = Wire(node.tcp_address, timeout=5)
    acked, body_size = [], 20_000
    refused = None
    for i in range(200):
        body = b"%06d" % i + b"x" * body_size
        w.cmd(b"PUB", topic, body=body)
        frame = w.read_frame()
        if frame.frame_type == FRAME_TYPE_RESPONSE:
            acked.append(body)
            continue
        assert frame.frame_type == FRAME_TYPE_ERROR
        refused = frame.data
        break
    assert refused is not None and refused.startswith(b"E_PUB_FAILED"), refused
    assert len(acked) > 20
    # as today for any failed write: upstream's 503 EXITING (its doPUB cannot tell them apart)
    assert call(node, "POST", f"/pub?topic={topic}", b"y" * body_size * 2) == (503, b'{"message":"EXITING"}')
    kept = [m.body for m in read(node, topic)]
    assert kept == acked  # everything acknowledged, nothing refused
    assert segments(node, topic)["messages"] == len(acked)
    # and on disk after a clean stop (nsqd, like upstream's, cannot start on a full disk: it
    # must write nsqd.dat first), read by the log's own code
    node.stop()
    log = Log(str(node.data_path), topic, 3600 * 10**9, 0, 1, 2.0, logging.getLogger("t"),
              ThreadPoolExecutor(1))
    on_disk = [r[1] for recs in Cursor(log, *log.position(-1)) for r in recs]
    log.close()
    assert on_disk == acked
