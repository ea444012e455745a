"""A full disk for tests: a small tmpfs mounted in the test's directory (root only)."""

from __future__ import annotations

import contextlib
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.wire import Wire


@contextlib.contextmanager
def small_tmpfs(tmp_path: Path, size: str = "512k") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``tmp_path/small``, unmounted afterwards; skips the test when it
    cannot be mounted (callers skip without root first)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def publishes_again(node, topic: str, data: Path) -> None:
    """Once the consumed queue files are gone and the metadata temps removed, a publish works
    and /ping says OK again."""
    for f in data.glob("*.tmp"):
        f.unlink()
    Wire(node.tcp_address).pub(topic, b"after")
    with urllib.request.urlopen(f"http://{node.http_address}/ping") as r:
        assert r.read() == b"OK"
    assert "Traceback" not in node.log()
