"""The chunked in-memory queue: a FIFO exactly like a deque, whose messages the collector does
not visit one by one (issue #42)."""

from __future__ import annotations

import gc
import random
from collections import deque

import pytest

from nsqpy.nsqd.memqueue import CHUNK, MessageQueue
from nsqpy.protocol.message import IdFactory

pytestmark = pytest.mark.timeout(60)


def msg(i: int) -> tuple:
    return (b"%016x" % i, b"body %d" % i, 1_700_000_000_000_000_000 + i, 0)


def test_fifo_against_a_deque() -> None:
    """Random appends of every size (one PUB, an MPUB, a requeue) and takes of every size
    come out in the order a deque gives."""
    rng = random.Random(42)
    queue, model = MessageQueue(), deque()
    n = 0
    for _ in range(5000):
        if rng.random() < 0.55:
            size = rng.choice([1, 1, 2, 7, CHUNK // 4 - 1, CHUNK // 4, 100, CHUNK, 1000])
            batch = [msg(n + i) for i in range(size)]
            n += size
            queue.extend(batch)
            model.extend(batch)
        else:
            want = rng.choice([1, 3, 50, CHUNK, 2500])
            got = queue.take(want)
            expected = [model.popleft() for _ in range(min(want, len(model)))]
            assert got == expected
        assert len(queue) == len(model)
        assert bool(queue) == bool(model)
        if rng.random() < 0.01:
            assert list(queue) == list(model)
    assert queue.take(len(model) + 10) == list(model)
    assert not queue and queue.take(5) == []


def test_clear_and_reuse() -> None:
    queue = MessageQueue()
    queue.extend([msg(i) for i in range(1000)])
    queue.take(10)
    queue.clear()
    assert len(queue) == 0 and list(queue) == [] and queue.take(1) == []
    queue.extend([msg(1)])
    assert queue.take(3) == [msg(1)]


def test_queued_messages_are_not_tracked_by_the_collector() -> None:
    """Once a collection has passed, the next append seals what was queued into chunks, and
    the collection after finds the chunks untracked: a full collection visits one object per
    chunk, not one per message. A chunk never holds a tracked message, so the first pass that
    meets it untracks it (the collector's first look at a chunk of tracked messages would
    come before it untracks them, and keep the chunk tracked for a larger pass to walk)."""
    queue = MessageQueue()
    for i in range(0, 20_000, 200):  # MPUB-sized batches
        queue.extend([msg(j) for j in range(i, i + 200)])
    for i in range(20_000, 21_000):  # lone PUBs
        queue.extend([msg(i)])
    gc.collect()
    queue.extend([msg(21_000)])
    left = len(queue._tail)  # fewer than a chunk's worth waits in the list
    assert left <= CHUNK
    chunks = gc.get_referents(queue._chunks)
    assert sum(map(len, chunks)) == 21_001 - left
    assert len(chunks) <= 21_000 // CHUNK
    gc.collect(0)  # a young pass: the chunks made since the last one are untracked by it
    assert not any(gc.is_tracked(c) for c in chunks)
    assert not any(gc.is_tracked(m) for m in queue)
    assert [m[0] for m in queue.take(21_001)] == [b"%016x" % i for i in range(21_001)]


def _run(factory: IdFactory, lines: list[bytes], ts: int) -> tuple[tuple, list[tuple]]:
    """A text run of ``lines`` and the messages it stands for, made as a publish makes them."""
    ids = factory.next_id_block(len(lines))
    run = (ids, b"\n".join(lines) + b"\n", ts)
    return run, [(ids[i * 16:i * 16 + 16], line, ts, 0) for i, line in enumerate(lines)]


def test_runs_come_out_as_their_messages_in_order() -> None:
    """Runs (text /mpub bodies kept unsplit) between plain appends: takes of every size and
    iteration give the messages a deque of the same publishes gives."""
    rng = random.Random(7)
    factory = IdFactory(3)
    queue, model = MessageQueue(), deque()
    n = 0
    for _ in range(3000):
        r = rng.random()
        if r < 0.3:
            size = rng.choice([1, 2, 100, CHUNK + 1])
            run, msgs = _run(factory, [b"r%07d" % (n + i) for i in range(size)], n)
            queue.extend_run(run, size)
        elif r < 0.6:
            size = rng.choice([1, 7, CHUNK])
            msgs = [msg(n + i) for i in range(size)]
            queue.extend(msgs)
        else:
            want = rng.choice([1, 3, 50, CHUNK, 2500])
            assert queue.take(want) == [model.popleft() for _ in range(min(want, len(model)))]
            assert len(queue) == len(model)
            continue
        n += size
        model.extend(msgs)
        assert len(queue) == len(model)
        if rng.random() < 0.02:
            assert list(queue) == list(model)
        if rng.random() < 0.05:
            gc.collect(0)
    assert list(queue) == list(model)
    assert queue.take(len(model) + 1) == list(model)
    assert not queue


def test_runs_are_not_tracked_by_the_collector() -> None:
    """A run is three atomic values: the first pass untracks it, as it does a sealed chunk."""
    queue = MessageQueue()
    factory = IdFactory(3)
    for i in range(100):
        queue.extend_run(_run(factory, [b"%06d" % j for j in range(100)], i)[0], 100)
    gc.collect()
    runs = gc.get_referents(queue._chunks)
    assert len(runs) == 100 and not any(gc.is_tracked(r) for r in runs)
    assert len(queue) == 10_000 and queue.take(10_000)[-1][1] == b"%06d" % 99
