"""Helpers shared by the interop tests (import as ``from interop.support import ...``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import Callable

from helpers.servers import Nsqd


def assert_server_healthy(node: Nsqd) -> None:
    """nsqd is still running and never logged a traceback (a crash in a handler)."""
    log = node.log()
    assert node.proc.poll() is None, f"nsqd exited with {node.proc.returncode}:\n{log[-4000:]}"
    assert "Traceback" not in log, log[-6000:]


async def wait_until(predicate: Callable[[], bool], timeout: float, what: str = "condition",
                     interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


def run_json_script(argv: list[str], timeout: float, cwd: str | None = None) -> dict:
    """Run a client script as a subprocess and return the JSON object on its last stdout line.

    The child is killed by PID if it outlives ``timeout`` (or if anything else goes wrong), so no
    client process survives the test.
    """
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=5)
            raise AssertionError(f"{argv[:3]} did not finish within {timeout}s\n"
                                 f"stdout: {out[-3000:]}\nstderr: {err[-3000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"{argv[:3]} exited {proc.returncode} without a JSON result\n"
                             f"stdout: {out[-3000:]}\nstderr: {err[-5000:]}")
    result = json.loads(lines[-1])
    result.setdefault("stderr", err[-5000:])
    return result
