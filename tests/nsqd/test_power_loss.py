"""The disk queue through power cuts (helpers.powercut): nsqd's data path on a disk that loses
what was not fsynced, publishers of every kind at once, the power cut at a seeded moment, several
rounds on the same disk.

With ``--mem-queue-size=0 --sync-every=1`` every acknowledged message is on the disk before its
``OK``: all of them come back, none twice. With ``--sync-every=N`` what comes back is each queue
up to its last sync (docs/operations.md, "Power loss"): per publisher a prefix of what it sent,
and everything acknowledged before an idle ``--sync-timeout``. DPUB is left out: a deferred
message waits in memory until it is due, as upstream's does, so a crash loses it.
"""

from __future__ import annotations

import random

import pytest

from helpers.chaos import TcpConsumer, drain
from helpers.power_loss import (acked, bad_files, check_kept, check_prefixes, cut_round, lost,
                                publish_then_idle, publishers, wait_persisted)
from helpers.replication import post
from helpers.servers import unique_name

pytestmark = pytest.mark.timeout(600)

KINDS = ("pub", "mpub", "hpub", "hmpub")  # no DPUB: deferred messages live in memory
ROUNDS = 4


def _round(node, topic: str, channel: str, r: int, rng: random.Random, consume: bool,
           tear: bool):
    """One round: publishers (and maybe a consumer) until the cut; power on; drain."""
    pubs = publishers(node, topic, r, per_kind=3, kinds=KINDS)
    consumer = TcpConsumer(node.tcp_address, topic, channel, rdy=20) if consume else None
    if consumer:
        consumer.start()
    report = cut_round(node, pubs, rng, 100, 600, tear)
    if consumer:  # (it may have taken a few from the nsqd started again: they count as taken)
        consumer.stop.set()
        consumer.join(30)
    kept = drain(node.tcp_address, topic, channel, idle=2.0, limit=120)
    return pubs, (consumer.got if consumer else []), kept, report


def _opened_cleanly(node, report: dict, seen_bad: set[str]) -> None:
    """A file set aside as ``.bad`` only after a cut that tore a page: what the disk kept of a
    cut without tearing is whole records, read to the end."""
    new = bad_files(node.data) - seen_bad
    assert not new or report["torn_files"], f"{sorted(new)} after a cut that tore nothing"
    seen_bad |= new


@pytest.mark.parametrize("seed", [4401, 4403])
def test_sync_every_1_keeps_every_acknowledged_message(power_cut_nsqd, seed):
    rng = random.Random(seed)
    node = power_cut_nsqd("--mem-queue-size=0", "--sync-every=1")
    topic, channel = unique_name("pl"), "c"
    assert post(node, f"/channel/create?topic={topic}&channel={channel}") == 200
    wait_persisted(node, topic, channel)
    seen_bad: set[str] = set()
    for r in range(ROUNDS):
        pubs, before, kept, report = _round(node, topic, channel, r, rng, consume=r % 2 == 1,
                                             tear=r % 4 >= 2)
        assert len(acked(pubs)) >= report["target"]
        # consumed before the cut, or delivered after it; a message consumed just before the
        # cut may come again (its FIN, or the read position, was not on the disk yet)
        torn = report["torn_files"]  # a torn record that was never acknowledged may be read
        check_kept(pubs, before + kept, exactly_once=False, torn=torn)
        check_kept(pubs, kept, complete=False, torn=torn)  # but nothing twice from the disk
        _opened_cleanly(node, report, seen_bad)


@pytest.mark.parametrize("seed", [4402])
def test_sync_every_n_keeps_each_queue_up_to_its_last_sync(power_cut_nsqd, seed):
    rng = random.Random(seed)
    node = power_cut_nsqd("--mem-queue-size=0", "--sync-every=200", "--sync-timeout=300ms")
    topic, channel = unique_name("pln"), "c"
    assert post(node, f"/channel/create?topic={topic}&channel={channel}") == 200
    wait_persisted(node, topic, channel)
    seen_bad: set[str] = set()
    for r in range(ROUNDS):
        early = publish_then_idle(node, topic, r * 2, KINDS)
        pubs, _, kept, report = _round(node, topic, channel, r * 2 + 1, rng, consume=False,
                                      tear=r % 2 == 1)
        assert not lost(early, kept), "acknowledged before an idle --sync-timeout, and lost"
        check_kept(early + pubs, kept, complete=False, torn=report["torn_files"],
                   torn_acked=True)  # nothing twice, nothing unsent but a torn record
        if not report["tear"]:
            check_prefixes(pubs, kept)
        print(f"round {r}: {len(acked(pubs))} acknowledged in the cut round, "
              f"{len(lost(pubs, kept))} lost; cut {report}")
        _opened_cleanly(node, report, seen_bad)
