"""tests/other_pythons.sh, the part of ``make test`` that runs on every other CPython we claim:
a version the machine lacks is named as skipped and does not fail the run."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "other_pythons.sh"


def test_a_missing_version_is_named_and_skipped():
    done = subprocess.run([str(SCRIPT), "3.99"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("== CPython 3.99: skipped, not found (python3.99 on PATH, "), \
        done.stdout
