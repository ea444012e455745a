"""Client tests: run ``async def`` tests on a fresh event loop, and start real servers.

Servers are subprocesses on free loopback ports (``helpers.servers``), stopped by PID at the end
of each test, whatever happened.
"""

from __future__ import annotations

import asyncio
import inspect
import shutil
import sys
from pathlib import Path

import pytest

from helpers.servers import Nsqd, Nsqlookupd, ServerProcess

VENV_BIN = Path(sys.executable).parent


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """No pytest-asyncio in the venv: a coroutine test runs in its own ``asyncio.run``."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**args))
        return True
    return None


def have_nsqlookupd() -> bool:
    return (VENV_BIN / "nsqlookupd").exists() or shutil.which("nsqlookupd") is not None


@pytest.fixture
def servers(tmp_path):
    """Factory for nsqd / nsqlookupd processes; everything started is stopped afterwards."""
    started: list[ServerProcess] = []

    class Factory:
        def nsqd(self, *extra: str, name: str | None = None) -> Nsqd:
            node = Nsqd(tmp_path / (name or f"nsqd{len(started)}"), *extra)
            started.append(node)
            return node

        def restart(self, node: Nsqd, *extra: str) -> Nsqd:
            new = node.restart(*extra)
            started.append(new)
            return new

        def nsqlookupd(self, *extra: str) -> Nsqlookupd:
            node = Nsqlookupd(tmp_path / f"lookupd{len(started)}", *extra)
            started.append(node)
            return node

    yield Factory()
    for node in reversed(started):
        node.stop()
