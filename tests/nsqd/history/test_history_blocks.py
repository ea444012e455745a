"""A log's blocks (columns of timestamps, sizes, ids, bodies) read back exactly as appended, and
a roll's last writes are synced by the log's next fsync, not lost and not left open."""

from __future__ import annotations

import logging
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from nsqpy.nsqd.history.log import SPARSE_STEP, Cursor, Log, Segment, scan_segment

pytestmark = pytest.mark.timeout(60)


def _log(path, sync_every: int, executor, retention_bytes: int = 0) -> Log:
    return Log(str(path), "t", 3600 * 10**9, retention_bytes, sync_every, 3600.0,
               logging.getLogger("test"), executor)


def _all(log: Log) -> list[tuple]:
    return [r for recs in Cursor(log, *log.position(-1)) for r in recs]


def test_blocks_of_every_shape_read_back_as_appended(tmp_path):
    now = time.time_ns()
    pub = [(b"%016x" % 1, b"one", now, 0)]
    same = [(b"%016x" % (10 + i), b"s%02d" % i, now + 1, 0) for i in range(40)]
    mixed = [(b"%016x" % (100 + i), b"m" * (i * 37 % 300), now + 2 + (i % 3), 0) for i in range(25)]
    replicated = [(b"%016x" % 500, b"late", now - 5_000_000_000, 0),
                  (b"%016x" % 501, b"x" * 70_000, now + 9, 0)]
    with ThreadPoolExecutor(2) as ex:
        log = _log(tmp_path, 1, ex)
        log.append(pub)
        log.append(same)
        log.append(mixed)
        log.append([(b"%016x" % 400, b"later", now + 3, 0)], delay_ms=1500)  # a DPUB
        log.append(replicated)
        got = _all(log)
        stats = log.stats()
        log.close()
    want = pub + same + mixed + [(b"%016x" % 400, b"later", now + 3, 1500)] + replicated
    assert got == want
    assert stats["messages"] == len(want)
    assert stats["oldest_timestamp"] == now - 5_000_000_000
    seg = scan_segment(os.path.join(tmp_path, "t.history", f"{1:020d}.seg"), 1,
                       logging.getLogger("test"))  # what a restart rebuilds
    assert (seg.count, seg.min_ts, seg.max_ts, seg.first_ts, seg.last_ts) == (
        len(want), now - 5_000_000_000, now + 9, now, now + 9)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_rolled_segment_is_synced_with_the_next_fsync_then_closed(tmp_path):
    before = _open_fds()
    ex = ThreadPoolExecutor(2)
    log = _log(tmp_path, 1_000_000, ex, retention_bytes=32 * 1024)  # 4 KiB segments
    body = b"b" * 500
    for i in range(40):
        log.append([(b"%016x" % i, body, time.time_ns(), 0)])
    assert len(log.segments) > 3
    assert log._sealed, "a roll with unsynced writes hands its segment to the next fsync"
    log.tick(time.monotonic() + 7200)  # past --sync-timeout: the background fsync
    assert log._sealed == [] and log.unsynced == 0
    log.close()
    ex.shutdown(wait=True)
    assert _open_fds() == before  # every sealed segment's fd was synced and closed
    with ThreadPoolExecutor(1) as ex:
        reopened = _log(tmp_path, 1, ex)
        assert _all(reopened)[-1][0] == b"%016x" % 39
        reopened.close()


def _fields(seg: Segment) -> tuple:
    return (seg.size, seg.count, seg.first_ts, seg.last_ts, seg.min_ts, seg.max_ts,
            list(seg.sparse_off), list(seg.sparse_max), seg.next_mark)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_batch_moves_the_summary_as_its_blocks_one_by_one_would(seed):
    """The group commit adds a batch's blocks to the segment's summary at once (passes in C
    over their fields); the sparse index, counts, sizes and timestamp bounds come out exactly
    as adding each block alone makes them, batches that cross a sparse mark included."""
    rng = random.Random(seed)
    batched, single = Segment(1), Segment(1)
    offset, ts = 0, 10**18
    for _ in range(400):
        blocks = []
        for _ in range(rng.choice([1, 1, 3, 32, 64])):
            n = rng.choice([1, 1, 200])
            size = 8 + rng.randrange(40, 9000) * n // 8
            lo = ts + rng.randrange(-5, 5)
            hi = lo + rng.randrange(0, 3)
            blocks.append(([b""], size, n, lo, hi, lo, hi))
            ts += 1
        end = batched.add_blocks(offset, blocks)
        for block in blocks:
            single.add_block(offset, *block[1:])
            offset += block[1]
        assert end == offset
        assert _fields(batched) == _fields(single)
    assert len(batched.sparse_off) > 10 and batched.size > 10 * SPARSE_STEP
