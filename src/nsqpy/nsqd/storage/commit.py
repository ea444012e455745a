"""Group commit: every write that must be on disk before its answer, flushed together.

With ``--sync-every=1`` an ``OK`` (or an HTTP 200) promises the message survives a power loss,
so it waits for an ``fdatasync``. One fsync per message made every publisher wait for every
other's, one after the other, with the event loop blocked meanwhile (~2,000 PUB/s whatever the
number of publishers). Here the disk queues and history logs *stage* what they are asked to
write; at the end of the event-loop turn (or as soon as the flush before it returned) one
batch takes everything staged: each owner writes its share on the loop (one
``pwritev`` per file, into the kernel's page cache) and a writer thread flushes it with one
``fdatasync`` per file, while the loop goes on reading. Whatever waits for those writes (a
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
batch held are refused and nothing of them is kept or delivered, even after a power cut.

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
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from itertools import chain
from operator import itemgetter
from typing import Any, Protocol

from .files import fdatasync, fsync_dir, write_all

__all__ = ["GroupCommit", "Owner", "Write", "Written"]

#: threads that flush a batch's files beside the writer thread (a topic with history writes
#: two: its segment and its queue; topics published to in one turn write one or two each)
FLUSH_HELPERS = 3

#: what runs once a batch is on disk: called with None, or with the error that refused it
Step = Callable[["OSError | None"], None]

#: a staged item's buffers and their bytes (:meth:`Written.write`), taken in C for a whole batch
_PARTS, _NBYTES = itemgetter(0), itemgetter(1)


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
            write_all(self.fd, list(chain.from_iterable(map(_PARTS, items))), self.end)
        except OSError:
            try:
                os.ftruncate(self.fd, self.end)
            except OSError:
                pass
            raise
        self.end += sum(map(_NBYTES, items))
        self.count = len(staged)

    def take(self, staged: Sequence[Sequence[Any]],
             begin: Callable[[Sequence[Any]], tuple[int, int]],
             cut: Callable[[int, int], None]) -> tuple[int, Any, int]:
        """The batch takes the open batch's part of the file: what of ``staged`` is not
        written yet is written, and ``(start, place, end)`` handed over; the next batch starts
        afresh. When that write fails, everything the open batch wrote goes too
        (``cut(fd, start)``) and the error is raised."""
        try:
            self.write(staged, begin)
        except OSError:
            if self.start >= 0:
                cut(self.fd, self.start)
            self.forget()
            raise
        taken = self.start, self.place, self.end
        self.forget()
        return taken

    def write_again(self, owner: Owner, fd: int | None, offset: int,
                    cut: Callable[[int, int], None]) -> None:
        """After a refused batch (``committed(error)``): what the owner's next batch wrote
        behind it lies past ``offset``, where the refused batch began and the writer thread cut
        the file back to. It is cut back too and written again now, at ``offset``; a failure
        is left to that next batch, whose own write refuses it."""
        if not self.count:
            return
        self.forget()
        if fd is not None:
            cut(fd, offset)
        try:
            owner.write_staged()
        except OSError:
            pass


class Owner(Protocol):
    in_commit: bool

    def write_staged(self) -> None: ...

    def prepare(self) -> list[Write]: ...

    def committed(self, error: OSError | None) -> None: ...


def flush(writes: list[Write], helpers: Executor | None = None) -> OSError | None:
    """The writer thread's part: flush every file, then the directories of new files. On an
    error every file is cut back to where the batch's write began, and the cut is flushed too:
    a file whose ``fdatasync`` returned before another file's failed holds the refused bytes
    on disk, and a power cut before its next flush would bring them back."""
    try:
        flush_files([w.fd for w in writes], helpers)
        for directory in {w.directory for w in writes if w.directory}:
            fsync_dir(directory)
        for w in writes:
            if w.after is not None:
                w.after()
        return None
    except OSError as err:
        cut_back(writes)
        return err
    finally:
        for w in writes:
            os.close(w.fd)


def cut_back(writes: list[Write]) -> None:
    """Take a refused batch back out of its files, durably."""
    for w in writes:
        try:
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


class GroupCommit:
    """One per nsqd with ``--sync-every=1``: the open batch, the one being flushed, the thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, logger: logging.Logger) -> None:
        self.loop = loop
        self.logger = logger
        self._owners: list[Any] = []  # the open batch: owners with something staged
        self._steps: list[tuple[Step, bool]] = []  # ... what waits for it, in order (step, answer)
        self._scheduled = False
        #: the batch on the writer thread: (number, future, owners, steps)
        self._running: tuple[int, Future, list[Any], list[tuple[Step, bool]]] | None = None
        self._number = 0
        #: bumped by every stage(): a step that staged more is seen by this
        self.staged = 0
        #: set while a publish runs (:meth:`publish`): what it stages waits for the batch
        self.publishing = False
        #: batches flushed and the files they wrote (bench/ and /stats read these)
        self.batches = 0
        self.files = 0
        #: told every batch's outcome before its steps run (nsqd's health: NOK after a failure)
        self.on_result: Step | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="group-commit")
        #: flushes of a batch's other files, beside the writer thread's own (:func:`flush_files`)
        self._helpers = ThreadPoolExecutor(FLUSH_HELPERS, thread_name_prefix="group-commit-flush")

    @property
    def busy(self) -> bool:
        """Something is staged, waiting or being flushed: an answer given now would overtake
        it, so it is given as a step (:meth:`then`) instead."""
        return self._running is not None or bool(self._owners) or bool(self._steps)

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
        if not owner.in_commit:  # (one already in the open batch has its dispatch coming)
            owner.in_commit = True
            self._owners.append(owner)
            self._schedule()

    def then(self, step: Step, answer: bool = True) -> None:
        """Run ``step`` once everything staged so far is on disk (or refused). An ``answer``
        (a publisher's OK) also waits for whatever the steps before it staged when they ran;
        ``answer=False`` is a continuation (a fan-out the history held): it runs as soon as its
        own batch returned."""
        self._steps.append((step, answer))
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and self._running is None:
            self._scheduled = True
            self.loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        """End of a turn, or a flush just returned: hand the open batch to the writer thread."""
        self._scheduled = False
        if self._running is not None or not (self._owners or self._steps):
            return
        owners, self._owners = self._owners, []
        steps, self._steps = self._steps, []
        for owner in owners:
            owner.in_commit = False
        writes: list[Write] = []
        error: OSError | None = None
        for owner in owners:
            try:
                writes += owner.prepare()
            except OSError as err:  # (a write failed, a new file could not be made): refused
                error = error or err
        if error is not None or not writes:
            if error is not None:
                cut_back(writes)  # (the owners prepared before the one that failed wrote)
            for w in writes:
                os.close(w.fd)
            self._finish(owners, steps, error, wrote=False)
            if self._owners or self._steps:
                self._schedule()
            return
        self._number += 1
        number = self._number
        future = self._thread.submit(flush, writes, self._helpers)
        self._running = (number, future, owners, steps)
        self.batches += 1
        self.files += len(writes)
        future.add_done_callback(
            lambda _f: self.loop.call_soon_threadsafe(self._flushed, number))

    def _flushed(self, number: int) -> None:
        running = self._running
        if running is None or running[0] != number:
            return  # drain() finished it already
        self._running = None
        self._finish(running[2], running[3], running[1].result())
        self._dispatch()  # what was staged while it ran

    def _finish(self, owners: list[Any], steps: list[tuple[Step, bool]],
                error: OSError | None, wrote: bool = True) -> None:
        """The batch is on disk (``error`` None) or refused: owners first (what they wrote
        becomes readable, or is dropped), then the steps in order. Once a step stages more (a
        fan-out the history held writes the topic's or channels' queues), the answers after it
        wait for the next batch, in front of those already waiting there, so a connection's
        answers keep their order; the continuations after it still run (their own writes are
        on disk)."""
        if error is not None:
            self.logger.error("GROUP COMMIT: a write or flush failed, %d publish step(s) "
                              "refused - %s", len(steps), error)
        for owner in owners:
            try:
                owner.committed(error)
            except Exception:
                self.logger.exception("GROUP COMMIT: committing %r failed", owner)
        if self.on_result is not None and (wrote or error is not None):
            self.on_result(error)  # (a batch that wrote nothing says nothing of the disk)
        carry = False
        carried: list[tuple[Step, bool]] = []
        for step, answer in steps:
            if carry and answer:
                carried.append((step, answer))
                continue
            before = self.staged
            try:
                step(error)
            except Exception:
                self.logger.exception("GROUP COMMIT: a step failed")
            carry = carry or (error is None and self.staged != before)
        if carried:
            self._steps[:0] = carried
            self._schedule()

    def drain(self) -> None:
        """Finish everything staged and waiting, on the calling (loop) thread: at shutdown,
        before the files close."""
        while True:
            running = self._running
            if running is not None:
                error = running[1].result()
                self._running = None
                self._finish(running[2], running[3], error)
            elif self._owners or self._steps:
                self._dispatch()
            else:
                return

    def close(self) -> None:
        self.drain()
        self._thread.shutdown(wait=True)
        self._helpers.shutdown(wait=True)
