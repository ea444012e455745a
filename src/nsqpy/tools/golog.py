"""Go's standard ``log`` package, as upstream's utilities write to stderr.

Upstream's utilities report through Go's default logger: ``2006/01/02 15:04:05 message``, local
time to the second, no level, no prefix; ``log.Fatal`` writes that line and exits with status 1
at once, skipping any cleanup. Operators' scripts grep these lines and check that status, so the
utilities write them exactly so (``nsq_to_file`` has its own prefixed logger besides, see
:mod:`nsqpy.common.log`). go-nsq's consumers and producers log through the same default logger
(:mod:`nsqpy.tools.gonsq` shapes those lines, :mod:`nsqpy.tools.goerrors` Go's error texts).
"""

from __future__ import annotations

import os
import signal
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

