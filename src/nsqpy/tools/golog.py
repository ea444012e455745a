"""Go's standard ``log`` package, as upstream's utilities write to stderr.

Upstream's utilities report through Go's default logger: ``2006/01/02 15:04:05 message``, local
time to the second, no level, no prefix; ``log.Fatal`` writes that line and exits with status 1
at once, skipping any cleanup. Operators' scripts grep these lines and check that status, so the
utilities write them exactly so (``nsq_to_file`` has its own prefixed logger besides, see
:mod:`nsqpy.common.log`). go-nsq's consumers and producers log through the same default logger
(:mod:`nsqpy.tools.gonsq` shapes those lines).
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from typing import NoReturn


def stamp(now: float | None = None) -> str:
    """Go's ``log.LstdFlags`` prefix: ``2006/01/02 15:04:05`` in local time."""
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(time.time() if now is None else now))


def log(message: str) -> None:
    """``log.Print``: one stamped line on stderr (a newline is added unless there is one)."""
    line = f"{stamp()} {message}"
    if not line.endswith("\n"):
        line += "\n"
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr closed: nowhere left to report


def fatal(message: str) -> NoReturn:
    """``log.Fatal``: the line, then exit status 1 at once (no cleanup, as Go's ``os.Exit``).

    What the program already printed to stdout is flushed first: Go's stdout is unbuffered.
    """
    log(message)
    exit_now(1)


def exit_now(code: int) -> NoReturn:
    """``os.Exit``: flush stdout, then end the process without unwinding (connections drop,
    nsqd re-delivers what was in flight, as it does for upstream's)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def go_list(items: list[str]) -> str:
    """``fmt.Sprintf("%s", []string{...})``: ``[a b c]``."""
    return "[" + " ".join(items) + "]"


def die_of_sigpipe() -> NoReturn:
    """End as a Go program does after writing to a closed stdout: killed by SIGPIPE (shells
    report 141; ``| head`` pipelines treat it as normal)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush at exit
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    os._exit(141)  # not reached


def os_error(op: str, path: str, err: OSError) -> str:
    """Go's ``*os.PathError`` text: ``open /data/x.log: permission denied``."""
    why = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
    return f"{op} {path}: {why[:1].lower()}{why[1:]}"


def link_error(src: str, dst: str, err: OSError) -> str:
    """Go's ``*os.LinkError`` text: ``link /work/x /out/x: file exists``."""
    why = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
    return f"link {src} {dst}: {why[:1].lower()}{why[1:]}"


def mkdir_all(path: str, mode: int) -> None:
    """Go's ``os.MkdirAll``, with its error texts (OSError whose ``str`` is Go's): which
    directory it names and how depend on Go's walk, e.g. ``mkdir /data/out: not a directory``
    when ``/data/out`` is a file and a directory below it was asked for."""
    try:
        st = os.stat(path)
    except OSError:
        pass
    else:
        if stat.S_ISDIR(st.st_mode):
            return
        raise GoOSError(os_error("mkdir", path, NotADirectoryError(20, "")))
    i = len(path)
    while i > 0 and path[i - 1] == "/":
        i -= 1
    j = i
    while j > 0 and path[j - 1] != "/":
        j -= 1
    if j > 1:
        mkdir_all(path[: j - 1], mode)
    try:
        os.mkdir(path, mode)
    except OSError as err:
        if os.path.isdir(path) and not os.path.islink(path):
            return
        raise GoOSError(os_error("mkdir", path, err)) from None


class GoOSError(OSError):
    """An OSError whose text is already Go's."""

    def __str__(self) -> str:
        return str(self.args[0])
