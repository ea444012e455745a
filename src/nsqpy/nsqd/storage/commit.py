"""Group commit: every write that must be on disk before its answer, flushed together.

With ``--sync-every=1`` an ``OK`` (or an HTTP 200) promises the message survives a power loss,
so it waits for an ``fdatasync``. One fsync per message made every publisher wait for every
other's, one after the other, with the event loop blocked meanwhile (~2,000 PUB/s whatever the
number of publishers). Here the disk queues and history logs *stage* what they are asked to
write; at the end of the event-loop turn (or as soon as the flush before it returned) one
batch takes everything staged: each owner writes its share on the loop (one
``pwritev`` per file, into the kernel's page cache) and a writer thread flushes it with one
``fdatasync`` per file, while the loop goes on reading. Up to two batches are in flight: the
next is written and its fdatasync issued while the one before is still being flushed (their
waits on the disk overlap), and they finish in order. Whatever waits for those writes (a
publisher's answer, the fan-out of a message the history kept) is a *step*, run in order once
the batch is on disk, or told that it failed.

Only a publish may leave its bytes staged until the end of the turn (:meth:`GroupCommit.publish`):
its answer waits for the flush anyway. Anything else staged is a message nsqd already held (a
requeue, a deferred message coming due, the topic's pump, a dead letter, an adoption): its
bytes are written at once (``write_staged``), before the loop moves on to the next command or
delivery, so a kill -9 cannot lose it (go-diskqueue writes before ``Put`` returns); only its
fdatasync waits for the batch.

All or nothing per batch: if any write or flush of a batch fails, every file of the batch is cut
back to where the batch began (and that cut flushed: files flushed before the failure hold the
batch on disk already) and every step of it is told the error, so exactly the publishes the
batch held are refused and nothing of them is kept or delivered, even after a power cut. The
batch in flight behind a failed one is refused with it (its bytes followed the failed ones).

An owner (a disk queue, a history log) has an ``in_commit`` flag this module keeps, and three
methods called on the event loop: ``write_staged()`` writes what it staged to its file now (the
batch to come flushes it); ``prepare()`` takes everything it staged, writes what is not written
yet and returns the files to flush (a file roll happens there or at the batch's first write,
between batches, never inside one: a batch and its steps share one outcome);
``committed(error)`` makes what it wrote readable (``error`` None) or drops it. Nothing else of
an owner is touched off the loop: the thread gets a duplicate of the file's fd.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, Protocol

from .files import fdatasync, fsync_dir, write_all

__all__ = ["GroupCommit", "Owner", "Write", "Written"]

#: threads that flush a batch's files beside the writer thread (a topic with history writes
#: two: its segment and its queue; topics published to in one turn write one or two each)
FLUSH_HELPERS = 3

#: batches in flight at once, each flushed on a writer thread of its own: while one waits for
#: the disk in its fdatasync, the next is written on the loop and its fdatasync issued beside
#: it (the file system's journal takes the second into its next commit, so the disk never waits
#: for the loop to take the first one's answers); they still finish, and answer, in order
IN_FLIGHT = 2

#: what runs once a batch is on disk: called with None, or with the error that refused it
Step = Callable[["OSError | None"], None]


class Write:
    """One file's part of a batch, written already from ``offset`` on (where a failure cuts it
    back to): an ``fdatasync`` of ``fd`` (a duplicate the batch closes); ``directory``, when
    set, is fsynced after it (the write's file was just created: its name must survive too);
    ``after``, when set, runs on the writer thread once every file of the batch is flushed,
    before any answer (a disk queue's metadata naming the file it just started)."""

    __slots__ = ("fd", "offset", "directory", "after")

    def __init__(self, fd: int, offset: int, directory: str = "",
                 after: Callable[[], None] | None = None) -> None:
        self.fd = fd
        self.offset = offset
        self.directory = directory
        self.after = after


class Written:
    """The part of an owner's open batch already in its file (``write_staged``): the first
    ``count`` staged items, from ``start`` (-1: nothing yet) to ``end`` of ``fd``; ``place``
    is what the owner needs to remember of where they went (its segment, whether the write
    made the file)."""

    __slots__ = ("count", "start", "end", "fd", "place")

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        self.count = 0
        self.start = self.end = self.fd = -1
        self.place: Any = None

    def write(self, staged: Sequence[Sequence[Any]],
              begin: Callable[[Sequence[Any]], tuple[int, int]]) -> None:
        """Write the staged items (each ``(parts, nbytes, ...)``: a disk queue's put, a history
        block) not in the file yet, back to back with one ``pwritev``; at the batch's first
        write ``begin(first item)`` picks the file and offset (``(fd, offset)``; it may roll).
        On failure the file is cut back to where this write began (best effort: the next
        write starts there) and the error raised."""
        if self.count == len(staged):
            return
        if self.start < 0:
            self.fd, self.start = begin(staged[0])
            self.end = self.start
        items = staged[self.count:]
        try:
            write_all(self.fd, [part for item in items for part in item[0]], self.end)
        except OSError:
            try:
                os.ftruncate(self.fd, self.end)
            except OSError:
                pass
            raise
        self.end += sum(item[1] for item in items)
        self.count = len(staged)


class Owner(Protocol):
    in_commit: bool

    def write_staged(self) -> None: ...

    def prepare(self) -> list[Write]: ...

    def committed(self, error: OSError | None) -> None: ...


def flush(writes: list[Write], helpers: Executor | None = None) -> None:
    """A writer thread's part: flush every file, then the directories of new files, then what
    runs once they are flushed. Raises the first OSError (the caller cuts the batch back)."""
    flush_files([w.fd for w in writes], helpers)
    for directory in {w.directory for w in writes if w.directory}:
        fsync_dir(directory)
    for w in writes:
        if w.after is not None:
            w.after()


def cut_back(writes: list[Write]) -> None:
    """Take a refused batch back out of its files, durably."""
    for w in writes:
        try:
            if os.fstat(w.fd).st_size > w.offset:  # (a batch before it may have cut it shorter)
                os.ftruncate(w.fd, w.offset)
            fdatasync(w.fd)
        except OSError:
            pass  # the owner's next write starts at w.offset and overwrites what is left


def flush_files(fds: list[int], helpers: Executor | None) -> None:
    """``fdatasync`` each file; several at once on the ``helpers`` threads. Flushed one after
    the other, a history's segment and its topic's queue made each batch wait for the disk
    twice in series (half the durable rate of a topic without history); flushed together the
    waits overlap. Raises the first error, once every flush has returned (the caller cuts back
    and closes the files then)."""
    if helpers is None or len(fds) == 1:
        for fd in fds:
            fdatasync(fd)
        return
    others = [helpers.submit(fdatasync, fd) for fd in fds[1:]]
    error: BaseException | None = None
    try:
        fdatasync(fds[0])
    except OSError as err:
        error = err
    for other in others:
        err = other.exception()  # (waits for it)
        error = error or err
    if error is not None:
        raise error


class _Chain:
    """What the batches in flight share: the first failure among them. A batch written behind
    one that failed (its bytes follow the failed batch's in a file that was just cut back) is
    refused too, even if its own flush succeeded."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: OSError | None = None


def _flush_in_order(writes: list[Write], helpers: Executor, chain: _Chain,
                    before: threading.Event | None, done: threading.Event) -> OSError | None:
    """A batch's flush on its writer thread, beside the batch before it (their waits on the
    disk overlap), but finished after it: once that one is done, a failure of it refuses this
    one too. On an error every file of the batch is cut back to where its write began, and the
    cut is flushed too: a file whose ``fdatasync`` returned before another file's failed holds
    the refused bytes on disk, and a power cut before its next flush would bring them back."""
    try:
        error = chain.error
        if error is None:
            try:
                flush(writes, helpers)
            except OSError as err:
                error = err
        if before is not None:
            before.wait()
        error = error or chain.error
        if error is not None:
            chain.error = chain.error or error
            cut_back(writes)
        return error
    finally:
        for w in writes:
            os.close(w.fd)
        done.set()


class GroupCommit:
    """One per nsqd with ``--sync-every=1``: the open batch, the ones being flushed (up to
    :data:`IN_FLIGHT`), the writer threads, and the steps waiting for them in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, logger: logging.Logger) -> None:
        self.loop = loop
        self.logger = logger
        self._owners: list[Any] = []  # the open batch: owners with something staged
        #: every step not run yet, in the order given: [step, answer, the batch it waits for]
        self._steps: deque[list[Any]] = deque()
        self._scheduled = False
        #: the batches dispatched and not finished yet, oldest first: (number, future, owners,
        #: whether it wrote anything)
        self._running: deque[tuple[int, Future, list[Any], bool]] = deque()
        self._number = 0  # the last batch dispatched; the open one is the next
        self._wanted = 0  # the last batch a step waits for
        self._floor = 0  # the batch every answer still waiting waits for at least
        self._done = 0  # the last batch finished (they finish in order)
        self._results: dict[int, OSError | None] = {}  # outcomes steps still ask for
        self._chain = _Chain()
        #: set once the last batch dispatched is finished on its thread (the next one waits for it)
        self._last_done: threading.Event | None = None
        #: a batch failed: nothing is dispatched until the ones in flight with it returned
        self._stalled = False
        #: bumped by every stage(): a step that staged more is seen by this
        self.staged = 0
        #: set while a publish runs (:meth:`publish`): what it stages waits for the batch
        self.publishing = False
        #: batches flushed and the files they wrote (bench/ and /stats read these)
        self.batches = 0
        self.files = 0
        #: told every batch's outcome before its steps run (nsqd's health: NOK after a failure)
        self.on_result: Step | None = None
        self._thread = ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="group-commit")
        #: flushes of a batch's other files, beside the writer thread's own (:func:`flush_files`)
        self._helpers = ThreadPoolExecutor(FLUSH_HELPERS, thread_name_prefix="group-commit-flush")

    @property
    def busy(self) -> bool:
        """Something is staged, waiting or being flushed: an answer given now would overtake
        it, so it is given as a step (:meth:`then`) instead."""
        return bool(self._running) or bool(self._owners) or bool(self._steps)

    def publish(self, put: Callable[..., None], *args: Any) -> None:
        """``put(*args)``, a publish (the topic's ``put_many``, ``put_deferred``, ...): its
        answer waits for the batch, so what it stages is written by the batch's ``prepare``
        (one ``pwritev`` per file for the whole turn) rather than put by put."""
        self.publishing = True
        try:
            put(*args)
        finally:
            self.publishing = False

    def stage(self, owner: Any) -> None:
        """``owner`` staged something: it goes into the open batch. Unless a publish staged
        it, it is a message nsqd held already, and it is written to the file now (raises the
        OSError of that write: the owner takes it back out of the batch)."""
        if not self.publishing:
            owner.write_staged()
        self.staged += 1
        if not owner.in_commit:
            owner.in_commit = True
            self._owners.append(owner)
        self._schedule()

    def then(self, step: Step, answer: bool = True) -> None:
        """Run ``step`` once everything staged so far is on disk (or refused). An ``answer``
        (a publisher's OK) also waits for whatever the steps before it staged when they ran;
        ``answer=False`` is a continuation (a fan-out the history held). Steps run in the
        order given."""
        self._wanted = self._number + 1
        self._steps.append([step, answer, self._wanted])
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and len(self._running) < IN_FLIGHT and not self._stalled:
            self._scheduled = True
            self.loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        """End of a turn, or a flush just returned: write the open batch and hand it to a
        writer thread, beside the one being flushed, if any (the disk's waits for the two, and
        the loop's work, overlap)."""
        self._scheduled = False
        if (len(self._running) >= IN_FLIGHT or self._stalled
                or not (self._owners or self._wanted > self._number)):
            return
        owners, self._owners = self._owners, []
        for owner in owners:
            owner.in_commit = False
        writes: list[Write] = []
        error: OSError | None = None
        for owner in owners:
            try:
                writes += owner.prepare()
            except OSError as err:  # (a write failed, a new file could not be made): refused
                error = error or err
        self._number += 1
        number = self._number
        if error is not None or not writes:
            if error is not None:
                cut_back(writes)  # (the owners prepared before the one that failed wrote)
                self._stalled = True
            for w in writes:
                os.close(w.fd)
            future: Future = Future()
            future.set_result(error)
            self._running.append((number, future, owners, False))
            self._flushed()
            return
        done = threading.Event()
        future = self._thread.submit(_flush_in_order, writes, self._helpers, self._chain,
                                     self._last_done, done)
        self._last_done = done
        self._running.append((number, future, owners, True))
        self.batches += 1
        self.files += len(writes)
        future.add_done_callback(lambda _f: self.loop.call_soon_threadsafe(self._flushed))

    def _flushed(self) -> None:
        """Batches returned: finish them in order, then dispatch what was staged meanwhile."""
        running = self._running
        while running and running[0][1].done():
            number, future, owners, wrote = running.popleft()
            error = future.result()
            self._finish(number, owners, error, wrote)
            if error is not None:
                self._stalled = True
        if not running and self._stalled:
            self._stalled = False
            self._chain = _Chain()
            self._last_done = None
        self._run_steps()
        self._schedule()

    def _finish(self, number: int, owners: list[Any], error: OSError | None,
                wrote: bool) -> None:
        """Batch ``number`` is on disk (``error`` None) or refused: owners first (what they
        wrote becomes readable, or is dropped), then nsqd's health."""
        self._done = number
        self._results[number] = error
        if error is not None:
            self.logger.error("GROUP COMMIT: a write or flush failed, batch %d refused - %s",
                              number, error)
        for owner in owners:
            try:
                owner.committed(error)
            except Exception:
                self.logger.exception("GROUP COMMIT: committing %r failed", owner)
        if self.on_result is not None and (wrote or error is not None):
            self.on_result(error)  # (a batch that wrote nothing says nothing of the disk)

    def _run_steps(self) -> None:
        """Run the steps whose batch has returned, in order, with its outcome. Once a step
        stages more (a fan-out the history held writes the topic's or channels' queues), every
        answer after it waits for the batch that takes those writes (:attr:`_floor`) and gets
        that batch's outcome, so an OK covers them and a connection's answers keep their
        order."""
        steps = self._steps
        while steps:
            head = steps[0]
            if head[1] and head[2] < self._floor:
                head[2] = self._floor
            if head[2] > self._done:
                break
            steps.popleft()
            error = self._results[head[2]]
            before = self.staged
            try:
                head[0](error)
            except Exception:
                self.logger.exception("GROUP COMMIT: a step failed")
            if error is None and self.staged != before:
                self._floor = self._wanted = self._number + 1
        oldest = min(step[2] for step in steps) if steps else self._done + 1
        for number in [n for n in self._results if n < oldest]:
            del self._results[number]

    def drain(self) -> None:
        """Finish everything staged and waiting, on the calling (loop) thread: at shutdown,
        before the files close."""
        while True:
            if self._running:
                self._running[0][1].result()  # (waits for it)
                self._flushed()
                continue
            self._stalled = False
            if not (self._owners or self._wanted > self._number):
                self._run_steps()
                return
            self._dispatch()

    def close(self) -> None:
        self.drain()
        self._thread.shutdown(wait=True)
        self._helpers.shutdown(wait=True)
