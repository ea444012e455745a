"""The history through power cuts (docs/history.md §3, helpers.powercut): a topic's log on a disk
that loses what was not fsynced, publishers of every kind at once (DPUB too: the log keeps it),
the power cut at a seeded moment, several rounds on the same log, segments small enough to roll
in every round.

``--sync-every=1``: every acknowledged message is in the log after the restart, once, in each
publisher's order; a torn block is cut (its CRC), never read. With the directory entries of POSIX
(``strict``: a new segment's name is durable only once its directory is fsynced) as well as of
ext4's journal. ``--sync-every=N``: the log up to its last background fsync, so per publisher a
prefix of what it sent, and everything acknowledged before an idle ``--sync-timeout``.
"""

from __future__ import annotations

import random

import pytest

from helpers.power_loss import (acked, check_kept, check_prefixes, cut_round, lost,
                                publish_then_idle, publishers)
from helpers.servers import unique_name

from .history_util import read

pytestmark = pytest.mark.timeout(600)

ROUNDS = 4
#: segments of 25 KB (an eighth of the cap): a round's messages fill one or two, and the log,
#: under the cap, never expires what a later round checks
SMALL_SEGMENTS = ("--retention=1h", "--retention-bytes=200000")


def _bodies(node, topic: str) -> list[bytes]:
    return [m.body for m in read(node, topic)]


def _segments(node, topic: str) -> int:
    return len(list((node.data / f"{topic}.history").glob("*.seg")))


@pytest.mark.parametrize("mode,seed", [("journal", 4411), ("strict", 4412)])
def test_sync_every_1_keeps_every_acknowledged_message(power_cut_nsqd, mode, seed):
    rng = random.Random(seed)
    node = power_cut_nsqd(*SMALL_SEGMENTS, "--sync-every=1", mode=mode)
    topic = unique_name("hpl")
    everyone: list = []
    for r in range(ROUNDS):
        pubs = publishers(node, topic, r, per_kind=2)
        everyone += pubs
        report = cut_round(node, pubs, rng, 100, 500, tear=r % 2 == 1)
        kept = _bodies(node, topic)
        check_kept(everyone, kept)  # every acknowledged one, once; a torn block is never read
        order = {b: i for i, b in enumerate(kept)}
        for p in pubs:  # the log keeps each publisher's order
            positions = [order[b] for b in p.acked]
            assert positions == sorted(positions), f"{p.tag}: out of order"
        print(f"round {r}: {len(acked(pubs))} acknowledged, {len(kept)} in the log, "
              f"{_segments(node, topic)} segments; cut {report}")
    assert _segments(node, topic) >= 2  # the rounds rolled segments


@pytest.mark.parametrize("seed", [4413])
def test_sync_every_n_keeps_the_log_up_to_its_last_fsync(power_cut_nsqd, seed):
    rng = random.Random(seed)
    node = power_cut_nsqd(*SMALL_SEGMENTS, "--sync-every=200", "--sync-timeout=300ms")
    topic = unique_name("hpln")
    everyone: list = []
    for r in range(ROUNDS):
        early = publish_then_idle(node, topic, r * 2)
        everyone += early
        pubs = publishers(node, topic, r * 2 + 1, per_kind=2)
        everyone += pubs
        report = cut_round(node, pubs, rng, 100, 500, tear=r % 2 == 1)
        kept = _bodies(node, topic)
        assert not lost(early, kept), "acknowledged before an idle --sync-timeout, and lost"
        check_kept(everyone, kept, complete=False)  # none twice, no torn block read
        if not report["tear"]:
            check_prefixes(pubs, kept)
        print(f"round {r}: {len(acked(pubs))} acknowledged in the cut round, "
              f"{len(lost(pubs, kept))} lost; cut {report}")
