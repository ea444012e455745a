"""A replication peer through power cuts (docs/replication.md §3, helpers.powercut): the peer's
data path on a disk that loses what was not fsynced, publishers of every kind on the origin, the
peer's power cut at seeded moments, rounds on the same disk; then the origin dies (kill -9) and
the peer adopts its messages.

With ``--sync-every=1`` on the peer an ``OK`` from the origin (sync mode, the default) means the
peer had fsynced the message: every acknowledged message is delivered from the peer after the
adoption, none twice (nothing was consumed, so docs/replication.md §6 allows no duplicate).
"""

from __future__ import annotations

import random

import pytest

from helpers.chaos import drain
from helpers.power_loss import acked, check_kept, cut_round, no_tracebacks, publishers
from helpers.replication import get_json, linked, post, wait_for
from helpers.servers import unique_name

pytestmark = pytest.mark.timeout(600)

ROUNDS = 3


@pytest.mark.parametrize("seed", [4421])
def test_peer_with_sync_every_1_keeps_every_acknowledged_message(power_cut_nsqd, nsqd_factory,
                                                                  seed):
    rng = random.Random(seed)
    peer = power_cut_nsqd("--accept-replicas", "--sync-every=1",
                          "--replication-failover-timeout=2s")
    origin = nsqd_factory(f"--replicate-to={peer.tcp_address}", "--replication-sync-timeout=2s")
    wait_for(lambda: linked(origin), timeout=15, what="link up")
    topic = unique_name("rpl")
    assert post(origin, f"/channel/create?topic={topic}&channel=c") == 200
    everyone: list = []
    for r in range(ROUNDS):
        pubs = publishers(origin, topic, r, per_kind=2)
        everyone += pubs
        report = cut_round(peer, pubs, rng, 100, 500, tear=r % 2 == 1)
        wait_for(lambda: linked(origin), timeout=30, what="the link up again")
        print(f"round {r}: {len(acked(pubs))} acknowledged; cut {report}")
    origin.kill9()
    wait_for(lambda: any(t["topic_name"] == topic
                         for t in get_json(peer, "/stats?format=json")["topics"]),
             timeout=30, what="the peer to adopt the origin's messages")
    kept = drain(peer.tcp_address, topic, "c", idle=2.0, limit=120)
    check_kept(everyone, kept)  # every acknowledged message, none twice
    no_tracebacks(peer.log_since_power_on())
