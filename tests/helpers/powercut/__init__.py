"""A file system that loses what was not fsynced when the power is cut, for tests (after
Jepsen's LazyFS): a FUSE mount whose fsynced data and committed directory entries live in a
backing directory, and everything since in the FUSE process's memory.

    fs = PowerCutFS(tmp_path / "fs")           # mode="journal" (ext4-like) or "strict" (POSIX)
    root = fs.mount()                           # a directory: run a program's data path on it
    ...                                         # kill the program (SIGKILL) first, then
    report = fs.cut(tear=True, seed=7)          # the power goes: unsynced data and entries are lost
    root = fs.mount()                           # the machine comes back on what survived
    fs.stop()                                   # a clean shutdown (everything kept), unmounted

Faults beside the cut (rules in ``disk.py``): ``fs.limit(n)`` makes the disk full at ``n`` bytes
of files (ENOSPC, short writes; ``None`` lifts it), ``fs.fail_fsyncs(n, match)`` fails the next
``n`` fsyncs (of paths containing ``match``) with EIO, and ``fs.arm("write" | "fsync" |
"fsyncdir", after=k,
tear=..., seed=...)`` cuts the power by itself at the k-th such call from now:
``fs.wait_tripped()`` waits for it, and once the programs on the mount are stopped
``fs.unplug()`` takes the dead mount away.

The rules of what survives are in ``disk.py``; ``serve.py`` is the FUSE process. Each mount is
a process of its own, stopped by PID; ``cut`` unmounts too, so the kernel keeps nothing of the
old mount (pages, names, sizes) into the next. Needs ``/dev/fuse`` (``usable()`` says whether it
can be opened), libfuse 3 (Debian's ``fuse3``, which ``make test`` installs) and mfusepy.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..polling import wait_for

SERVE = Path(__file__).resolve().parent / "serve.py"


def usable() -> str | None:
    """None when FUSE mounts can be made here, else why not (a skip reason)."""
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
    except OSError as err:
        return f"power-cut tests need a usable /dev/fuse: {err}"
    os.close(fd)
    return None


class PowerCutFS:
    """One simulated disk (its backing directory) and the mount of it currently up."""

    def __init__(self, where: Path, mode: str = "journal") -> None:
        self.where = Path(where)
        self.backing = self.where / "disk"
        self.mountpoint = self.where / "mnt"
        self.control = self.where / "control.sock"
        self.mode = mode
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.log = self.where / "powercut.log"

    def mount(self) -> Path:
        """Start serving the disk as it is in the backing directory; returns the mount point."""
        assert self.proc is None, "already mounted"
        self.control.unlink(missing_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(SERVE), str(self.backing), str(self.mountpoint),
                 str(self.control), self.mode], stdout=log, stderr=subprocess.STDOUT)

        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the FUSE process exited with {self.proc.returncode}: "
                                     f"{self.log.read_text(errors='replace')[-2000:]}")
            return self.mounted() and self.control.exists()

        wait_for(up, 20, "the power-cut file system to mount")
        return self.mountpoint

    def mounted(self) -> bool:
        """Whether the kernel lists the mount (asking the file system itself, a stat, fails
        with EIO once the power is cut)."""
        where = os.fsencode(self.mountpoint.resolve())
        with open("/proc/self/mountinfo", "rb") as f:
            return any(line.split()[4] == where for line in f)

    def _order(self, order: dict) -> dict:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(30)
            s.connect(str(self.control))
            s.sendall(json.dumps(order).encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
        reply = json.loads(answer)
        if "error" in reply:
            raise OSError(reply["error"])
        return reply

    def stats(self) -> dict:
        """Counts of the mount so far: fsyncs, directory fsyncs, commits, writes, inodes."""
        return self._order({"op": "stats"})

    def limit(self, nbytes: int | None) -> int:
        """Make the disk full at ``nbytes`` bytes of files (None: no limit); returns the bytes
        its files hold now."""
        return self._order({"op": "limit", "bytes": nbytes})["used"]

    def fail_fsyncs(self, n: int, match: str = "") -> None:
        """The next ``n`` fsyncs (of a path containing ``match``) fail with EIO and make
        nothing durable."""
        self._order({"op": "fail_fsyncs", "n": n, "match": match})

    def arm(self, on: str, after: int, match: str = "", tear: bool = False,
            seed: int | None = None) -> None:
        """Cut the power at the ``after``-th ``on`` (``write``/``fsync``/``fsyncdir``, of a path
        containing ``match``) from now, before it is applied; that call and all later ones fail
        (EIO)."""
        self._order({"op": "arm", "on": on, "after": after, "match": match, "tear": tear,
                     "seed": seed})

    def tripped(self) -> dict | None:
        """The armed cut's report (``op``, ``path``, lost and torn pages) once it went off."""
        return self.stats()["tripped"]

    def wait_tripped(self, timeout: float) -> dict:
        wait_for(self.tripped, timeout, "the armed power cut to go off")
        return self.tripped()  # type: ignore[return-value]

    def unplug(self) -> None:
        """After an armed cut went off (and the programs on the mount are stopped): the dead
        mount goes away, as :meth:`cut` takes it away."""
        self._unmount()

    def sync(self) -> None:
        """Make everything written so far durable, as ``sync(1)`` does."""
        self._order({"op": "sync"})

    def cut(self, tear: bool = False, seed: int | None = None) -> dict:
        """Cut the power: what was not made durable is lost (``tear``: a seeded part of it
        reaches the disk, the last page torn) and the mount goes away. Stop the programs using
        it first (as the power would): a file still open keeps the unmount waiting."""
        report = self._order({"op": "cut", "tear": tear, "seed": seed})
        self._unmount()
        return report

    def stop(self) -> None:
        """A clean shutdown: everything written is kept; unmounted. Safe to call twice."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.sync()
            except OSError:
                pass  # already cut, or the process is going: unmount all the same
        self._unmount()

    def _unmount(self) -> None:
        tool = shutil.which("fusermount3")
        argv = [tool, "-u"] if tool else ["umount"]

        def unmounted() -> bool:
            if self.mounted():
                subprocess.run([*argv, str(self.mountpoint)], capture_output=True, timeout=20)
            return not self.mounted()

        try:
            wait_for(unmounted, 20, f"{self.mountpoint} to unmount (a file still open there?)",
                     interval=0.1)
        except AssertionError:  # still busy: detach it lazily rather than leave it behind
            subprocess.run([*argv, "-z" if tool else "-l", str(self.mountpoint)],
                           capture_output=True, timeout=20)
        proc, self.proc = self.proc, None
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
