"""Either side of a replication link stopped (SIGSTOP) for longer than every timer of the link,
then resumed (issue #25): the side that was stopped must not blame the other for its own absence
(before the fix a thawed peer closed a healthy link, "no data for 5.0s, closing the link", because
its idle timer ran before it read what waited on its socket), and nothing acknowledged is lost:
once the link is back, the origin is killed -9 and the peer's adoption delivers every
acknowledged message."""

from __future__ import annotations

import os
import signal
import time

import pytest

from helpers.chaos import TcpPublisher, drain
from helpers.replication import get_json, linked, post, wait_for
from helpers.servers import unique_name

pytestmark = pytest.mark.timeout(120)

FREEZE = 6.5  # longer than the peer's idle timeout and the origin's ack timeout (5 s each)


def settled(a) -> bool:
    rep = get_json(a, "/stats?format=json")["replication"]
    return rep["state"] == "up" and rep["unacked_batches"] == 0


@pytest.mark.parametrize("frozen", ["peer", "origin"])
def test_a_frozen_side_does_not_close_the_link_and_nothing_acked_is_lost(nsqd_factory, frozen):
    b = nsqd_factory("--accept-replicas", "--sync-every=1", "--replication-failover-timeout=600s")
    a = nsqd_factory(f"--replicate-to={b.tcp_address}", "--sync-every=1")
    wait_for(lambda: linked(a), what="link up")
    topic = unique_name()
    assert post(a, f"/channel/create?topic={topic}&channel=c") == 200
    pubs = [TcpPublisher(a.tcp_address, topic, "p"), TcpPublisher(a.tcp_address, topic, "m", batch=5)]
    for p in pubs:
        p.start()
    time.sleep(1.0)
    victim = b if frozen == "peer" else a
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        time.sleep(FREEZE)
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    time.sleep(1.5)
    for p in pubs:
        p.stop.set()
    for p in pubs:
        p.join(20)
    wait_for(lambda: settled(a), timeout=20, what="link up, nothing unacked")
    # the stopped side did not take its own absence for the other's silence
    if frozen == "peer":
        assert "closing the link" not in b.log()
    else:
        assert "did not ack" not in a.log() and "did not answer RSUB" not in a.log()
    acked = {body for p in pubs for body in p.acked}
    assert len(acked) > 100
    a.kill9()
    wait_for(lambda: get_json(b, "/stats?format=json")["replicas"][0]["link"] == "down",
             what="link down")
    origin = get_json(b, "/stats?format=json")["replicas"][0]["origin"]
    assert post(b, f"/replication/adopt?origin={origin}") == 200
    got = drain(b.tcp_address, topic, "c")
    missing = acked - set(got)
    print(f"frozen {frozen} {FREEZE}s: acked {len(acked)}, received {len(got)}, "
          f"failed publishes {sum(p.failed for p in pubs)} {[p.errors for p in pubs]}")
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
