"""Read-only inspection of queued, in-flight and deferred messages (issue #13; upstream #848).

``GET /channel/peek?topic=T&channel=C&n=10`` and ``GET /topic/peek?topic=T&n=10`` list up to
``n`` (1..1000) messages as ``{"id", "body" (base64), "attempts", "timestamp", "state", "due"}``:
first those in flight (by delivery time), then the queued ones in the order they will be
delivered (memory, then disk), then the deferred ones by due time. ``state=queued|in_flight|
deferred`` narrows the list. ``due`` (deferred only) is unix nanoseconds, like ``timestamp``.

Nothing is consumed: on-disk records are read through a separate file descriptor from the
disk queue's read position, so delivery order, depths and every counter stay as they were.
"""

from __future__ import annotations

import base64
import os
import struct
import time
from typing import TYPE_CHECKING, Any, Iterator

from ...protocol.message import decode_message
from ..diskqueue import DiskQueue

if TYPE_CHECKING:
    from ..channel import Channel
    from ..topic import Topic

MAX_PEEK = 1000
STATES = ("in_flight", "queued", "deferred")
_LEN = struct.Struct(">l")
_CHUNK = 1 << 16


def disk_records(dq: Any, limit: int) -> Iterator[bytes]:
    """Up to ``limit`` records from the head of a disk queue, without consuming them."""
    if not isinstance(dq, DiskQueue) or not dq.depth or limit <= 0:
        return
    num, pos, left = dq.read_file_num, dq.read_pos, min(limit, dq.depth)
    while left and num <= dq.write_file_num:
        end = dq.write_pos if num == dq.write_file_num else None
        try:
            fd = os.open(dq.file_name(num), os.O_RDONLY)
        except FileNotFoundError:
            num, pos = num + 1, 0
            continue
        try:
            buf, base = b"", pos
            while left:
                off = pos - base
                need = 4
                if off + 4 <= len(buf):
                    (size,) = _LEN.unpack_from(buf, off)
                    if not dq.min_msg_size <= size <= dq.max_msg_size:
                        return  # corrupt: the queue itself deals with it when it gets there
                    if off + 4 + size <= len(buf):
                        yield buf[off + 4:off + 4 + size]
                        pos += 4 + size
                        left -= 1
                        continue
                    need = 4 + size
                stop = end if end is not None else os.fstat(fd).st_size
                if pos + need > stop:
                    break
                buf, base = os.pread(fd, min(max(_CHUNK, need), stop - pos), pos), pos
                if len(buf) < need:
                    break
        finally:
            os.close(fd)
        num, pos = num + 1, 0


def _entry(mid: bytes, body: bytes, ts: int, attempts: int, state: str,
           due_ns: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": mid.decode("ascii", "replace"),
                           "body": base64.b64encode(body).decode("ascii"),
                           "attempts": attempts, "timestamp": ts, "state": state}
    if due_ns is not None:
        out["due"] = due_ns
    return out


def _queued_from_disk(owner: Any, limit: int) -> Iterator[dict[str, Any]]:
    restored = owner.due_after_restart
    now_ns = time.time_ns()
    for raw in disk_records(owner.backend, limit):
        m = decode_message(raw)
        due_ns = restored.get(m.id, 0) if restored else 0
        if due_ns > now_ns:  # deferred before a restart; it will wait out its delay
            yield _entry(m.id, m.body, m.timestamp, m.attempts, "deferred", due_ns)
        else:
            yield _entry(m.id, m.body, m.timestamp, m.attempts, "queued")


def _unix_ns(monotonic_due: float) -> int:
    return time.time_ns() + int((monotonic_due - time.monotonic()) * 1e9)


def peek_channel(channel: "Channel", n: int, state: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if state in (None, "in_flight"):
        entries = [e for c in channel.clients for e in c.in_flight.values()]
        entries += [e for o in channel.orphans for e in o.values()]
        entries.sort(key=lambda e: e[5])
        out += [_entry(e[0], e[1], e[2], e[3], "in_flight") for e in entries[:n]]
    if state in (None, "queued") and len(out) < n:
        for m in list(channel.mem)[:n - len(out)]:
            out.append(_entry(*m, state="queued"))
        if len(out) < n:
            out += [e for e in _queued_from_disk(channel, n - len(out))
                    if state is None or e["state"] == state]
    if state in (None, "deferred") and len(out) < n:
        for due, _, m in sorted(channel.deferred)[:n - len(out)]:
            out.append(_entry(*m, state="deferred", due_ns=_unix_ns(due)))
    return out[:n]


def peek_topic(topic: "Topic", n: int, state: str | None) -> list[dict[str, Any]]:
    """A topic holds messages only while it has no channels (or is paused)."""
    out: list[dict[str, Any]] = []
    for it in list(topic.mem)[:n]:
        if len(it) == 5:
            e = _entry(*it[:4], state="deferred", due_ns=_unix_ns(it[4]))
        else:
            e = _entry(*it, state="queued")
        if state is None or e["state"] == state:
            out.append(e)
    if len(out) < n and (state is None or state != "in_flight"):
        out += [e for e in _queued_from_disk(topic, n - len(out))
                if state is None or e["state"] == state]
    return out[:n]
