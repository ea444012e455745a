"""The group commit through power cuts and failing disks (helpers.powercut), with everything that
writes through it at once: a topic that keeps history (``--retention``) and fans out to channels
whose queues are on disk (``--mem-queue-size=0``), ``--sync-every=1``, publishers of every kind.

One batch holds the history's block and every channel's queue records of the same publishes, so
a cut between two of its files' writes or fsyncs leaves some files with a publish and others
without: never one that was acknowledged. A full disk (ENOSPC, short writes) or a failed fsync
refuses exactly the publishes of the batch it hit: none of them is kept anywhere, even after a
later power cut, and every acknowledged one is, once, in every channel and in the history.
"""

from __future__ import annotations

import os
import random
import urllib.error
import urllib.request

import pytest

from helpers.chaos import drain
from helpers.polling import wait_for
from helpers.power_loss import (KINDS, acked, armed_round, check_kept, check_refused_not_kept,
                                no_bad_files, no_tracebacks, publishers, refused, seeds,
                                wait_persisted)
from helpers.replication import post
from helpers.servers import unique_name
from helpers.wire import Wire
from nsqd.history.history_util import read
from nsqpy.nsqd.storage.files import fsync_dir, makedirs_durable

pytestmark = pytest.mark.timeout(600)

#: the history's segments stay large (no cap): its rolls are the history tests' part; the
#: queue files roll every few batches
FLAGS = ("--mem-queue-size=0", "--sync-every=1", "--retention=1h", "--max-bytes-per-file=8192")
CHANNELS = ("c1", "c2", "c3")
ROUNDS = 4


def _setup(node) -> str:
    topic = unique_name("gpl")
    for channel in CHANNELS:
        assert post(node, f"/channel/create?topic={topic}&channel={channel}") == 200
    wait_persisted(node, topic, *CHANNELS)
    return topic


def _history(node, topic: str) -> list[bytes]:
    return [m.body for m in read(node, topic)]


def _check_everywhere(node, topic: str, pubs: list, everyone: list, torn: int) -> dict:
    """Each channel: every acknowledged message of this round (but DPUBs, deferred in memory)
    once; the history: every acknowledged message of every round once (DPUBs too)."""
    kept = {}
    for channel in CHANNELS:
        kept[channel] = drain(node.tcp_address, topic, channel, idle=2.0, limit=120)
        check_kept(pubs, kept[channel], torn=torn, deferred_kept=False)
    kept["history"] = _history(node, topic)
    check_kept(everyone, kept["history"])  # CRC'd blocks: no torn copy is ever read
    return kept


@pytest.mark.parametrize("mode,seed", [("journal", s) for s in seeds(4431)]
                         + [("strict", s) for s in seeds(4432)])
def test_history_and_channel_queues_through_armed_cuts(power_cut_nsqd, mode, seed):
    """Cuts at a seeded write or fsync of the queues, the segment or anything, or at the
    directory fsync of a new queue file, torn or not, with large MPUBs whose ``pwritev`` spans
    pages."""
    rng = random.Random(seed)
    node = power_cut_nsqd(*FLAGS, mode=mode)
    topic = _setup(node)
    everyone: list = []
    for r in range(ROUNDS):
        pubs = publishers(node, topic, r, per_kind=2, kinds=KINDS + ("bigmpub",))
        everyone += pubs
        report = armed_round(node, pubs, rng, match=rng.choice(("", ".diskqueue.0", ".seg")),
                             rolls=True)
        _check_everywhere(node, topic, pubs, everyone, report["torn_files"])
        no_bad_files(node)
        print(f"round {r}: {len(acked(pubs))} acknowledged; cut {report}")


def _ping(node) -> bytes:
    try:
        with urllib.request.urlopen(f"http://{node.http_address}/ping", timeout=10) as resp:
            return resp.read()
    except urllib.error.HTTPError as err:
        return err.read()


@pytest.mark.parametrize("seed", seeds(4433))
def test_a_full_disk_refuses_exactly_the_publishes_it_held(power_cut_nsqd, seed):
    """The disk fills up under publishers of every kind (a seeded room left: a batch's
    ``pwritev`` is cut short, the next gets ENOSPC): those refused are never delivered nor
    kept in the history, those acknowledged are; health goes NOK. Space comes back: publishing
    goes on, /ping says OK. Then the power goes: still the same."""
    rng = random.Random(seed)
    node = power_cut_nsqd(*FLAGS)
    topic = _setup(node)
    pubs = publishers(node, topic, 0, per_kind=2, kinds=KINDS + ("bigmpub",))
    for p in pubs:
        p.start()
    try:
        wait_for(lambda: len(acked(pubs)) >= 300, 60, "300 acknowledged publishes")
        node.fs.limit(node.fs.stats()["used"] + rng.randint(4_000, 60_000))
        wait_for(lambda: node.fs.stats()["enospc"] >= 5, 60, "5 writes refused by the full disk")
        assert "health NOK" in node.node.log()  # (a smaller batch may fit and restore it)
        before = len(acked(pubs))
        node.fs.limit(None)
        wait_for(lambda: len(acked(pubs)) >= before + 300, 60,
                 "300 more acknowledged publishes once space came back")
    finally:
        for p in pubs:
            p.stop.set()
        for p in pubs:
            p.join(30)
    wait_for(lambda: _ping(node) == b"OK", 10, "/ping to say OK again")
    stats = node.fs.stats()
    assert stats["enospc"] > 0
    print(f"{len(acked(pubs))} acknowledged, {len(refused(pubs))} refused "
          f"({sorted({k for p in pubs for k in p.errors})}), {stats['enospc']} ENOSPC")
    kept = _check_everywhere(node, topic, pubs, pubs, 0)
    for bodies in kept.values():
        check_refused_not_kept(pubs, bodies)
    # the power goes: what was refused stays gone, what was acknowledged stays
    for p in pubs:
        p.acked.clear()  # (consumed from the channels above)
    node.power_cut(tear=True, seed=rng.randrange(1 << 32))
    node.power_on()
    no_tracebacks(node.log_since_power_on())
    history = _history(node, topic)
    check_refused_not_kept(pubs, history)
    assert set(kept["history"]) <= set(history)
    no_bad_files(node)


def test_a_failed_fsync_leaves_no_refused_publish_on_disk(power_cut_nsqd):
    """A batch's history block is fsynced, then a channel queue's fsync fails: the publish is
    refused, and the block cut back out of the segment. The cut-back must reach the disk too:
    a power cut before the segment's next fsync must not bring the refused message back."""
    node = power_cut_nsqd(*FLAGS)
    topic = _setup(node)
    w = Wire(node.tcp_address)
    w.pub(topic, b"kept")
    node.fs.fail_fsyncs(1, match=".diskqueue.0")
    w.cmd(b"PUB", topic, body=b"refused")
    frame = w.read_frame()
    assert frame.data.startswith(b"E_PUB_FAILED"), frame
    w.close()
    node.power_cut(tear=False, seed=0)
    node.power_on()
    assert _history(node, topic) == [b"kept"]
    for channel in CHANNELS:
        assert drain(node.tcp_address, topic, channel, idle=1.0, limit=30) == [b"kept"]
    no_bad_files(node)


def test_directories_made_durable_survive_a_cut_under_posix_rules(power_cut_fs):
    """``makedirs_durable`` (the replica store's directories, `replicas/<origin>/<incarnation>`)
    fsyncs the parent of each directory it makes: on a disk that keeps a new name only through
    its directory's fsync (strict), a file fsynced in them is found again after a cut; one in
    directories made by ``os.makedirs`` is not."""
    fs = power_cut_fs("strict")
    root = fs.mount()
    (root / "data").mkdir()
    fs.sync()
    for name, make in (("durable", makedirs_durable), ("plain", os.makedirs)):
        where = root / "data" / name / "origin" / "incarnation"
        make(str(where))
        fd = os.open(where / "00000000.log", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b"copy")
        os.fsync(fd)
        os.close(fd)
        fsync_dir(str(where))
    fs.cut()
    root = fs.mount()
    assert (root / "data/durable/origin/incarnation/00000000.log").read_bytes() == b"copy"
    assert not (root / "data" / "plain").exists()
