"""Fixtures for the nsqadmin tests (processes and helpers live in ``admin_util``)."""

from __future__ import annotations

import pytest

from admin.admin_util import ADMIN_USER, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """nsqlookupd + 2 nsqd + nsqadmin that only lets ``alice`` act, posting notifications."""
    cl, started = start_cluster(tmp_path_factory.mktemp("admin_cluster"),
                                f"--admin-user={ADMIN_USER}")
    yield cl
    for proc in reversed(started):
        proc.stop()
    assert cl.sink is not None
    cl.sink.close()
