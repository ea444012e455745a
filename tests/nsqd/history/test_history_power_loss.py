"""The history through power cuts (docs/history.md §3, helpers.powercut): a topic's log on a disk
that loses what was not fsynced, publishers of every kind at once (DPUB too: the log keeps it),
the power cut at a seeded moment, several rounds on the same log, segments small enough to roll
in every round.

``--sync-every=1``: every acknowledged message is in the log after the restart, once, in each
publisher's order; a torn block is cut (its CRC), never read, and nothing is set aside as
``.bad``. With the directory entries of POSIX (``strict``: a new segment's name is durable only
once its directory is fsynced) as well as of ext4's journal. The cut comes after a seeded number
of acknowledgements, or *armed*: the disk cuts itself at a seeded write or fsync of a segment,
inside a group commit's ``pwritev`` or ``fdatasync``, with segments of 4 KiB that nearly every
batch rolls. ``--sync-every=N``: the log up to its last background fsync, so per publisher a
prefix of what it sent, and everything acknowledged before an idle ``--sync-timeout``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

from helpers.power_loss import (acked, armed_round, check_kept, check_prefixes, cut_round, lost,
                                no_bad_files, publish_then_idle, publishers, seeds)
from helpers.servers import unique_name

from .history_util import read

pytestmark = pytest.mark.timeout(600)

ROUNDS = 4
#: segments of 25 KB (an eighth of the cap): a round's messages fill one or two, and the log,
#: under the cap, never expires what a later round checks
SMALL_SEGMENTS = ("--retention=1h", "--retention-bytes=200000")
#: segments of 4 KiB (the smallest): a batch of the round's publishers rolls one every few
#: batches; the cap (32 KiB) expires the oldest segments as the rounds go on
TINY_SEGMENTS = ("--retention=1h", "--retention-bytes=32768")


def _bodies(node, topic: str) -> list[bytes]:
    return [m.body for m in read(node, topic)]


def _segments(node, topic: str) -> int:
    return len(list((node.data / f"{topic}.history").glob("*.seg")))


def _in_order(pubs: list, kept: list[bytes]) -> None:
    order = {b: i for i, b in enumerate(kept)}
    for p in pubs:  # the log keeps each publisher's order
        positions = [order[b] for b in p.acked if b in order]
        assert positions == sorted(positions), f"{p.tag}: out of order"


def _rounds(node, topic: str, cut: Callable[[list], dict]
            ) -> Iterator[tuple[list, list, list[bytes]]]:
    """Rounds of publishers of every kind; ``cut(pubs)`` runs one to its power cut and back.
    Yields the round's publishers, every round's so far, and what the log holds after it; the
    log opened cleanly (nothing set aside as ``.bad``)."""
    everyone: list = []
    for r in range(ROUNDS):
        pubs = publishers(node, topic, r, per_kind=3)
        everyone += pubs
        report = cut(pubs)
        kept = _bodies(node, topic)
        no_bad_files(node)
        yield pubs, everyone, kept
        print(f"round {r}: {len(acked(pubs))} acknowledged, {len(kept)} in the log, "
              f"{_segments(node, topic)} segments; cut {report}")


@pytest.mark.parametrize("mode,seed", [("journal", s) for s in seeds(4411)]
                         + [("strict", s) for s in seeds(4412)])
def test_sync_every_1_keeps_every_acknowledged_message(power_cut_nsqd, mode, seed):
    rng = random.Random(seed)
    node = power_cut_nsqd(*SMALL_SEGMENTS, "--sync-every=1", mode=mode)
    topic = unique_name("hpl")
    cuts = iter(range(ROUNDS))
    for pubs, everyone, kept in _rounds(
            node, topic, lambda pubs: cut_round(node, pubs, rng, 100, 500, next(cuts) % 2 == 1)):
        check_kept(everyone, kept)  # every acknowledged one, once; a torn block is never read
        _in_order(pubs, kept)
    assert _segments(node, topic) >= 2  # the rounds rolled segments


@pytest.mark.parametrize("mode,seed", [("journal", s) for s in seeds(4414)]
                         + [("strict", s) for s in seeds(4415)])
def test_armed_cuts_inside_the_group_commit(power_cut_nsqd, mode, seed):
    """The disk cuts itself at a seeded write or fsync of a segment, torn or not. The cap
    expires the oldest segments, so of each publisher the log keeps a suffix of what it sent:
    what is missing of its acknowledged messages comes before everything kept of it, and its
    last acknowledged message is there."""
    rng = random.Random(seed)
    node = power_cut_nsqd(*TINY_SEGMENTS, "--sync-every=1", mode=mode)
    topic = unique_name("hpla")
    for pubs, everyone, kept in _rounds(
            node, topic, lambda pubs: armed_round(node, pubs, rng, match=".seg", rolls=True)):
        check_kept(everyone, kept, complete=False)  # none twice; a torn block is never read
        have = set(kept)
        for p in pubs:
            present = [b in have for b in p.acked]
            assert not present or present[-1], f"{p.tag}: its last acknowledged message lost"
            first = present.index(True) if True in present else len(present)
            assert all(present[first:]), f"{p.tag}: an acknowledged message lost after " \
                                         f"{p.acked[first]!r}, which is kept"
        _in_order(pubs, kept)


@pytest.mark.parametrize("seed", seeds(4413))
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
        no_bad_files(node)
        print(f"round {r}: {len(acked(pubs))} acknowledged in the cut round, "
              f"{len(lost(pubs, kept))} lost; cut {report}")
