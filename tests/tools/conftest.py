"""Fixtures for the utilities' tests: a per-test process tracker and an nsqlookupd factory.

nsqd comes from the shared ``nsqd`` / ``nsqd_factory`` fixtures (``tests/conftest.py``).
"""

from __future__ import annotations

import pytest

from tools.tool_util import Nsqlookupd, Tools


@pytest.fixture
def tools(tmp_path):
    """Start utilities with ``tools.start(name, *args)``; survivors are SIGKILLed by PID."""
    tracker = Tools(tmp_path / "tool-logs")
    try:
        yield tracker
    finally:
        tracker.cleanup()


@pytest.fixture
def lookupd_factory(tmp_path):
    started: list[Nsqlookupd] = []

    def start() -> Nsqlookupd:
        node = Nsqlookupd(tmp_path / f"nsqlookupd{len(started)}")
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()
