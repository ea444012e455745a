"""A replication peer through power cuts (docs/replication.md §3, helpers.powercut): the peer's
data path on a disk that loses what was not fsynced, publishers of every kind on the origin, the
peer's power cut at seeded moments, rounds on the same disk; in the last round the origin dies
(kill -9) with the peer's power, so the peer comes back on its disk alone and adopts the
origin's messages (the earlier rounds' too: the origin re-shipped what it held after each relink,
and the peer must have kept it).

With ``--sync-every=1`` on the peer an ``OK`` from the origin (sync mode, the default) means the
peer had fsynced the message (its acks come from the group commit): every acknowledged message is
delivered from the peer after the adoption, none twice (nothing was consumed, so
docs/replication.md §6 allows no duplicate), and nothing is set aside as ``.bad``. A cut comes
after a seeded number of acknowledgements, or armed at a seeded write or fsync of the peer's disk
(inside a group commit's flush); with the directory entries of POSIX (``strict``: the replica's
files are found again only if their directories were fsynced) and of ext4's journal.
"""

from __future__ import annotations

import random

import pytest

from helpers.chaos import drain
from helpers.power_loss import (acked, armed_round, check_kept, cut_round, no_bad_files,
                                no_tracebacks, publishers, seeds)
from helpers.replication import get_json, linked, post, wait_for
from helpers.servers import unique_name

pytestmark = pytest.mark.timeout(600)

ROUNDS = 4


@pytest.mark.parametrize("mode,seed", [("journal", s) for s in seeds(4421, 4423)]
                         + [("strict", s) for s in seeds(4422, 4424)])
def test_peer_with_sync_every_1_keeps_every_acknowledged_message(power_cut_nsqd, nsqd_factory,
                                                                  mode, seed):
    rng = random.Random(seed)
    peer = power_cut_nsqd("--accept-replicas", "--sync-every=1",
                          "--replication-failover-timeout=2s", mode=mode)
    origin = nsqd_factory(f"--replicate-to={peer.tcp_address}", "--replication-sync-timeout=2s")
    wait_for(lambda: linked(origin), timeout=15, what="link up")
    topic = unique_name("rpl")
    assert post(origin, f"/channel/create?topic={topic}&channel=c") == 200
    everyone: list = []
    for r in range(ROUNDS):
        pubs = publishers(origin, topic, r, per_kind=3)
        everyone += pubs
        last = r == ROUNDS - 1
        meanwhile = origin.kill9 if last else None  # the origin dies with the peer's power
        if rng.random() < 0.5:
            report = armed_round(peer, pubs, rng, meanwhile=meanwhile)
        else:
            report = cut_round(peer, pubs, rng, 100, 500, tear=rng.random() < 0.5,
                               meanwhile=meanwhile)
        if not last:
            wait_for(lambda: linked(origin), timeout=30, what="the link up again")
        no_bad_files(peer)
        print(f"round {r}: {len(acked(pubs))} acknowledged; cut {report}")
    wait_for(lambda: any(t["topic_name"] == topic
                         for t in get_json(peer, "/stats?format=json")["topics"]),
             timeout=30, what="the peer to adopt the origin's messages")
    kept = drain(peer.tcp_address, topic, "c", idle=2.0, limit=120)
    check_kept(everyone, kept)  # every acknowledged message, none twice
    no_tracebacks(peer.log_since_power_on())
    no_bad_files(peer)
