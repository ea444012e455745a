"""Publishers waiting for the peer's copy (``--replication-ack=sync``), and their bounded wait.

A waiter is ``(since, target, ok_frame, failed_frame)``: a TCP connection with the ``OK`` frame
and the command's error frame (``E_PUB_FAILED``/``E_MPUB_FAILED``/``E_DPUB_FAILED``), or an HTTP
publish's future (frames ``None``; its result says whether the copy exists). Waiters sit in groups
(the batches in flight, the ones held while the link is down, the current turn's), oldest first;
ages only grow along that order, so expiring is cutting a prefix.

Why a bound (issue #25): with a peer that is slow, frozen or gone, a publisher must learn within
``--replication-sync-timeout`` whether its message has two copies. With
``--replication-degraded=fail`` it is then told ``E_PUB_FAILED`` (TCP, after which the connection
closes, as upstream does after that error) or HTTP 503 ``REPLICA_UNAVAILABLE``, and retries
elsewhere; the message may still be delivered (at-least-once: a duplicate, never a loss). With
``accept`` it is told ``OK`` and the message exists once until the peer has it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterable

Waiter = tuple[float, Any, "bytes | None", "bytes | None"]


def answer(waiter: Waiter, ok: bool) -> None:
    _, target, frame, failed = waiter
    if frame is None:  # an HTTP publish's future (the request may have gone: cancelled)
        if not target.done():
            target.set_result(ok)
    elif ok:
        target.out.append(frame)
        target.schedule_flush()
    else:
        target.out.append(failed)
        target.close_connection()


def answer_all(waiters: Iterable[Waiter], ok: bool) -> None:
    for w in waiters:
        answer(w, ok)


def expire(groups: Iterable[list[Waiter]], limit: float, ok: bool) -> int:
    """Answer (``ok``) and remove every waiter waiting since ``limit`` or before: a prefix of
    the groups taken in order. Returns how many were answered."""
    n = 0
    for ws in groups:
        i = 0
        while i < len(ws) and ws[i][0] <= limit:
            answer(ws[i], ok)
            i += 1
        if i:
            del ws[:i]
            n += i
        if ws:
            break  # a younger waiter: everything after it is younger still
    return n


def oldest(groups: Iterable[list[Waiter]]) -> float | None:
    """When the longest current wait began, or None when nobody waits."""
    for ws in groups:
        if ws:
            return ws[0][0]
    return None


def future(loop: asyncio.AbstractEventLoop, since: float) -> tuple[asyncio.Future, Waiter]:
    fut = loop.create_future()
    return fut, (since, fut, None, None)
