"""Where upstream NSQ v1.3.0's binaries are: only $NSQ_UPSTREAM_BIN; side-by-side tests skip without it."""
from __future__ import annotations
import os
from pathlib import Path
import pytest

def upstream_dir() -> Path | None:
    value = os.environ.get("NSQ_UPSTREAM_BIN")
    return Path(value) if value and Path(value).is_dir() else None

def upstream_binary(name: str) -> str:
    """The path of upstream's `name` binary, or skip the calling test."""
    d = upstream_dir()
    if d is None or not (d / name).exists():
        pytest.skip(f"side-by-side: upstream {name} not found (set NSQ_UPSTREAM_BIN)")
    return str(d / name)
