"""Where upstream NSQ v1.3.0's binaries are: only $NSQ_UPSTREAM_BIN.

The one place the suite looks for them. Without them a side-by-side test compares ours with
upstream's recorded answers (``helpers.recording``); one that still skips for their absence
gives a reason starting with ``SKIP_PREFIX`` (or ``LIVE_ONLY_PREFIX`` for the few a recording
cannot stand in for), and the run ends with lines counting those skips (tests/conftest.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

SKIP_PREFIX = "side-by-side:"
#: a side-by-side test that a recording cannot stand in for (docs/testing.md lists them)
LIVE_ONLY_PREFIX = "live-only:"
ENABLE = ("set NSQ_UPSTREAM_BIN to a directory holding upstream v1.3.0's binaries "
          "to run them (docs/testing.md)")


def upstream_dir() -> Path | None:
    value = os.environ.get("NSQ_UPSTREAM_BIN")
    return Path(value) if value and Path(value).is_dir() else None


def upstream_path(name: str) -> Path | None:
    """The path of upstream's ``name`` binary, or None when it is not there."""
    d = upstream_dir()
    return d / name if d is not None and (d / name).exists() else None


def skip_reason(*names: str) -> str:
    return f"{SKIP_PREFIX} upstream {'/'.join(names)} not found (set NSQ_UPSTREAM_BIN)"


def upstream_binary(name: str) -> str:
    """The path of upstream's `name` binary, or skip the calling test."""
    path = upstream_path(name)
    if path is None:
        pytest.skip(skip_reason(name))
    return str(path)


def have(*names: str) -> bool:
    return all(upstream_path(n) is not None for n in names)


def live_only(why: str) -> str:
    """The skip reason of a side-by-side test that has no recorded form, and ``why``: it needs
    upstream's binaries running (a server ours talks to), not just their answers."""
    return f"{LIVE_ONLY_PREFIX} {why} (set NSQ_UPSTREAM_BIN)"


def _skip_reason_of(report) -> str:
    longrepr = getattr(report, "longrepr", None)
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


def is_side_by_side_skip(report) -> bool:
    """Whether a skipped test's report says it skipped for want of upstream's binaries."""
    return _skip_reason_of(report).startswith(SKIP_PREFIX)


def is_live_only_skip(report) -> bool:
    """Whether a skipped test is a live-only side-by-side test, without upstream's binaries."""
    return _skip_reason_of(report).startswith(LIVE_ONLY_PREFIX)


def skipped_summary(count: int) -> str:
    """The closing line for ``count`` side-by-side tests skipped."""
    return f"{count} side-by-side tests skipped: upstream's binaries absent; {ENABLE}"


def live_only_summary(count: int) -> str:
    """The closing line for ``count`` live-only side-by-side tests skipped."""
    return (f"{count} live-only side-by-side tests skipped: they need upstream's binaries running, "
            "a recording cannot stand in (docs/testing.md)")
