"""The disk queue through power cuts (helpers.powercut): nsqd's data path on a disk that loses
what was not fsynced, publishers of every kind at once, the power cut at a seeded moment, several
rounds on the same disk.

With ``--mem-queue-size=0 --sync-every=1`` every acknowledged message is on the disk before its
``OK``: all of them come back, none twice, and no file is ever set aside as ``.bad`` (a torn tail
is cut in place). The cut comes after a seeded number of acknowledgements, or *armed*: the disk
cuts itself at a seeded write or fsync, inside a group commit's ``pwritev`` or ``fdatasync``,
with files small enough that batches roll them. With ``--sync-every=N`` what comes back is each
queue up to its last sync (docs/operations.md, "Power loss"): per publisher a prefix of what it
sent, and everything acknowledged before an idle ``--sync-timeout``. A DPUB waits in memory until
it is due, as upstream's does, so a cut may take an acknowledged one; never twice.
"""

from __future__ import annotations

import random

import pytest

from helpers.chaos import TcpConsumer, drain
from helpers.power_loss import (acked, armed_round, check_kept, check_prefixes,
                                check_refused_not_kept, cut_round, lost, no_bad_files,
                                publish_then_idle, publishers, seeds, wait_persisted)
from helpers.replication import post
from helpers.servers import unique_name

pytestmark = pytest.mark.timeout(600)

KINDS = ("pub", "mpub", "hpub", "hmpub")  # those the disk queue keeps from their OK on
ROUNDS = 4


def _round(node, topic: str, channel: str, r: int, rng: random.Random, consume: bool,
           tear: bool):
    """One round: publishers of every kind (and maybe a consumer) until the cut; power on;
    drain."""
    pubs = publishers(node, topic, r, per_kind=3)
    consumer = TcpConsumer(node.tcp_address, topic, channel, rdy=20) if consume else None
    if consumer:
        consumer.start()
    report = cut_round(node, pubs, rng, 100, 600, tear)
    if consumer:  # (it may have taken a few from the nsqd started again: they count as taken)
        consumer.stop.set()
        consumer.join(30)
    kept = drain(node.tcp_address, topic, channel, idle=2.0, limit=120)
    return pubs, (consumer.got if consumer else []), kept, report


@pytest.mark.parametrize("seed", seeds(4401, 4403))
def test_sync_every_1_keeps_every_acknowledged_message(power_cut_nsqd, seed):
    rng = random.Random(seed)
    node = power_cut_nsqd("--mem-queue-size=0", "--sync-every=1")
    topic, channel = unique_name("pl"), "c"
    assert post(node, f"/channel/create?topic={topic}&channel={channel}") == 200
    wait_persisted(node, topic, channel)
    for r in range(ROUNDS):
        pubs, before, kept, report = _round(node, topic, channel, r, rng, consume=r % 2 == 1,
                                             tear=r % 4 >= 2)
        assert len(acked(pubs)) >= report["target"]
        # consumed before the cut, or delivered after it; a message consumed just before the
        # cut may come again (its FIN, or the read position, was not on the disk yet)
        torn = report["torn_files"]  # a torn record that was never acknowledged may be read
        check_kept(pubs, before + kept, exactly_once=False, torn=torn, deferred_kept=False)
        check_kept(pubs, kept, complete=False, torn=torn)  # but nothing twice from the disk
        check_refused_not_kept(pubs, before + kept)
        no_bad_files(node)


@pytest.mark.parametrize("mode,seed", [("journal", s) for s in seeds(4404)]
                         + [("strict", s) for s in seeds(4405)])
def test_armed_cuts_inside_the_group_commit(power_cut_nsqd, mode, seed):
    """The disk cuts itself at a seeded write or fsync (of the queue files, or of anything),
    torn or not: a batch's ``pwritev`` stops between two of its pages, or its ``fdatasync``
    never happens; files of 4 KiB roll every few batches (each new file's name made durable by
    the batch, which ``strict`` checks), two channels take every message. Each channel keeps
    every acknowledged message once."""
    rng = random.Random(seed)
    node = power_cut_nsqd("--mem-queue-size=0", "--sync-every=1", "--max-bytes-per-file=4096",
                          mode=mode)
    topic, channels = unique_name("pla"), ("c1", "c2")
    for channel in channels:
        assert post(node, f"/channel/create?topic={topic}&channel={channel}") == 200
    wait_persisted(node, topic, *channels)
    for r in range(ROUNDS):
        pubs = publishers(node, topic, r, per_kind=2, kinds=KINDS + ("dpub", "bigmpub"))
        report = armed_round(node, pubs, rng, match=rng.choice(("", ".diskqueue.0")), rolls=True)
        for channel in channels:
            kept = drain(node.tcp_address, topic, channel, idle=2.0, limit=120)
            check_kept(pubs, kept, torn=report["torn_files"], deferred_kept=False)
        no_bad_files(node)
        print(f"round {r}: {len(acked(pubs))} acknowledged; cut {report}")


@pytest.mark.parametrize("seed", seeds(4402))
def test_sync_every_n_keeps_each_queue_up_to_its_last_sync(power_cut_nsqd, seed):
    rng = random.Random(seed)
    node = power_cut_nsqd("--mem-queue-size=0", "--sync-every=200", "--sync-timeout=300ms")
    topic, channel = unique_name("pln"), "c"
    assert post(node, f"/channel/create?topic={topic}&channel={channel}") == 200
    wait_persisted(node, topic, channel)
    for r in range(ROUNDS):
        early = publish_then_idle(node, topic, r * 2, KINDS)
        pubs = publishers(node, topic, r * 2 + 1, per_kind=3, kinds=KINDS)
        report = cut_round(node, pubs, rng, 100, 600, tear=r % 2 == 1)
        kept = drain(node.tcp_address, topic, channel, idle=2.0, limit=120)
        assert not lost(early, kept), "acknowledged before an idle --sync-timeout, and lost"
        check_kept(early + pubs, kept, complete=False, torn=report["torn_files"],
                   torn_acked=True)  # nothing twice, nothing unsent but a torn record
        if not report["tear"]:
            check_prefixes(pubs, kept)
        no_bad_files(node)
        print(f"round {r}: {len(acked(pubs))} acknowledged in the cut round, "
              f"{len(lost(pubs, kept))} lost; cut {report}")
