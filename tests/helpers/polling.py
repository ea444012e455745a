"""Waiting for a condition a real process reaches in its own time."""

from __future__ import annotations

import time
from typing import Any, Callable


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "",
             interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that; fail after
    ``timeout`` seconds naming ``what`` and the last answer. The default is far beyond what a
    condition takes on a quiet machine (milliseconds to a few seconds): a deadline only ends a
    test that failed anyway, and a busy machine must not end one that would pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate} "
                                 f"(last: {value!r})")
        time.sleep(interval)
