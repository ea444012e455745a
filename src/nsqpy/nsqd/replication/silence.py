"""How long the other end of the link has been silent, counted in this process's running time.

A timer of a process that was stopped (SIGSTOP, a VM pause, a loop blocked by a long call) fires
late, and on uvloop timers run before the loop polls its sockets: a plain ``now - last_heard``
then blames the other end for our own absence while its data waits unread on the socket (issue
#25: a peer thawed after 5 s closed a healthy link). :class:`Silence` ticks every ``tick``
seconds; a tick that comes more than ``SLACK`` late means this process was not running for that
long, and that time is not counted as the other end's silence.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

SLACK = 0.25  # a tick later than this: we were not running (stopped, or the loop was blocked)


class Silence:
    """Calls ``on_silent(seconds)`` once the other end said nothing for ``timeout`` seconds
    of our own running time; :meth:`heard` on every read. When ``on_silent`` returns True the
    silence is forgiven (nothing was expected) and the watch goes on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float,
                 on_silent: Callable[[float], bool | None], tick: float = 0.5) -> None:
        self.loop = loop
        self.timeout = timeout
        self.on_silent = on_silent
        self.tick = tick
        self.last = time.monotonic()
        self._due = self.last + tick
        self._handle: asyncio.TimerHandle | None = loop.call_later(tick, self._check)

    def heard(self) -> None:
        self.last = time.monotonic()

    def _check(self) -> None:
        now = time.monotonic()
        late = now - self._due
        if late > SLACK:  # our own absence: not the other end's silence
            self.last = min(now, self.last + late)
        if now - self.last >= self.timeout:
            self._handle = None
            if not self.on_silent(now - self.last):
                return
            self.last = now
        self._due = now + self.tick
        self._handle = self.loop.call_later(self.tick, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
