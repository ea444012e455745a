"""The chaos test of issue #14: a ring of three nsqd (A->B->C->A) with --sync-every=1, one
nsqlookupd, acknowledged publishes from our client and pynsq, consumers on two channels through
nsqlookupd (our Consumer on c1, an unchanged pynsq Reader on c2), both slow enough that backlogs
and in-flight messages exist. At a random moment one node is killed -9 and its data directory
deleted; it comes back empty after its peer has failed over. Every acknowledged message must reach
both channels; the duplicate rate is printed (run with -s to see it)."""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import time

import pytest

from helpers.replication import post
from helpers.servers import Nsqd, Nsqlookupd, free_port, unique_name
from nsqpy.client import Consumer, Producer

pytestmark = pytest.mark.timeout(180)

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
    assert len(acked) > 500
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
