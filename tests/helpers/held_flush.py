"""A group commit whose flush waits: the commit's ``fdatasync`` (a module global of
``nsqpy.nsqd.storage.commit``) replaced for one test, so a batch stays on the writer thread while
the test does what it must do meanwhile (a disk that takes its time), and, asked to, fails then
(a dying disk's EIO)."""

from __future__ import annotations

import errno
import threading

import pytest

from nsqpy.nsqd.storage import commit as commit_module


class HeldFlush:
    """The first flush from now waits in ``fdatasync`` until :attr:`release` is set
    (:attr:`entered` says it is waiting); ``fail``: that flush then fails with EIO."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail
        self.real = commit_module.fdatasync
        monkeypatch.setattr(commit_module, "fdatasync", self)

    def __call__(self, fd: int) -> None:
        if not self.release.is_set():
            self.entered.set()
            self.release.wait(20)
            if self.fail:
                raise OSError(errno.EIO, "held flush failed")
        self.real(fd)
