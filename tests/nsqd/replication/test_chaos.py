"""The chaos tests of issues #14 and #25.

**Ring** (#14): a ring of three nsqd (A->B->C->A) with --sync-every=1, one
nsqlookupd, acknowledged publishes from our client and pynsq, consumers on two channels through
nsqlookupd (our Consumer on c1, an unchanged pynsq Reader on c2), both slow enough that backlogs
and in-flight messages exist. At a random moment one node is killed -9 and its data directory
deleted; it comes back empty after its peer has failed over. Every acknowledged message must reach
both channels; the duplicate rate is printed (run with -s to see it).

**Pair** (#25): origin A replicating to B through a proxy that can cut the link alone
(helpers/chaos_pair.py; B replicates to A directly), five publishers on A (TCP PUB, MPUB, DPUB,
HTTP /pub, /mpub) and a consumer on each node; random faults one at a time (kill -9 of either side with or without its data, SIGSTOP
of either side up to 7 s, the link paused or dropped, and the composites "B frozen 5-7 s, A killed
within a second of the thaw" and "link cut, A killed"); at the end every surviving node is drained
and every acknowledged body must have arrived. ``CHAOS_DEGRADED=accept`` runs it with
``--replication-degraded=accept`` and allows what docs/replication.md §6 says that loses (messages
answered OK with one copy before A died). ``CHAOS_LONG=<seconds>`` runs one seed that long
(``CHAOS_SEED`` picks it); ``CHAOS_SEEDS=<n>`` runs the issue's acceptance scenario n times."""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import time
from typing import Callable

import pytest

from helpers.chaos import TcpConsumer, drain, publishers
from helpers.chaos_pair import Pair
from helpers.replication import post
from helpers.servers import Nsqd, Nsqlookupd, free_port, unique_name
from nsqpy.client import Consumer, Producer

CHAOS_LONG = float(os.environ.get("CHAOS_LONG", "0"))
DEGRADED = os.environ.get("CHAOS_DEGRADED", "fail")
pytestmark = pytest.mark.timeout(180 + int(CHAOS_LONG * 1.5))

PUBLISH_SECONDS = 6.0
FAILOVER = "2s"


@pytest.fixture
def ring(tmp_path):
    started: list = []
    lookupd = Nsqlookupd(tmp_path / "lookupd")
    started.append(lookupd)
    ports = [(free_port(), free_port()) for _ in range(3)]

    def start(i: int) -> Nsqd:
        peer = ports[(i + 1) % 3][0]
        node = Nsqd(tmp_path / f"n{i}", f"--replicate-to=127.0.0.1:{peer}", "--sync-every=1",
                    f"--replication-failover-timeout={FAILOVER}",
                    f"--lookupd-tcp-address={lookupd.tcp_address}",
                    tcp_port=ports[i][0], http_port=ports[i][1])
        started.append(node)
        return node

    nodes = [start(i) for i in range(3)]
    yield lookupd, nodes, start
    for proc in started:
        proc.stop()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ring_of_three_loses_no_acknowledged_message(ring, tornado_run, seed):
    import nsq

    lookupd, nodes, start = ring
    rng = random.Random(seed)
    victim = seed % 3
    kill_at = rng.uniform(1.5, PUBLISH_SECONDS - 1.5)
    topic = unique_name("chaos")
    for node in nodes:
        for ch in ("c1", "c2"):
            assert post(node, f"/channel/create?topic={topic}&channel={ch}") == 200
    acked: set[bytes] = set()
    got = {"c1": [], "c2": []}
    lookup = [f"http://{lookupd.http_address}"]

    async def produce(i: int, addr: str, stop: asyncio.Event) -> None:
        n = 0
        async with Producer(addr, reconnect_interval=0.2, retries=0) as p:
            while not stop.is_set():
                body = b"p%d-%06d" % (i, n)
                n += 1
                try:
                    await asyncio.wait_for(p.pub(topic, body), 5)
                except Exception:  # the node is gone: this one was never acknowledged
                    await asyncio.sleep(0.05)
                    continue
                acked.add(body)
                await asyncio.sleep(0.004)

    async def main():
        stop = asyncio.Event()
        alive = [asyncio.Event() for _ in nodes]
        tasks = [asyncio.create_task(produce(i, n.tcp_address, alive[i]))
                 for i, n in enumerate(nodes)]
        # pynsq Writer: acknowledged when its callback gets OK
        writer = nsq.Writer([nodes[(victim + 1) % 3].tcp_address])
        seq = [0]

        def wpub():
            if stop.is_set():
                return
            body = b"w-%06d" % seq[0]
            seq[0] += 1

            def done(conn, data, body=body):
                if data == b"OK":
                    acked.add(body)
            try:
                writer.pub(topic, body, done)
            except Exception:
                pass
            asyncio.get_running_loop().call_later(0.01, wpub)

        asyncio.get_running_loop().call_later(0.5, wpub)

        async def c1_handler(msg):
            got["c1"].append(msg.body)
            await asyncio.sleep(0.01)

        consumer = Consumer(topic, "c1", c1_handler, lookupd_http_addresses=lookup,
                            lookupd_poll_interval=1.0, lookupd_poll_jitter=0.1, max_in_flight=4,
                            concurrency=2, reconnect_interval=0.2, msg_timeout=10.0)
        await consumer.start()

        def c2_handler(message):
            got["c2"].append(message.body)
            message.enable_async()
            asyncio.get_running_loop().call_later(0.04, message.finish)

        reader = nsq.Reader(topic=topic, channel="c2", message_handler=c2_handler,
                            max_in_flight=9, lookupd_http_addresses=lookup,
                            lookupd_poll_interval=1)
        t0 = time.monotonic()
        await asyncio.sleep(kill_at)
        nodes[victim].kill9()
        shutil.rmtree(nodes[victim].data_path)
        alive[victim].set()  # its producer stops (its unacked publishes do not count)
        await asyncio.sleep(max(0.0, PUBLISH_SECONDS - (time.monotonic() - t0)))
        stop.set()
        for ev in alive:
            ev.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        # the origin returns, empty (a new incarnation), after its peer has failed over
        await asyncio.sleep(3.0)
        nodes[victim] = start(victim)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if acked <= set(got["c1"]) and acked <= set(got["c2"]):
                break
            await asyncio.sleep(0.2)
        await consumer.close()
        reader.close()

    tornado_run(main, 150)
    # traffic enough for the faults to land among publishes (a run at load 20 had 473; the
    # bound was 500, a speed, not what this test checks)
    assert len(acked) > 100
    adopted = [int(m) for m in re.findall(r"adopted (\d+) messages",
                                          nodes[(victim + 1) % 3].log())]
    assert adopted and adopted[0] > 0, "the peer adopted nothing: no failover happened"
    for ch in ("c1", "c2"):
        missing = acked - set(got[ch])
        assert not missing, f"{ch}: {len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
        dups = len(got[ch]) - len(set(got[ch]))
        print(f"seed {seed} victim n{victim} killed at {kill_at:.1f}s, {adopted[0]} adopted: "
              f"{ch} received "
              f"{len(got[ch])} for {len(acked)} acknowledged, duplicates {dups} "
              f"({100 * dups / len(acked):.2f}%)")


# --- the pair under random faults (issue #25) ------------------------------------------------------

#: seeds that found bugs, kept as regression cases (with the default random ones). None so far:
#: seed 101 found two faults of the test itself (a consumer stopping with messages in flight; B,
#: not replicating, holding the only copy of what it adopted when killed: a double failure), fixed
#: in the harness; the product's bug of issue #25 is pinned by test_freeze.py and the scenario test.
REGRESSION_SEEDS: list[int] = []
PAIR_SECONDS = 14.0  # of faults per seed in the default run


def run_pair(tmp_path, seed: int, seconds: float, faults: Callable[[Pair, random.Random], str]):
    """Publish on A under ``faults`` for ``seconds``, then drain A and B; returns the figures
    and fails on a loss the setting does not allow."""
    rng = random.Random(seed)
    print(f"\nchaos seed {seed} ({DEGRADED}, {seconds:.0f}s)", flush=True)
    pair = Pair(tmp_path, DEGRADED)
    topic = unique_name("chaos")
    pubs: list = []
    consumers: list = []
    try:
        pair.wait_settled()
        assert post(pair.a, f"/channel/create?topic={topic}&channel=c") == 200
        pubs = publishers(pair.a.tcp_address, pair.a.http_address, topic)
        consumers = [TcpConsumer(pair.a.tcp_address, topic, "c"),
                     TcpConsumer(pair.b.tcp_address, topic, "c")]  # what B adopts
        for t in [*pubs, *consumers]:
            t.start()
        t0 = time.monotonic()
        events = []
        while time.monotonic() - t0 < seconds:
            time.sleep(rng.uniform(0.3, 1.5))
            what = faults(pair, rng)
            events.append(what)
            print(f"  {time.monotonic() - t0:6.1f}s {what}", flush=True)
            pair.wait_settled()
        time.sleep(0.5)
        for p in pubs:
            p.stop.set()
        for p in pubs:
            p.join(30)
        pair.wait_settled()
        for c in consumers:
            c.stop.set()
        for c in consumers:
            c.join(10)
        got = {body for c in consumers for body in c.got}
        got.update(drain(pair.a.tcp_address, topic, "c", idle=5.0))
        got.update(drain(pair.b.tcp_address, topic, "c", idle=5.0))
        acked = {body for p in pubs for body in p.acked}
        lost = acked - got
        failed = sum(p.failed for p in pubs)
        print(f"  seed {seed}: {len(events)} faults, acked {len(acked)}, received {len(got)} "
              f"distinct, failed publishes {failed}, lost {len(lost)}, allowed "
              f"{pair.at_risk if DEGRADED == 'accept' else 0}", flush=True)
        assert len(acked) > 200, [p.errors for p in pubs]
        if DEGRADED == "accept":
            assert len(lost) <= pair.at_risk, f"lost {len(lost)} > {pair.at_risk} allowed"
        else:
            assert not lost, f"seed {seed}: {len(lost)} acked lost, e.g. {sorted(lost)[:5]}"
        return {"acked": len(acked), "lost": len(lost), "failed": failed, "events": events}
    finally:
        for t in [*pubs, *consumers]:
            t.stop.set()
        pair.close()


def _random_fault(pair: Pair, rng: random.Random) -> str:
    return pair.fault(rng)


def _seeds() -> list[int]:
    if CHAOS_LONG:
        return [int(os.environ.get("CHAOS_SEED") or time.time_ns() % 100000)]
    return REGRESSION_SEEDS + [101, 102]


@pytest.mark.parametrize("seed", _seeds())
def test_pair_under_random_faults_loses_nothing_acknowledged(tmp_path, seed):
    run_pair(tmp_path, seed, CHAOS_LONG or PAIR_SECONDS, _random_fault)


def _thaw_then_kill(pair: Pair, rng: random.Random) -> str:
    """Issue #25's acceptance scenario: B frozen 5-7 s while A publishes, A killed -9 0-1 s
    after the thaw (its data kept or not); B must have every message A acknowledged."""
    t, after = rng.uniform(5.0, 7.0), rng.uniform(0.0, 1.0)
    pair.freeze(pair.b, t)
    time.sleep(after)
    wipe = rng.random() < 0.5
    pair.kill_a(wipe, rng.uniform(0.5, 3.0))
    return f"B frozen {t:.1f}s, A killed {after:.2f}s after the thaw, wipe={wipe}"


@pytest.mark.parametrize("seed", range(1, 1 + int(os.environ.get("CHAOS_SEEDS", "1"))))
def test_frozen_peer_then_origin_killed(tmp_path, seed):
    run_pair(tmp_path, seed, 1.0, _thaw_then_kill)
