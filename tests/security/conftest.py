"""Fixtures for the security tests (see support.py)."""

from __future__ import annotations

import pytest

from security.support import OPENSSL, AuthServer, SecureNsqd, make_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    if OPENSSL is None:
        pytest.skip("needs the openssl command to make test certificates")
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def secure_nsqd(tmp_path):
    """Factory: ``secure_nsqd(*flags, certs=...)``; every nsqd started is stopped by PID."""
    started: list[SecureNsqd] = []

    def start(*extra: str, certs=None) -> SecureNsqd:
        node = SecureNsqd(tmp_path / f"nsqd{len(started)}", *extra, certs=certs)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


@pytest.fixture
def auth_server():
    server = AuthServer()
    yield server
    server.close()
