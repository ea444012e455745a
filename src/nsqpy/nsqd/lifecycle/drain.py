"""Drain mode for decommissioning an nsqd (issue #13; upstream RFC #1302, never merged).

``POST /drain`` or SIGUSR2 starts it; there is no way back short of a restart. While draining:

* publishes are refused: TCP ``E_PUB_FAILED``/``E_MPUB_FAILED``/``E_DPUB_FAILED`` "... failed
  draining", HTTP ``/pub``/``/mpub`` 503 ``{"message":"DRAINING"}`` (the topic guard, see
  :mod:`bounded`); dead-lettering still publishes, it is part of consuming;
* ``/ping`` answers 503 ``DRAINING`` so load balancers take the node out;
* the connections to nsqlookupd are closed, which makes every nsqlookupd drop this node's
  registrations, so new consumers and producers find other nodes;
* consumers already connected keep receiving until every channel is empty (queued, in-flight
  and deferred all 0, and the topic's own backlog moved to its channels); then nsqd stops
  exactly as on SIGTERM and exits 0. Topics without channels are not waited for: nobody could
  consume them, and their messages stay in the data directory.

``--drain-timeout`` (0 = none) ends the wait early with the same normal shutdown, which writes
whatever is left to disk, so nothing is lost either way.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import TYPE_CHECKING

from .bounded import refresh_guard

if TYPE_CHECKING:
    from ..nsqd import NSQD

CHECK_INTERVAL = 0.1


def is_drained(nsqd: "NSQD") -> bool:
    for topic in nsqd.topics.values():
        if not topic.channels:
            continue
        if topic.depth:
            return False
        for channel in topic.channels.values():
            if channel.depth or channel.deferred or channel.in_flight_count:
                return False
    return True


def start_drain(nsqd: "NSQD") -> bool:
    """Enter drain mode; False if it was already on (or nsqd is exiting)."""
    if nsqd.draining or nsqd.exiting:
        return False
    nsqd.draining = True
    timeout = nsqd.options.drain_timeout
    nsqd.logger.info("DRAIN: refusing publishes, leaving nsqlookupd, waiting for channels to "
                     "empty%s", f" (at most {timeout:g}s)" if timeout else "")
    for topic in nsqd.topics.values():
        refresh_guard(topic)
    task = nsqd.loop.create_task(_drain(nsqd))
    nsqd.keep_task(task)
    return True


async def _drain(nsqd: "NSQD") -> None:
    await nsqd.lookup.close()  # lookupd forgets a producer whose connection closes
    timeout = nsqd.options.drain_timeout
    deadline = time.monotonic() + timeout if timeout else None
    while not is_drained(nsqd):
        if deadline is not None and time.monotonic() >= deadline:
            nsqd.logger.info("DRAIN: --drain-timeout reached, shutting down with messages left")
            break
        await asyncio.sleep(CHECK_INTERVAL)
    else:
        nsqd.logger.info("DRAIN: every channel is empty, shutting down")
    _stop(nsqd)


def _stop(nsqd: "NSQD") -> None:
    """The same path as SIGTERM: the daemon's signal handler runs the graceful shutdown."""
    stop = getattr(nsqd, "on_drained", None)
    if stop is not None:
        stop()
    else:
        signal.raise_signal(signal.SIGTERM)


def install_drain_signal(nsqd: "NSQD") -> None:
    """SIGUSR2 starts a drain (only possible in the main thread, i.e. the nsqd program)."""
    try:
        nsqd.loop.add_signal_handler(signal.SIGUSR2, start_drain, nsqd)
    except (RuntimeError, ValueError, NotImplementedError):
        pass
