"""``--sync-every=1`` through the group commit, with real processes: many publishers at once
(TCP PUB and MPUB, HTTP /pub), nsqd killed with SIGKILL in the middle; after the restart every
acknowledged message is there (in the topic's queue, and in its history when it keeps one) and
no message is there twice. Answers keep their order on a connection that mixes commands."""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from collections import Counter

import pytest

from helpers.disk import publishes_again, small_tmpfs
from helpers.polling import wait_for
from helpers.servers import Nsqd, unique_name
from helpers.wire import Wire, drain
from nsqpy.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, Frame

pytestmark = pytest.mark.timeout(180)

DURABLE = ("--mem-queue-size=0", "--sync-every=1")


class Publishers:
    """TCP and HTTP publishers, each with one publish in flight, each body unique; what was
    acknowledged is recorded before the next publish is sent."""

    def __init__(self, node: Nsqd, topic: str, tcp: int, mpub: int, http: int) -> None:
        self.node, self.topic = node, topic
        self.acked: list[bytes] = []
        self.sent = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = ([threading.Thread(target=self._tcp, args=(f"p{k}", False)) for k in range(tcp)]
                        + [threading.Thread(target=self._tcp, args=(f"m{k}", True)) for k in range(mpub)]
                        + [threading.Thread(target=self._http, args=(f"h{k}",)) for k in range(http)])
        for t in self.threads:
            t.start()

    def _record(self, bodies: list[bytes]) -> None:
        with self.lock:
            self.acked += bodies

    def _tcp(self, name: str, mpub: bool) -> None:
        try:
            w = Wire(self.node.tcp_address, timeout=30)
            i = 0
            while not self.stop.is_set():
                bodies = [b"%s-%d" % (name.encode(), i + k) for k in range(5 if mpub else 1)]
                i += len(bodies)
                if mpub:
                    w.mpub(self.topic, bodies)
                else:
                    w.pub(self.topic, bodies[0])
                self._record(bodies)
        except (OSError, AssertionError):
            pass  # killed: what was in flight is unknown, never acknowledged

    def _http(self, name: str) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                body = b"%s-%d" % (name.encode(), i)
                i += 1
                req = urllib.request.Request(
                    f"http://{self.node.http_address}/pub?topic={self.topic}", data=body)
                with urllib.request.urlopen(req, timeout=30) as resp:
                    assert resp.read() == b"OK"
                self._record([body])
        except (OSError, AssertionError):
            pass

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


@pytest.mark.parametrize("history", [False, True], ids=["queue", "queue+history"])
def test_kill9_under_concurrent_durable_publishers(tmp_path, history):
    flags = DURABLE + (("--retention=1h",) if history else ())
    node = Nsqd(tmp_path / "d", *flags)
    topic = unique_name()
    try:
        pubs = Publishers(node, topic, tcp=12, mpub=2, http=2)
        wait_for(lambda: pubs.count() >= 1500, 60, "1,500 acknowledged publishes")
        node.kill9()  # publishers are mid-flight: their next answers never come
        pubs.join()
        acked = pubs.acked
        node = node.restart(*flags)
        # the topic had no channel: its queue moves to the first channel created
        got = drain(node.tcp_address, topic, "ch", 10**7, quiet=3.0)
        counts = Counter(m.body for m in got)
        missing = [b for b in acked if b not in counts]
        twice = [b for b, n in counts.items() if n > 1]
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost"
        assert not twice, f"{len(twice)} messages delivered twice: {twice[:5]}"
        assert not list(node.data_path.glob("*.bad"))
        if history:  # the history kept each acknowledged message once too
            urllib.request.urlopen(urllib.request.Request(
                f"http://{node.http_address}/channel/create?topic={topic}&channel=past&from=earliest",
                method="POST"), timeout=30).read()
            replayed = Counter(m.body for m in drain(node.tcp_address, topic, "past", 10**7, quiet=3.0))
            assert not [b for b in acked if b not in replayed]
            assert not [b for b, n in replayed.items() if n > 1]
        assert "Traceback" not in node.log()
    finally:
        node.stop_all()


def test_answers_keep_their_order_on_a_connection_that_mixes_commands(tmp_path):
    """PUBs wait for the flush; a command sent after them on the same connection (here one
    refused with a non-fatal error, then a NOP and another PUB) is answered after them."""
    node = Nsqd(tmp_path / "d", *DURABLE)
    topic = unique_name()
    try:
        w = Wire(node.tcp_address)
        w.identify()
        batch = b"".join([b"PUB %s\n\x00\x00\x00\x01a" % topic.encode()] * 20)
        w.send(batch + b"FIN 0123456789abcdef\nNOP\n" + b"PUB %s\n\x00\x00\x00\x01b" % topic.encode())
        frames = [w.read_frame() for _ in range(21)]
        assert frames[:20] == [Frame(FRAME_TYPE_RESPONSE, b"OK")] * 20
        assert frames[20].frame_type == FRAME_TYPE_ERROR and frames[20].data.startswith(b"E_INVALID")
        # E_INVALID (FIN before SUB) is fatal: the connection closes after it, the PUB behind
        # it is never run, as upstream does
        with pytest.raises(ConnectionError):
            w.read_frame()
        stats = wait_for(lambda: _depth(node, topic) == 20 and _depth(node, topic), 10,
                         "20 messages in the topic")
        assert stats == 20
    finally:
        node.stop()


def _depth(node: Nsqd, topic: str) -> int:
    with urllib.request.urlopen(f"http://{node.http_address}/stats?format=json&topic={topic}") as r:
        topics = json.load(r)["topics"]
    return topics[0]["depth"] if topics else 0


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_refuses_exactly_the_publishes_of_the_failed_batch(tmp_path):
    """Six publishers fill a 512 KiB tmpfs through the group commit: each one refused gets
    E_PUB_FAILED and its message is never delivered; every acknowledged one is; health went
    NOK (a later, smaller batch may fit and restore it), and once space is freed publishing
    works again and /ping says OK."""
    with small_tmpfs(tmp_path) as mnt:
        node = Nsqd(mnt / "d", *DURABLE, "--max-bytes-per-file=50000")
        try:
            _refusals_are_exact(node, mnt / "d")
        finally:
            node.stop()


def _refusals_are_exact(node: Nsqd, data) -> None:
    topic = unique_name()
    sub = Wire(node.tcp_address)
    sub.sub(topic, "ch")  # messages go straight to the channel's disk queue
    sub.close()
    acked: list[bytes] = []
    refused: list[tuple[bytes, bytes]] = []
    lock = threading.Lock()

    def publish(k: int) -> None:
        w = Wire(node.tcp_address, timeout=30)
        for i in range(100):
            body = b"%d-%03d-" % (k, i) + b"z" * 10_000
            w.cmd(b"PUB", topic, body=body)
            frame = w.read_frame()
            with lock:
                if frame.frame_type == FRAME_TYPE_ERROR:
                    refused.append((body, frame.data))
                    return
                acked.append(body)

    threads = [threading.Thread(target=publish, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert refused and all(err.startswith(b"E_PUB_FAILED PUB failed") for _, err in refused)
    assert "health NOK" in node.log()
    got = Counter(m.body for m in drain(node.tcp_address, topic, "ch", 10**6, quiet=2.0))
    assert not [b for b in acked if got[b] != 1]
    assert not [b for b, _ in refused if b in got]
    publishes_again(node, topic, data)
