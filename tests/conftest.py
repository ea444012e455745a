"""Shared fixtures: real server processes on free loopback ports, always stopped by PID."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.servers import Nsqd


@pytest.fixture
def nsqd_factory(tmp_path):
    """Start nsqd processes with extra flags; all are stopped at the end of the test."""
    started: list[Nsqd] = []

    def start(*extra: str, data_path: Path | None = None) -> Nsqd:
        node = Nsqd(data_path or tmp_path / f"nsqd{len(started)}", *extra)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


@pytest.fixture
def nsqd(nsqd_factory):
    return nsqd_factory()


@pytest.fixture(scope="module")
def shared_nsqd(tmp_path_factory):
    """One nsqd for a whole module of tests that use distinct topic names."""
    node = Nsqd(tmp_path_factory.mktemp("shared_nsqd"))
    yield node
    node.stop()
