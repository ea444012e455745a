"""The disk queue through the group commit (``--sync-every=1`` in nsqd): puts are staged, counted
in ``depth`` at once, readable once their batch is on disk, FIFO across file rolls, and a refused
batch leaves nothing behind. Real files, a real event loop, the commit's real thread."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy.nsqd.diskqueue import DiskQueue
from nsqpy.nsqd.storage.commit import GroupCommit

pytestmark = pytest.mark.timeout(120)
LOG = logging.getLogger("test.diskqueue.commit")


def msg(i: int, size: int = 100) -> bytes:
    return b"%026d" % i + b"x" * (size - 26)


def open_q(path: Path, commit: GroupCommit | None, max_bytes: int = 1 << 20) -> DiskQueue:
    q = DiskQueue("t", str(path), max_bytes, 26, 1050, 1, 2.0, LOG)
    q.commit = commit
    return q


async def flushed(commit: GroupCommit) -> OSError | None:
    fut = asyncio.get_running_loop().create_future()
    commit.then(fut.set_result)
    return await asyncio.wait_for(fut, 20)


def test_staged_records_count_at_once_and_are_read_after_their_flush(tmp_path: Path) -> None:
    async def body():
        commit = GroupCommit(asyncio.get_running_loop(), LOG)
        q = open_q(tmp_path, commit)
        woken = []
        q.on_commit = lambda: woken.append(q.depth)
        q.put_many([msg(i) for i in range(50)])
        q.put(msg(50))
        assert (q.depth, q.pending) == (51, 51)
        assert q.get_many(10) == []  # not on disk yet: not readable
        assert await flushed(commit) is None
        assert (q.depth, q.pending, woken) == (51, 0, [51])
        got = q.get_many(100)
        q.close()
        commit.close()
        return got, commit.batches

    got, batches = asyncio.run(body())
    assert got == [msg(i) for i in range(51)] and batches == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(1, 30), st.integers(26, 400)),
    st.tuples(st.just("get"), st.integers(1, 40)),
    st.tuples(st.just("flush")),
), max_size=30), max_bytes=st.sampled_from([300, 2000, 1 << 20]))
def test_fifo_across_rolls_and_a_reopen(tmp_path_factory, ops, max_bytes: int) -> None:
    path = tmp_path_factory.mktemp("q")

    async def body():
        commit = GroupCommit(asyncio.get_running_loop(), LOG)
        q = open_q(path, commit, max_bytes)
        written, read = [], []
        n = 0
        for op in ops:
            if op[0] == "put":
                batch = [msg(n + k, op[2]) for k in range(op[1])]
                n += op[1]
                written += batch
                q.put_many(batch)
                assert q.depth == len(written) - len(read)
            elif op[0] == "get":
                read += q.get_many(op[1])
            else:
                assert await flushed(commit) is None
        await flushed(commit)
        read += q.get_many(len(written))
        assert read == written and q.depth == 0
        q.put_many([msg(n)])  # staged at close: written by close itself
        q.close()
        commit.close()
        reopened = open_q(path, None, max_bytes)
        assert reopened.get_many(10) == [msg(n)]
        reopened.close()
        assert not list(path.glob("*.bad"))

    asyncio.run(body())


async def refused_batch(q: DiskQueue, commit: GroupCommit, puts) -> OSError | None:
    """Flush what ``puts()`` stages with the queue's write file swapped for a read-only one
    under it (the flush fails: EBADF), then give the queue its file back."""
    good_fd = q._wfd
    q._wfd = os.open(q.file_name(q.write_file_num), os.O_RDONLY)
    try:
        puts()
        return await flushed(commit)
    finally:
        os.close(q._wfd)
        q._wfd = good_fd


def test_a_refused_batch_drops_its_records_and_the_queue_goes_on(tmp_path: Path) -> None:
    async def body():
        commit = GroupCommit(asyncio.get_running_loop(), LOG)
        q = open_q(tmp_path, commit)
        q.put(msg(0))
        assert await flushed(commit) is None
        err = await refused_batch(q, commit, lambda: q.put_many([msg(1), msg(2)]))
        depth_after_refusal = q.depth
        q.put(msg(3))
        assert await flushed(commit) is None
        got = q.get_many(10)
        q.close()
        commit.close()
        return err, depth_after_refusal, got

    err, depth, got = asyncio.run(body())
    assert isinstance(err, OSError)
    assert depth == 1
    assert got == [msg(0), msg(3)]


def test_a_refused_requeue_is_handed_back_not_lost(tmp_path: Path) -> None:
    """A requeue staged for the group commit has no publisher to refuse: when its batch fails
    the queue calls its ``refused`` callback (the channel keeps the messages in memory)."""
    async def body():
        commit = GroupCommit(asyncio.get_running_loop(), LOG)
        q = open_q(tmp_path, commit)
        q.put(msg(0))
        assert await flushed(commit) is None
        kept: list[bytes] = []
        requeued = [msg(1), msg(2)]

        def puts() -> None:
            q.put_many(requeued, lambda: kept.extend(requeued))
            q.put(msg(3))  # a publish in the same batch: refused to its publisher, not kept

        err = await refused_batch(q, commit, puts)
        q.close()
        commit.close()
        return err, kept, q.depth

    err, kept, depth = asyncio.run(body())
    assert isinstance(err, OSError)
    assert kept == [msg(1), msg(2)] and depth == 1
