"""Running a utility and upstream v1.3.0's binary of the same name under the same conditions.

Upstream's binaries come from ``NSQ_UPSTREAM_BIN`` (``helpers.upstream``); without them
(CI has none) the differential tests compare ours with what upstream's printed when it was
recorded (``helpers.recording``). What necessarily differs between two runs is masked before
comparing: Go's log timestamps, nsq_to_file's microsecond ones, message ids, random ephemeral
channel names, the program path in ``Usage of``, the host and hour in archive names, and whatever the caller lists (ports of servers
started per run, temporary directories).
"""

from __future__ import annotations

import collections
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from helpers.servers import ServerProcess, free_port
from helpers.upstream import have, upstream_dir
from tools.tool_util import VENV_BIN


TOOLS = ("nsq_stat", "nsq_tail", "nsq_to_file", "nsq_to_http", "nsq_to_nsq", "to_nsq", "nsqd")
#: the directory of upstream's binaries, or None when it does not hold the utilities
UPSTREAM = upstream_dir() if have(*TOOLS) else None
SIDES = ("upstream", "nsqpy")


def binary(side: str, name: str) -> str:
    if side == "upstream":
        assert UPSTREAM is not None
        return str(UPSTREAM / name)
    return str(VENV_BIN / name)


# --- masking ------------------------------------------------------------------------------------

_GO_STAMP = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ", re.M)
_LG_STAMP = re.compile(r"^(\[[^\]]*\] )?\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} ", re.M)
_MSG_ID = re.compile(r"\b[0-9a-f]{16}\b")
_TAIL_CHANNEL = re.compile(r"tail\d{6}#ephemeral")
_USAGE = re.compile(r"^Usage of \S*/", re.M)
# nsq_to_file's archive names: <topic>.<host>.<date>_<hour>.log (the machine and the hour differ)
_ARCHIVE = re.compile(rf"\.{re.escape(socket.gethostname())}\.\d{{4}}-\d\d-\d\d_\d\d\b")


def mask(text: str, replacements: dict[str, str] | None = None) -> list[str]:
    """stderr as comparable lines."""
    text = _LG_STAMP.sub(lambda m: f"{m.group(1) or ''}TS.us ", text)
    text = _GO_STAMP.sub("TS ", text)
    text = _MSG_ID.sub("MSGID", text)
    text = _TAIL_CHANNEL.sub("tailN#ephemeral", text)
    text = _USAGE.sub("Usage of BIN/", text)
    text = _ARCHIVE.sub(".HOST.DATE_HOUR", text)
    for old, new in (replacements or {}).items():
        text = text.replace(old, new)
    return text.splitlines()


# go-nsq's goroutines log these while winding down, in an order that varies from run to run
# (a connection's read loop, write loop and cleanup race, and so do a consumer's RDY and lookupd
# loops); compared as a multiset, not in order
CLOSE_SEQUENCE = ("beginning close", "readLoop exiting", "breaking out of writeLoop",
                  "writeLoop exiting", "finished draining, cleanup exiting", "clean close complete",
                  "exiting router")
CONSUMER_WIND_DOWN = ("rdyLoop exiting", "exiting lookupdLoop")
_INSTANCE = re.compile(r"^TS (INF|WRN|ERR)\s+(\d+) ")


def is_close_line(line: str) -> bool:
    return (any(line.endswith(") " + text) for text in CLOSE_SEQUENCE)
            or any(line.endswith("] " + text) for text in CONSUMER_WIND_DOWN))


def _collapse_retries(lines: list[str], period: int = 3) -> list[str]:
    """One failed reconnect cycle (``connecting``, ``error connecting``, ``re-connecting in``)
    for any number in a row: how many fit in an outage is the test's timing, not the tool's."""
    out: list[str] = []
    for line in lines:
        out.append(line)
        cycle = out[-period:]
        if (len(out) >= 2 * period and out[-2 * period:-period] == cycle
                and any("error connecting to nsqd" in x for x in cycle)):
            del out[-period:]
    return out


def streams(lines: list[str]) -> dict[str, list[str]]:
    """Lines per go-nsq instance (its number), the close sequence left out; the program's own
    lines under "main". Each instance logs from its own goroutines, so only the order within
    one is stable between runs."""
    out: dict[str, list[str]] = collections.defaultdict(list)
    for line in lines:
        if is_close_line(line):
            continue
        m = _INSTANCE.match(line)
        out[m.group(2) if m else "main"].append(line)
    return {key: _collapse_retries(value) for key, value in out.items()}


def assert_same_lines(upstream: list[str] | dict[str, list[str]], ours: list[str]) -> None:
    """The same lines, in the same order within each go-nsq instance and the program's own; of
    the wind-down lines, at least every one upstream printed (its process may exit before the
    last goroutines have logged; ours prints them all). ``upstream`` as recorded is its
    ``streams``: which wind-down lines it printed varies from run to run, so that part is
    checked live only."""
    if isinstance(upstream, dict):
        assert streams(ours) == upstream, "\n".join(["upstream:", repr(upstream), "", "nsqpy:",
                                                     *ours])
        return
    both = "\n".join(["upstream:", *upstream, "", "nsqpy:", *ours])
    assert streams(ours) == streams(upstream), both
    missing = collections.Counter(upstream) - collections.Counter(ours)
    assert not [line for line in missing if is_close_line(line)], both


# --- running ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    code: int | None  # None: still running when stopped by the test
    stdout: bytes
    stderr: str
    elapsed: float

    def lines(self, replacements: dict[str, str] | None = None) -> list[str]:
        return mask(self.stderr, replacements)


def without_extensions(tool: str, lines: list[str]) -> list[str]:
    """A usage text less nsqpy's own flags (``Flag.extension``: opt-in additions such as
    ``--from``), so that every upstream flag must read as upstream's does."""
    import importlib

    flagset = importlib.import_module(f"nsqpy.tools.{tool}").build_flagset()
    names = {f"-{f.name}" for f in flagset.flags if f.extension}
    out: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith("  -"):  # a flag's head line; its usage lines follow, "    \t..."
            skipping = line.split()[0] in names
        elif not line.startswith("    \t"):
            skipping = False
        if not skipping:
            out.append(line)
    return out


def run_once(argv: list[str], *, input: bytes = b"", timeout: float = 15.0) -> Outcome:
    """Run to completion (killed by PID at ``timeout``: then ``code`` is None)."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(input, timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        code = None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return Outcome(code, out, err.decode(errors="replace"), time.monotonic() - started)


class Running:
    """A utility in the background: stdout/stderr to files, stopped by PID."""

    def __init__(self, argv: list[str], log_dir: Path, stdin: Any = subprocess.DEVNULL) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.monotonic_ns()
        self.out_path = log_dir / f"{Path(argv[0]).name}.{stamp}.out"
        self.err_path = log_dir / f"{Path(argv[0]).name}.{stamp}.err"
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=stdin, stdout=self._out, stderr=self._err)

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> bytes:
        return self.out_path.read_bytes()

    def wait_for_stderr(self, predicate: Callable[[str], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.stderr()):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.proc.args[0]}: stderr never matched; it has:\n{self.stderr()}")

    def finish(self, sig: int | None = signal.SIGTERM, timeout: float = 20.0) -> Outcome:
        """Signal (unless it already exited, or ``sig`` is None), wait, collect."""
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            code = None
        for fh in (self._out, self._err):
            fh.close()
        return Outcome(code, self.stdout(), self.stderr(), time.monotonic() - self.started)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for fh in (self._out, self._err):
            if not fh.closed:
                fh.close()


class NsqdAt(ServerProcess):
    """nsqd from a given side (ours or upstream's) on fixed or free loopback ports."""

    def __init__(self, side: str, directory: Path, tcp_port: int | None = None,
                 http_port: int | None = None, extra: list[str] | None = None) -> None:
        self.side = side
        self.directory = directory
        self.extra = list(extra or [])
        self.tcp_port = tcp_port or free_port()
        self.http_port = http_port or free_port()
        directory.mkdir(parents=True, exist_ok=True)
        argv = [binary(side, "nsqd"), f"--tcp-address=127.0.0.1:{self.tcp_port}",
                f"--http-address=127.0.0.1:{self.http_port}", "--broadcast-address=127.0.0.1",
                f"--data-path={directory}", *self.extra]
        super().__init__(argv, f"http://127.0.0.1:{self.http_port}/ping", directory / "nsqd.log")

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def restart(self) -> "NsqdAt":
        self.stop()
        return NsqdAt(self.side, self.directory, self.tcp_port, self.http_port, self.extra)
