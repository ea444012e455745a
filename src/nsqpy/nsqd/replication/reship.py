"""What the origin does when its link comes up: drop what the peer adopted, re-ship the rest.

**Adopted**: after a failover the peer delivered our unfinished messages; when we come back with
the same data directory it sends their ids before its ``OK`` and we drop them from our queues
(memory, deferred, and disk queues rewritten in place, order kept), so they are not handed out a
second time in bulk. Messages in flight to consumers at that moment are left alone (a FIN must
still find them); the few that time out are the duplicates docs/replication.md counts.

**Re-ship**: every message still held goes to the peer again, owed as of now, between two markers;
when the list is complete, whatever the peer holds and was not re-shipped is something we lost (we
were killed and restarted before the failover timeout, losing our memory queues), and the peer
delivers it itself.

Why: the peer may have lost its copy (killed with its data directory) or never received what was
accepted while the link was down (degraded mode). Re-shipping each held message with its current
owed channels (an explicit list, which replaces whatever the peer had for that id) makes the two
copies agree again, at the cost of one pass over the queues per reconnect.

Disk queues are read without consuming them: from the queue's read position through its write
position, in go-diskqueue's record format (records are visible to readers as soon as written).
The total is bounded (``MAX_RESHIP_BYTES``); what does not fit is logged and stays single until
it is consumed.
"""

from __future__ import annotations

import os
import struct
import time
from typing import TYPE_CHECKING, Any, Iterator

from ...protocol.message import decode_message
from ...protocol.replication import RESHIP_BEGIN, RESHIP_END, enc_marker, enc_msg, enc_msg_owed

if TYPE_CHECKING:
    from ..nsqd import NSQD

MAX_RESHIP_BYTES = 256 << 20
_LEN = struct.Struct(">i")


def peek_disk_queue(dq: Any) -> Iterator[tuple]:
    """The queue's unread records as (id, body, ts, attempts), oldest first, not consumed."""
    left = getattr(dq, "depth", 0)
    if not left or not hasattr(dq, "read_file_num"):
        return
    num, pos = dq.read_file_num, dq.read_pos
    while left > 0 and num <= dq.write_file_num:
        path = os.path.join(dq.data_path, f"{dq.name}.diskqueue.{num:06d}.dat")
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read()
        except OSError:
            data = b""
        off = 0
        while left > 0 and off + 4 <= len(data):
            size = _LEN.unpack_from(data, off)[0]
            if size <= 0 or off + 4 + size > len(data):
                break
            try:
                m = decode_message(data[off + 4:off + 4 + size])
            except ValueError:
                break
            yield (m.id, m.body, m.timestamp, m.attempts)
            off += 4 + size
            left -= 1
        num, pos = num + 1, 0


def drop_adopted(nsqd: "NSQD", ids: set[bytes]) -> int:
    """Remove the adopted ids from every queue; returns how many queue entries were dropped."""
    import heapq

    dropped = 0
    for topic in list(nsqd.topics.values()):
        queues = [topic] + [c for c in topic.channels.values()]
        for q in queues:
            if q.ephemeral:
                continue
            before = len(q.mem)
            kept = [it for it in q.mem if it[0] not in ids]
            if len(kept) != before:
                q.mem.clear()
                q.mem.extend(kept)
                dropped += before - len(kept)
            deferred = getattr(q, "deferred", None)
            if deferred:
                kept_d = [d for d in deferred if d[2][0] not in ids]
                dropped += len(deferred) - len(kept_d)
                heapq.heapify(kept_d)
                q.deferred[:] = kept_d
            dropped += _filter_disk_queue(q.backend, ids)
    return dropped


def _filter_disk_queue(dq: Any, ids: set[bytes]) -> int:
    """Rotate the queue once through itself, leaving out the ids (FIFO order is kept)."""
    left = getattr(dq, "depth", 0)
    dropped = 0
    while left > 0:
        batch = dq.get_many(min(left, 10000))
        if not batch:
            break
        left -= len(batch)
        keep = [raw for raw in batch if raw[10:26] not in ids]
        dropped += len(batch) - len(keep)
        if keep:
            dq.put_many(keep)
    return dropped


def reship_records(nsqd: "NSQD", logger: Any = None) -> list[bytes]:
    """Every message the node holds (memory, disk, in flight, deferred), with its owed state."""
    out: list[bytes] = [enc_marker(RESHIP_BEGIN)]
    total = skipped = 0
    now, now_ns = time.monotonic(), time.time_ns()

    def due_ns(when: float) -> int:
        return now_ns + int((when - now) * 1e9)

    for topic in list(nsqd.topics.values()):
        if topic.ephemeral:
            continue
        name = topic.name
        held = [(it[:4], due_ns(it[4]) if len(it) == 5 else 0) for it in topic.mem]
        restored = topic.due_after_restart
        held.extend((m, restored.get(m[0], 0)) for m in peek_disk_queue(topic.backend))
        for m, due in held:
            if total > MAX_RESHIP_BYTES:
                skipped += 1
                continue
            out.append(enc_msg(name, m[0], m[2], m[3], due, True, m[1]))
            total += len(m[1])
        owed: dict[bytes, list] = {}
        for channel in list(topic.channels.values()):
            if channel.ephemeral:
                continue
            cname = channel.name
            pending = [(m, 0) for m in channel.mem]
            for in_flight in [c.in_flight for c in channel.clients] + channel.orphans:
                pending.extend((e[:4], 0) for e in in_flight.values())
            pending.extend((m, due_ns(when)) for when, _, m in channel.deferred)
            restored = channel.due_after_restart
            pending.extend((m, restored.get(m[0], 0)) for m in peek_disk_queue(channel.backend))
            for m, due in pending:
                entry = owed.get(m[0])
                if entry is not None:
                    entry[2].add(cname)
                elif total > MAX_RESHIP_BYTES:
                    skipped += 1
                else:
                    owed[m[0]] = [m, due, {cname}]
                    total += len(m[1])
        for mid, (m, due, names) in owed.items():
            out.append(enc_msg_owed(name, mid, m[2], m[3], due, names, m[1]))
    if skipped:
        if logger is not None:
            logger.warning("REPLICATION: %d messages beyond %d MiB not re-shipped", skipped,
                           MAX_RESHIP_BYTES >> 20)
    else:  # complete: the peer may treat what it holds beyond this as lost by us
        out.append(enc_marker(RESHIP_END))
    return out
