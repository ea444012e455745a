"""A message nsqd already holds survives a kill -9 once it moved into a disk queue, with
``--sync-every=1`` as without (issue #44): a REQ'd message, a deferred one coming due, the topic's
backlog pumped into a new channel. The group commit flushes them with its batch, but their bytes
reach the file before the loop moves on (go-diskqueue's ``Put`` writes before it returns).

The gap this closes needed a busy machine to show (the requeue waited behind the batch being
flushed, and the next message went out before the writer thread wrote it). Here the disk is slow
on purpose: nsqd runs from a launcher whose group-commit ``fdatasync`` waits while a *hold* file
exists, so a batch stays in flight while the test requeues, sees the next command answered, and
kills nsqd. Everything else is real: the nsqd process, its sockets, SIGKILL, the restart on the
same data path by an ordinary nsqd.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers.polling import wait_for
from helpers.servers import Nsqd, unique_name
from helpers.wire import Wire
from nsqd.history.history_util import read
from nsqd.lifecycle.lifecycle_util import channel_stats, http, make_channel, topic_stats
from nsqpy.protocol.frames import FRAME_TYPE_MESSAGE
from nsqpy.protocol.message import decode_message

pytestmark = pytest.mark.timeout(90)

FLAGS = ("--mem-queue-size=0", "--sync-every=1")

_LAUNCHER = """#!{python}
import os, sys, time
import nsqpy.nsqd.storage.commit as commit
from nsqpy.nsqd.main import main

HOLD = {hold!r}
_fdatasync = commit.fdatasync

def slow_disk(fd):
    # a disk that takes its time: the flush waits while the test holds it
    if os.path.exists(HOLD):
        open(HOLD + ".waiting", "w").close()
        while os.path.exists(HOLD):
            time.sleep(0.002)
    _fdatasync(fd)

commit.fdatasync = slow_disk
sys.exit(main())
"""


class SlowDisk:
    """nsqd on a disk whose group-commit flushes wait while :meth:`hold` is on; keeps the
    nodes and connections it made, to stop and close them."""

    def __init__(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.hold_file = where / "hold"
        launcher = where / "nsqd"
        launcher.write_text(_LAUNCHER.format(python=sys.executable, hold=str(self.hold_file)))
        launcher.chmod(0o755)
        self.nsqd = type("SlowDiskNsqd", (Nsqd,), {"bin_dir": where})
        self.nodes: list[Nsqd] = []
        self.wires: list[Wire] = []

    def start(self, directory: Path, *flags: str) -> Nsqd:
        self.nodes.append(self.nsqd(directory, *flags))
        return self.nodes[-1]

    def wire(self, node: Nsqd) -> Wire:
        self.wires.append(Wire(node.tcp_address))
        return self.wires[-1]

    def hold(self, node: Nsqd) -> None:
        """Hold the disk and put a batch in flight (a publish to a topic of its own, whose OK
        does not come while held)."""
        self.hold_file.touch()
        self.wire(node).cmd(b"PUB", unique_name("inflight"), body=b"x")
        waiting = Path(str(self.hold_file) + ".waiting")
        wait_for(waiting.exists, 10, "a batch to wait in its fdatasync")

    def crash(self, node: Nsqd, *flags: str) -> Nsqd:
        """kill -9 (the disk still held), then an ordinary nsqd on the same data path."""
        node.kill9()
        self.close()
        self.nodes.append(Nsqd(node.directory, *flags))
        return self.nodes[-1]

    def close(self) -> None:
        self.hold_file.unlink(missing_ok=True)
        for w in self.wires:
            w.close()
        self.wires = []


def _saved_read_pos(node: Nsqd, queue: str) -> int:
    """The read position a disk queue's metadata holds on disk (go-diskqueue's format)."""
    try:
        text = (node.data_path / f"{queue}.diskqueue.meta.dat").read_bytes()
        return int(text.split(b"\n")[1].split(b",")[1])
    except (OSError, IndexError, ValueError):
        return -1


def _wait_saved_past(node: Nsqd, queue: str, pos: int) -> None:
    """Wait until the queue's metadata on disk says it handed out everything before ``pos``:
    from then on, a message it handed out is only where nsqd put it since."""
    wait_for(lambda: _saved_read_pos(node, queue) >= pos, 10, f"{queue}'s metadata to pass {pos}")


def _bodies(node: Nsqd, topic: str, channel: str) -> list[bytes]:
    """Everything the channel delivers (each FINed) until it is quiet. A message the crash
    left both before the read position it saved and requeued after it comes twice, under one
    id (at-least-once): the second FIN of that id is refused, which is no concern here."""
    w = Wire(node.tcp_address)
    w.sub(topic, channel, rdy=100)
    w.sock.settimeout(1.5)
    got = []
    try:
        while True:
            frame = w.read_frame()
            if frame.frame_type == FRAME_TYPE_MESSAGE:
                m = decode_message(frame.data)
                got.append(m.body)
                w.cmd(b"FIN", m.id)
            else:
                assert frame.data.startswith(b"E_FIN_FAILED"), frame
    except OSError:  # quiet (socket.timeout included)
        pass
    w.close()
    return got


@pytest.fixture
def disk(tmp_path):
    disk = SlowDisk(tmp_path / "launcher")
    yield disk
    disk.close()
    for node in disk.nodes:
        node.stop()


def _consumer(disk: SlowDisk, node: Nsqd, topic: str, bodies: list[bytes]) -> tuple[Wire, object]:
    """``bodies`` published to ``topic`` (whose channel "ch" exists), a consumer of "ch" with
    RDY 1, and the first message it got."""
    disk.wire(node).mpub(topic, bodies)
    c = disk.wire(node)
    c.sub(topic, "ch", rdy=1)
    return c, c.read_message()


def test_a_requeued_message_survives_kill9_once_the_next_message_is_out(disk, tmp_path):
    node = disk.start(tmp_path / "d", *FLAGS)
    topic = unique_name()
    make_channel(node, topic, "ch")
    bodies = [b"m%d" % i for i in range(4)]
    c, first = _consumer(disk, node, topic, bodies)
    disk.hold(node)
    c.cmd(b"REQ", first.id, "0")
    second = c.read_message()  # sent after the REQ was processed (RDY 1)
    assert second.body == bodies[1]
    _wait_saved_past(node, f"{topic}:ch", 4 + 26 + len(first.body))
    after = _bodies(disk.crash(node, *FLAGS), topic, "ch")
    # the message in flight at the kill (the second) may be lost, as upstream loses it
    assert first.body in after, after
    assert set(after) >= {bodies[0], bodies[2], bodies[3]}


def test_a_deferred_message_coming_due_survives_kill9(disk, tmp_path):
    node = disk.start(tmp_path / "d", *FLAGS)
    topic = unique_name()
    make_channel(node, topic, "ch")
    c, first = _consumer(disk, node, topic, [b"deferred", b"other"])
    disk.hold(node)
    c.cmd(b"REQ", first.id, "300")  # deferred in memory, due in 0.3 s
    assert c.read_message().body == b"other"
    # the scan moves it into the disk queue once due; /stats answers after it did
    wait_for(lambda: channel_stats(node, topic, "ch")["deferred_count"] == 0, 10,
             "the deferred message to come due")
    _wait_saved_past(node, f"{topic}:ch", 4 + 26 + len(first.body))
    assert b"deferred" in _bodies(disk.crash(node, *FLAGS), topic, "ch")


def test_a_topic_backlog_pumped_into_a_new_channel_survives_kill9(disk, tmp_path):
    node = disk.start(tmp_path / "d", *FLAGS)
    topic = unique_name()
    bodies = [b"b%03d" % i for i in range(20)]
    disk.wire(node).mpub(topic, bodies)  # no channel yet: it waits in the topic's queue
    disk.hold(node)
    assert http(node, "POST", f"/channel/create?topic={topic}&channel=ch")[0] == 200
    wait_for(lambda: topic_stats(node, topic)["depth"] == 0, 10, "the pump to empty the topic")
    # the topic's queue has handed the messages out: its metadata says so on disk
    _wait_saved_past(node, topic, sum(4 + 26 + len(b) for b in bodies))
    assert sorted(_bodies(disk.crash(node, *FLAGS), topic, "ch")) == bodies


@pytest.mark.parametrize("history", [False, True], ids=["queues", "history"])
def test_a_dead_letter_survives_kill9_once_the_next_message_is_out(disk, tmp_path, history):
    """Dead-lettering moves the message out of flight into the dead-letter topic; with the
    history on, its block and its fan-out to the channels both happen before nsqd moves on (a
    dead letter is no publish whose answer could wait for them)."""
    flags = (*FLAGS, "--max-attempts=1", *(["--retention=1h"] if history else []))
    node = disk.start(tmp_path / "d", *flags)
    topic = unique_name()
    dead = f"{topic}.dead"
    make_channel(node, topic, "ch")
    make_channel(node, dead, "dl")
    c, first = _consumer(disk, node, topic, [b"poison", b"next"])
    disk.hold(node)
    c.cmd(b"REQ", first.id, "0")  # its one attempt is spent: dead-lettered
    assert c.read_message().body == b"next"
    _wait_saved_past(node, f"{topic}:ch", 4 + 26 + len(first.body))
    node = disk.crash(node, *flags)
    assert b"poison" in _bodies(node, dead, "dl")
    if history:  # its block was in the dead-letter topic's segment too
        assert [m.body for m in read(node, dead)] == [b"poison"]
