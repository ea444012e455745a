"""Where upstream NSQ v1.3.0's binaries are: only $NSQ_UPSTREAM_BIN; side-by-side tests skip without it.

The one place the suite looks for them. Every skip for their absence gives a reason starting
with ``SKIP_PREFIX``, so the run ends with one line counting those skips (tests/conftest.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

SKIP_PREFIX = "side-by-side:"
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


def requires(*names: str) -> pytest.MarkDecorator:
    """A skipif mark for a module or test that runs upstream's ``names`` side by side."""
    return pytest.mark.skipif(not have(*names), reason=skip_reason(*names))


def is_side_by_side_skip(report) -> bool:
    """Whether a skipped test's report says it skipped for want of upstream's binaries."""
    longrepr = getattr(report, "longrepr", None)
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
    if reason.startswith("Skipped: "):
        reason = reason[len("Skipped: "):]
    return reason.startswith(SKIP_PREFIX)


def skipped_summary(count: int) -> str:
    """The closing line for ``count`` side-by-side tests skipped."""
    return f"{count} side-by-side tests skipped: upstream's binaries absent; {ENABLE}"
