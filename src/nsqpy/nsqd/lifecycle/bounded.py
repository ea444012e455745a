"""Bounded disk queues (``--max-disk-bytes``, ``--disk-full-policy``) and the publish guard.

Size is the bytes of records written and not yet handed out, computed from the disk queue's
read and write positions plus the sizes of the complete files in between (each stat'ed once and
cached), so no per-message bookkeeping is needed and the figure is right after a restart.

* ``reject``: a publish to a topic fails (TCP ``E_PUB_FAILED``, HTTP 503) while the topic's queue
  or one of its channels' queues is at its bound. Messages already accepted are never dropped;
  requeues and the topic's backlog moving to its channels still go to disk, so a channel can
  pass its bound by what was already accepted, never by new publishes.
* ``drop-oldest``: after a disk write the oldest records on disk are dropped, whole, until the
  queue is within its bound again (``dropped_count``). The in-memory part of a queue
  (at most ``mem_queue_size`` messages, delivered first) is not touched.

The guard (``Topic.guard``) is None unless a bound with ``reject`` or a drain is in effect, so
the publish path pays one ``is not None`` test when the features are off.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Any

from ..diskqueue import DiskQueue
from ..hooks import PublishRefused

if TYPE_CHECKING:
    from ..channel import Channel
    from ..topic import Topic

DROP_BATCH = 256


class QueueFull(PublishRefused):
    """A publish refused by ``--disk-full-policy=reject``."""

    http_message = "QUEUE_FULL"

    def __init__(self, what: str) -> None:
        super().__init__(errno.ENOSPC, f"{what} queue full (max-disk-bytes)")

    def __str__(self) -> str:
        return self.strerror or "queue full"


class Draining(PublishRefused):
    """A publish refused because nsqd is draining (``POST /drain``, SIGUSR2)."""

    http_message = "DRAINING"

    def __init__(self) -> None:
        super().__init__(errno.ESHUTDOWN, "draining")

    def __str__(self) -> str:
        return "draining"


def unread_bytes(owner: Any) -> int:
    """Bytes of the records on disk not yet handed out (0 for memory-only queues)."""
    dq = owner.backend
    if not isinstance(dq, DiskQueue) or not dq.depth:
        return 0
    first, last = dq.read_file_num, dq.write_file_num
    total = dq.write_pos - dq.read_pos
    if first == last:
        return total
    sizes: dict[int, int] = owner.disk_file_sizes
    for num in range(first, last):
        size = sizes.get(num)
        if size is None:
            try:
                size = os.path.getsize(dq.file_name(num))
            except OSError:
                size = 0
            sizes[num] = size
        total += size
    if len(sizes) > last - first + 16:
        for num in [n for n in sizes if n < first]:
            del sizes[num]
    return total


def _full(owner: Any) -> bool:
    return (owner.max_disk_bytes > 0 and owner.disk_full_policy == "reject"
            and unread_bytes(owner) >= owner.max_disk_bytes)


def publish_guard(topic: "Topic") -> None:
    """Runs before a publish to ``topic`` when ``topic.guard`` is set; raises to refuse it."""
    nsqd = topic.nsqd
    if nsqd.draining and not nsqd.internal_publish:
        raise Draining()
    if _full(topic):
        raise QueueFull(f"topic {topic.name}")
    for channel in topic.channels.values():
        if _full(channel):
            raise QueueFull(f"channel {topic.name}:{channel.name}")


def _rejects(owner: Any) -> bool:
    return owner.max_disk_bytes > 0 and owner.disk_full_policy == "reject"


def refresh_guard(topic: "Topic", extra: "Channel | None" = None) -> None:
    """Install or remove ``topic.guard`` after a setting or the drain state changed."""
    need = (topic.nsqd.draining or _rejects(topic)
            or any(_rejects(c) for c in topic.channels.values())
            or (extra is not None and _rejects(extra)))
    topic.guard = publish_guard if need else None


def trim(owner: Any) -> None:
    """``drop-oldest``: drop whole records from the head of the disk queue until within bound."""
    if owner.disk_full_policy != "drop-oldest":
        return
    limit = owner.max_disk_bytes
    dq = owner.backend
    while dq.depth:
        size = unread_bytes(owner)
        excess = size - limit
        if excess <= 0:
            break
        # about as many records as make up the excess, at the queue's average record size
        want = min(DROP_BATCH, max(1, excess // max(1, size // dq.depth)))
        dropped = len(dq.get_many(want))
        if not dropped:
            break
        owner.dropped_count += dropped
