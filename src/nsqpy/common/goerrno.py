"""Go's words for a failed system call, which upstream's error lines quote.

Go prints a ``syscall.Errno`` as the C library's message with its first letter lower-cased
("no such file or directory"), and an ``*os.PathError`` as ``<op> <path>: <errno text>``.
Every place that repeats one of upstream's error lines builds it here.
"""

from __future__ import annotations

import os


def errno_text(err: OSError) -> str:
    """Go's ``syscall.Errno`` text for ``err``: ``connection refused``, ``permission denied``."""
    text = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
    return text[:1].lower() + text[1:]


def path_error(op: str, path: str, err: OSError) -> str:
    """Go's ``*os.PathError`` text: ``open /data/x.log: no such file or directory``."""
    return f"{op} {path}: {errno_text(err)}"
