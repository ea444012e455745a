"""File work no answer waits for, on threads of its own: the fsyncs that ``--sync-every=N>1``
and ``--sync-timeout`` ask for, and segment files made before they are needed.

One thread takes every such fsync of the disk queues (:func:`sync_thread`): they are serialised
by the disk anyway, and a thread per queue would be thousands. Creating a file waits on the file system's journal, which a busy disk makes slow (tens of
milliseconds behind a thousand logs' fsyncs): a roll on the event loop would stall every
connection for that long. So the file after the one being written is made ahead, and a roll
takes it (a dict pop); only when it is not there yet does the roll make it itself.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Executor, ThreadPoolExecutor

from .files import O_CLOEXEC

__all__ = ["FilesAhead", "sync_thread"]

_sync_thread: ThreadPoolExecutor | None = None


def sync_thread() -> ThreadPoolExecutor:
    """The one thread for the disk queues' background fsyncs (made at its first use)."""
    global _sync_thread
    if _sync_thread is None:
        _sync_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="diskqueue-sync")
    return _sync_thread


class FilesAhead:
    """Files made ahead for one log, by a number that grows (its segment ids)."""

    def __init__(self, executor: Executor, logger: logging.Logger, label: str) -> None:
        self.executor = executor
        self.logger = logger
        self.label = label
        #: fds made ahead, by number: the thread adds, the loop pops (each a single dict
        #: operation, atomic under the GIL: no lock for the loop to wait on)
        self._made: dict[int, int] = {}
        self.closed = False

    def make(self, number: int, path: str) -> None:
        """Make ``path`` (file ``number``) ahead of its use."""
        self.executor.submit(self._make, number, path)

    def _make(self, number: int, path: str) -> None:
        if self.closed:
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | O_CLOEXEC, 0o644)
        except OSError as err:  # (the roll makes it then, or reports the error)
            self.logger.warning("%s: could not make %s ahead - %s", self.label, path, err)
            return
        self._made[number] = fd
        if self.closed:  # closed meanwhile: whichever of close() and this pops it closes it
            self._close(number)

    def take(self, number: int, path: str) -> int:
        """File ``number`` open for writing: the one made ahead, else made now. Files made for
        numbers before it (fast rolls went past them) are closed."""
        made = self._made
        fd = made.pop(number, None)
        for other in list(made):
            if other < number:
                self._close(other)
        if fd is None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | O_CLOEXEC, 0o644)
        return fd

    def _close(self, number: int) -> None:
        fd = self._made.pop(number, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        self.closed = True
        for number in list(self._made):
            self._close(number)
