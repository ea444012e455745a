"""Writing and cutting segment files: the system calls the disk queue and the history share.

A write either lands whole or is taken back: :func:`write_all` hands the kernel the caller's
buffers as they are (``pwritev``, no join), finishes a short write, and raises on failure so the
caller can cut the file back to where the write began (:func:`cut_back`). A torn record left by
a crash is cut in place at start-up (:func:`cut_torn_tail`), never moved aside: everything
before it is whole, and nothing after it was ever acknowledged.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Sequence

__all__ = ["IOV_MAX", "O_CLOEXEC", "fdatasync", "write_all", "cut_back", "cut_torn_tail",
           "fsync_dir", "makedirs_durable"]

#: buffers one ``pwritev`` takes (Linux's UIO_MAXIOV); longer lists go in several calls
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
fdatasync = getattr(os, "fdatasync", os.fsync)


def write_all(fd: int, parts: Sequence[bytes], offset: int) -> int:
    """Write ``parts`` back to back at ``offset``; returns the bytes written (all of them).

    Raises OSError when the kernel refuses (ENOSPC, EFBIG, EIO) or writes nothing; what landed
    before the error stays in the file, to be cut by :func:`cut_back`."""
    total = 0
    pos = offset
    for start in range(0, len(parts), IOV_MAX):
        chunk = parts[start:start + IOV_MAX] if len(parts) > IOV_MAX else parts
        want = sum(map(len, chunk))
        done = os.pwrite(fd, chunk[0], pos) if len(chunk) == 1 else os.pwritev(fd, chunk, pos)
        if done < want:  # a short write: the rest in one piece, or the error that stopped it
            rest = memoryview(b"".join(chunk))[done:]
            while rest:
                n = os.pwrite(fd, rest, pos + done)
                if n <= 0:
                    raise OSError(errno.EIO, "short write")
                done += n
                rest = rest[n:]
        pos += want
        total += want
    return total


def cut_back(fd: int, size: int, logger: logging.Logger, what: str) -> None:
    """Take back a refused write: the file ends at ``size`` again. A failure is logged (the
    bytes past ``size`` are then overwritten by the next write, which starts there)."""
    try:
        os.ftruncate(fd, size)
    except OSError as err:
        logger.error("%s: failed to cut back a refused write - %s", what, err)


def cut_torn_tail(fd: int, path: str, good_end: int, file_size: int,
                  logger: logging.Logger, label: str) -> None:
    """A crash tore the last record of ``path``: cut the file at ``good_end``, the end of its
    last whole record, and make the cut durable before anything is appended after it."""
    logger.warning("%s: %s: cutting a torn tail of %d bytes at offset %d",
                   label, path, file_size - good_end, good_end)
    os.ftruncate(fd, good_end)
    fdatasync(fd)


def fsync_dir(path: str) -> None:
    """Make the names in directory ``path`` durable (a file created or removed)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durable(path: str) -> None:
    """``os.makedirs(path)`` whose new names survive a power loss: POSIX makes a new entry
    durable only through an fsync of its directory, so the parent of each directory made is
    fsynced, outermost first (ext4's journal would carry them with any fsync; not every file
    system does)."""
    made: list[str] = []
    where = os.path.abspath(path)
    while not os.path.isdir(where):
        made.append(where)
        where = os.path.dirname(where)
    os.makedirs(path, exist_ok=True)
    for directory in reversed(made):
        fsync_dir(os.path.dirname(directory))
