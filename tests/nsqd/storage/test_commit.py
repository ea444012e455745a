"""The group commit (nsqd/storage/commit.py) on real files, a real event loop and its thread:
what is staged in one turn is one batch, steps run once it is on disk, what arrives during a
flush is the next batch, a failed batch refuses all of it and leaves every file as it was."""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nsqpy.nsqd.storage.commit import GroupCommit, Write, Written, flush_files

pytestmark = pytest.mark.timeout(30)
LOG = logging.getLogger("test.commit")


class AppendFile:
    """The smallest owner: appends what it is given to one file, readable once committed."""

    def __init__(self, path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> None:
        self.path = path
        self.fd = os.open(path, flags, 0o644)
        self.in_commit = False
        self.staged: list[tuple[list[bytes], int]] = []
        self.written = Written()
        self.taken = 0
        self.size = 0
        self.readable = 0
        self.outcomes: list[OSError | None] = []
        self.commit: GroupCommit | None = None

    def put(self, data: bytes) -> None:
        """A publish's write: the batch writes it."""
        assert self.commit is not None
        self.commit.publish(self.hand_over, data)

    def hand_over(self, data: bytes) -> None:
        """Staged outside a publish (a message already held): written at once."""
        self.staged.append(([data], len(data)))
        assert self.commit is not None
        self.commit.stage(self)

    def write_staged(self) -> None:
        self.written.write(self.staged, lambda _first: (self.fd, self.size))

    def prepare(self) -> list[Write]:
        self.write_staged()
        start, self.taken = self.written.start, self.written.end - self.written.start
        self.staged = []
        self.written.forget()
        return [Write(os.dup(self.fd), start)]

    def committed(self, error: OSError | None) -> None:
        self.outcomes.append(error)
        if error is None:
            self.size += self.taken
            self.readable = self.size
        self.taken = 0


def run(coro_fn):
    async def main():
        commit = GroupCommit(asyncio.get_running_loop(), LOG)
        try:
            return await asyncio.wait_for(coro_fn(commit), 20)
        finally:
            commit.close()
    return asyncio.run(main())


def settled(commit: GroupCommit) -> "asyncio.Future[OSError | None]":
    fut = asyncio.get_running_loop().create_future()
    commit.then(fut.set_result)
    return fut


def test_one_turn_is_one_batch_and_steps_see_the_data_on_disk(tmp_path: Path) -> None:
    async def body(commit: GroupCommit):
        owners = [AppendFile(tmp_path / f"f{i}") for i in range(3)]
        seen = []
        for o in owners:
            o.commit = commit
        for i in range(30):  # one turn: 30 puts over 3 files
            owners[i % 3].put(b"r%02d;" % i)
            commit.then(lambda err, i=i: seen.append(
                (i, err, (tmp_path / f"f{i % 3}").read_bytes().count(b";"))))
        assert commit.busy and commit.batches == 0
        assert all(o.readable == 0 for o in owners)  # nothing readable before the flush
        await settled(commit)
        return owners, seen, commit.batches, commit.files

    owners, seen, batches, files = run(body)
    assert batches == 1 and files == 3  # one pwritev and one fdatasync per file
    assert [s[0] for s in seen] == list(range(30))  # steps in order
    assert all(err is None and count == 10 for _, err, count in seen)
    assert [o.path.read_bytes() for o in owners] == [
        b"".join(b"r%02d;" % i for i in range(k, 30, 3)) for k in range(3)]


def test_what_arrives_during_a_flush_is_the_next_batch(tmp_path: Path) -> None:
    async def body(commit: GroupCommit):
        owner = AppendFile(tmp_path / "f")
        owner.commit = commit
        owner.put(b"first;")
        first = settled(commit)
        await asyncio.sleep(0)  # the turn ends: the batch goes to the writer thread
        assert commit.batches == 1
        for i in range(5):  # while it is being flushed
            owner.put(b"next%d;" % i)
        second = settled(commit)
        assert await first is None
        assert await second is None
        return owner, commit.batches

    owner, batches = run(body)
    assert batches == 2
    assert owner.path.read_bytes() == b"first;" + b"".join(b"next%d;" % i for i in range(5))


def test_a_failed_batch_refuses_every_step_and_cuts_every_file_back(tmp_path: Path) -> None:
    good_path, bad_path = tmp_path / "good", tmp_path / "bad"
    bad_path.write_bytes(b"")

    async def body(commit: GroupCommit):
        good = AppendFile(good_path)
        good.commit = commit
        good.put(b"kept;")
        await settled(commit)
        bad = AppendFile(bad_path, os.O_RDONLY)  # its write fails: EBADF
        bad.commit = commit
        good.put(b"refused;")
        bad.put(b"refused;")
        answers = [settled(commit) for _ in range(3)]
        return good, bad, [await a for a in answers]

    good, bad, answers = run(body)
    assert all(isinstance(a, OSError) for a in answers)
    assert good_path.read_bytes() == b"kept;"  # written, then cut back with the batch
    assert good.outcomes[-1] is not None and good.readable == len(b"kept;")
    assert bad.readable == 0


def test_steps_after_a_step_that_stages_wait_for_the_next_batch(tmp_path: Path) -> None:
    """A fan-out held by the history writes the channels' queues when it runs: the answers
    behind it wait for that write too, in their order."""
    async def body(commit: GroupCommit):
        log, queue = AppendFile(tmp_path / "log"), AppendFile(tmp_path / "queue")
        log.commit = queue.commit = commit
        order = []
        log.put(b"m1;")
        commit.then(lambda err: queue.put(b"m1;"), answer=False)  # the held fan-out
        commit.then(lambda err: order.append(("answer", queue.readable)))
        await settled(commit)
        return order, commit.batches

    order, batches = run(body)
    assert batches == 2
    assert order == [("answer", 3)]  # answered once the queue's write was on disk


@pytest.mark.parametrize("bad_first", [False, True], ids=["helper-fails", "writer-fails"])
def test_files_flushed_at_once_raise_the_failure_of_any(tmp_path: Path, bad_first: bool) -> None:
    """A batch's files are flushed together (the writer thread one, helper threads the rest):
    the failure of any flush (here a pipe's, which has nothing to flush: EINVAL) is raised, on
    whichever thread it happened, so the batch is refused and cut back."""
    good = os.open(tmp_path / "good", os.O_RDWR | os.O_CREAT, 0o644)
    read_end, write_end = os.pipe()
    helpers = ThreadPoolExecutor(2)
    try:
        fds = [write_end, good, good] if bad_first else [good, good, write_end]
        with pytest.raises(OSError):
            flush_files(fds, helpers)
        flush_files([good, good, good], helpers)  # all of them flushed: nothing raised
    finally:
        helpers.shutdown(wait=True)
        for fd in (good, read_end, write_end):
            os.close(fd)
