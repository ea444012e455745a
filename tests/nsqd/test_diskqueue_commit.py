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
from helpers.held_flush import HeldFlush
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
        err = await refused_batch(q, commit, lambda: commit.publish(q.put_many, [msg(1), msg(2)]))
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


def test_a_requeue_the_disk_refuses_raises_at_once(tmp_path: Path) -> None:
    """A requeue is written when it is put (not a publish): a refused write raises out of the
    put, with nothing of it counted or left in the file (the channel keeps the messages)."""
    async def body():
        commit = GroupCommit(asyncio.get_running_loop(), LOG)
        q = open_q(tmp_path, commit)
        q.put(msg(0))
        assert await flushed(commit) is None
        with pytest.raises(OSError):
            await refused_batch(q, commit, lambda: q.put_many([msg(1), msg(2)], lambda: None))
        depth = q.depth
        q.close()
        commit.close()
        return depth

    assert asyncio.run(body()) == 1
    assert (tmp_path / "t.diskqueue.000000.dat").read_bytes() == b"\x00\x00\x00d" + msg(0)


def test_a_requeue_is_in_the_file_when_put_returns_and_readable_after_its_flush(
        tmp_path: Path) -> None:
    """Not a publish (a requeue, the pump, a dead letter): the bytes are handed to the file
    before the put returns, so a kill -9 after it keeps them; only the fdatasync waits for
    the batch, and the records are readable once it returned."""
    data = tmp_path / "t.diskqueue.000000.dat"

    async def body():
        commit = GroupCommit(asyncio.get_running_loop(), LOG)
        q = open_q(tmp_path, commit)
        q.put_many([msg(0), msg(1)], lambda: None)
        on_file = data.read_bytes()
        early = q.get_many(10)
        assert await flushed(commit) is None
        got = q.get_many(10)
        q.close()
        commit.close()
        return on_file, early, got

    on_file, early, got = asyncio.run(body())
    assert on_file == b"".join(b"\x00\x00\x00d" + msg(i) for i in range(2))
    assert early == [] and got == [msg(0), msg(1)]


@pytest.mark.parametrize("fails", [False, True], ids=["flushed", "refused"])
def test_a_requeue_during_a_flush_goes_behind_it_in_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    """A requeue while a publish's batch is being flushed is written right behind that batch
    at once. If that batch is refused (and cut back), the requeue is written again where the
    file now ends, and its own batch makes it readable: nothing of the refused publish stays."""
    data = tmp_path / "t.diskqueue.000000.dat"
    held = HeldFlush(monkeypatch, fail=fails)

    async def body():
        commit = GroupCommit(asyncio.get_running_loop(), LOG)
        q = open_q(tmp_path, commit)
        commit.publish(q.put, msg(0))
        published = asyncio.get_running_loop().create_future()
        commit.then(published.set_result)  # (the publisher's answer)
        await asyncio.sleep(0)  # the turn ends: its batch goes to the writer thread
        await asyncio.get_running_loop().run_in_executor(None, held.entered.wait, 20)
        kept: list[bytes] = []
        q.put_many([msg(1)], lambda: kept.append(msg(1)))
        during = data.read_bytes()
        held.release.set()
        outcome = await published
        assert await flushed(commit) is None  # the requeue's own batch
        got = q.get_many(10)
        q.close()
        commit.close()
        return during, outcome, got, kept

    during, outcome, got, kept = asyncio.run(body())
    record = [b"\x00\x00\x00d" + msg(i) for i in range(2)]
    assert during == record[0] + record[1]
    assert kept == []
    if fails:
        assert isinstance(outcome, OSError) and got == [msg(1)]
        assert data.read_bytes() == record[1]
    else:
        assert outcome is None and got == [msg(0), msg(1)]
        assert data.read_bytes() == record[0] + record[1]
