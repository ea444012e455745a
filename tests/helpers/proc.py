"""What /proc says of a server process the tests started: its mapped files and resident size."""

from __future__ import annotations

from pathlib import Path


def mapped(pid: int) -> str:
    """``/proc/<pid>/maps``: which shared libraries and modules' files the process loaded."""
    return Path(f"/proc/{pid}/maps").read_text()


def rss_kib(pid: int) -> int:
    """The resident set size in KiB (``VmRSS``)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])
