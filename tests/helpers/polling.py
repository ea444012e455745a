"""Waiting for a condition a real process reaches in its own time."""

from __future__ import annotations

import time
from typing import Any, Callable


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "",
             interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that; fail after
    ``timeout`` seconds naming ``what`` and the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate} "
                                 f"(last: {value!r})")
        time.sleep(interval)
