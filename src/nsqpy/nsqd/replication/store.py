"""One origin incarnation's replica on the peer: an append-only log plus an index rebuilt at start.

Directory ``<data-path>/replicas/<origin>/<incarnation>/`` holds segments ``NNNNNNNN.log``; each
entry is ``[u32 size][u32 crc32][records]`` where records are exactly the bytes of one batch of
:mod:`nsqpy.protocol.replication` (the wire format is the disk format: the peer stores a batch
with one write). Why this shape:

* **Restart**: replaying the segments in order rebuilds the index; an entry whose size or CRC does
  not match (a write torn by a crash) ends the log there and the file is truncated, so the next
  append starts on a clean boundary.
* **Owed sets are derived, not stored per message**: a MSG record says "owed by the topic's
  channels at this point"; the channel map comes from CHAN/SYNC records earlier in the log. Every
  segment starts with a SYNC of the map, so dropping old segments never loses the channel state
  later records depend on.
* **Bounded**: segments are only dropped from the head (so FIN records in later segments always
  replay after the messages they finish). A head segment whose messages are all finished is
  deleted; one that is mostly finished (live bytes under half its size) is compacted: its live
  messages are copied to the tail with their current owed set spelled out, then it is deleted.
  Disk use stays around twice the live bytes plus one segment.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import zlib
from typing import Iterator

from ..storage.commit import Write
from ..storage.files import fsync_dir, makedirs_durable

from ...protocol.replication import (
    CHAN_ADD, OWED_HELD, RESHIP_BEGIN, Attempts, ChanEvent, Fin, Marker, Msg, Pumped, Record,
    ReplicationError, Sync, TopicDel, decode_records, enc_msg, enc_msg_owed, enc_sync,
)

_HEAD = struct.Struct(">II")
SEGMENT_BYTES = 64 << 20

# index entry fields: [topic, segment, offset, owed (frozenset | None = topic-held), attempts,
#                      due_ns, body size]
_TOPIC, _SEG, _OFF, _OWED, _ATT, _DUE, _SIZE = range(7)
_EMPTY: frozenset = frozenset()


class ReplicaStore:
    def __init__(self, path: str, fsync: bool = False, segment_bytes: int = SEGMENT_BYTES,
                 logger: logging.Logger | None = None) -> None:
        self.path = path
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.logger = logger or logging.getLogger("nsqd")
        self.channels: dict[str, frozenset] = {}
        self.live: dict[bytes, list] = {}
        self.live_bytes = 0
        self._seg_live: dict[int, int] = {}
        self._seg_live_bytes: dict[int, int] = {}
        self._seg_size: dict[int, int] = {}
        self.segments: list[int] = []
        self._fd = -1
        self._unsynced = False
        self.in_commit = False  # (nsqd's group commit, storage/commit.py: see prepare)
        # ids re-shipped since RESHIP_BEGIN; at RESHIP_END the live ids not among them are what
        # the origin lost (a crash-restart): ``orphans`` hands them to the host for delivery
        self._reshipped: set[bytes] | None = None
        self.orphans: list[tuple] = []
        self._replaying = True
        if fsync:  # its acks promise a power loss keeps the copies: their names too
            makedirs_durable(path)
        else:
            os.makedirs(path, exist_ok=True)
        self._replay()
        if not self.segments:
            self._open_segment(0)
        self._replaying = False
        self.orphans = []  # found again by replay: delivered when they were first found

    # --- files ---------------------------------------------------------------------------------

    def _file(self, seg: int) -> str:
        return os.path.join(self.path, f"{seg:08d}.log")

    def _open_segment(self, seg: int) -> None:
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
        self._fd = os.open(self._file(seg), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if self.fsync:  # the new segment's name is durable before anything in it is acked
            fsync_dir(self.path)
        self.segments.append(seg)
        self._seg_size[seg] = 0
        self._seg_live.setdefault(seg, 0)
        self._seg_live_bytes.setdefault(seg, 0)
        self._write(enc_sync(self.channels))

    @property
    def current(self) -> int:
        return self.segments[-1]

    @property
    def disk_bytes(self) -> int:
        return sum(self._seg_size.values())

    def _write(self, payload: bytes, defer_sync: bool = False) -> int:
        """Append one entry to the current segment; returns its offset."""
        seg = self.current
        off = self._seg_size[seg]
        data = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        written = os.write(self._fd, data)
        if written != len(data):  # a short write (disk full): undo it so the log stays whole
            os.ftruncate(self._fd, off)
            raise OSError(28, "short write to replica log")
        if self.fsync:
            if defer_sync:
                self._unsynced = True
            else:
                os.fsync(self._fd)
        self._seg_size[seg] = off + len(data)
        return off

    def _entries(self, seg: int, truncate: bool = False) -> Iterator[tuple[int, bytes]]:
        """(offset, payload) of each whole entry; a torn or corrupt tail ends the segment."""
        with open(self._file(seg), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 8 <= len(data):
            size, crc = _HEAD.unpack_from(data, pos)
            payload = data[pos + 8:pos + 8 + size]
            if len(payload) != size or zlib.crc32(payload) != crc:
                break
            yield pos, payload
            pos += 8 + size
        if pos != len(data):
            self.logger.warning("replica %s: segment %d ends in %d bad bytes at %d%s", self.path,
                                seg, len(data) - pos, pos, " (truncated)" if truncate else "")
            if truncate:
                os.truncate(self._file(seg), pos)
        self._seg_size[seg] = pos

    def _replay(self) -> None:
        segs = sorted(int(n[:-4]) for n in os.listdir(self.path)
                      if n.endswith(".log") and n[:-4].isdigit())
        for i, seg in enumerate(segs):
            last = i == len(segs) - 1
            self.segments.append(seg)
            self._seg_live.setdefault(seg, 0)
            self._seg_live_bytes.setdefault(seg, 0)
            for off, payload in self._entries(seg, truncate=last):
                try:
                    records = decode_records(payload)
                except ReplicationError as err:  # CRC matched: a bug, not a crash; skip it
                    self.logger.error("replica %s: undecodable entry %d@%d - %s", self.path,
                                      seg, off, err)
                    continue
                self._apply(records, seg, off)
        if segs:
            self._fd = os.open(self._file(segs[-1]), os.O_WRONLY | os.O_APPEND)

    # --- appending -----------------------------------------------------------------------------

    def append(self, payload: bytes, defer_sync: bool = False) -> None:
        """Store one batch (raises ReplicationError before writing if it is malformed, OSError
        if the disk refuses it), then drop what it finished and keep the log bounded.
        ``defer_sync``: the caller calls :meth:`sync` before acknowledging (group commit)."""
        records = decode_records(payload)
        off = self._write(payload, defer_sync)
        self._apply(records, self.current, off)
        if self._seg_size[self.current] >= self.segment_bytes:
            self._open_segment(self.current + 1)
        self._trim_head()

    def _apply(self, records: list[Record], seg: int, off: int) -> None:
        live = self.live
        channels_get = self.channels.get
        added = added_bytes = 0
        for rec in records:
            kind = type(rec)
            if kind is Msg:
                topic, mid, _, attempts, due_ns, owed, body = rec
                if self._reshipped is not None:
                    self._reshipped.add(mid)
                if owed.__class__ is int:
                    if mid in live:
                        continue  # a resend: the first copy stands
                    owed_set = None if owed == OWED_HELD else channels_get(topic, _EMPTY)
                    if owed_set is not None and not owed_set:
                        continue  # no durable channel owes it
                else:
                    self._drop(mid)  # a compaction copy replaces the original
                    owed_set = owed
                size = len(body)
                live[mid] = [topic, seg, off, owed_set, attempts, due_ns, size]
                added += 1
                added_bytes += size
                continue
            if added:  # later records may drop what this batch added
                self._count(seg, added, added_bytes)
                added = added_bytes = 0
            if kind is Fin:
                channel = rec.channel
                for mid in rec.ids:
                    e = live.get(mid)
                    if e is None or e[_OWED] is None or channel not in e[_OWED]:
                        continue
                    rest = e[_OWED] - {channel}
                    if rest:
                        e[_OWED] = rest
                    else:
                        self._drop(mid)
            elif kind is ChanEvent:
                names = self.channels.get(rec.topic, _EMPTY)
                if rec.kind == CHAN_ADD:
                    self.channels[rec.topic] = names | {rec.channel}
                else:
                    self.channels[rec.topic] = names - {rec.channel}
                    self._forget_channels(rec.topic, self.channels[rec.topic])
            elif kind is Pumped:
                names = self.channels.get(rec.topic, _EMPTY)
                for mid in rec.ids:
                    e = live.get(mid)
                    if e is not None and e[_OWED] is None:
                        if names:
                            e[_OWED] = names
                        else:
                            self._drop(mid)
            elif kind is TopicDel:
                if not rec.held_only:
                    self.channels.pop(rec.topic, None)
                for mid in [m for m, e in live.items() if e[_TOPIC] == rec.topic
                            and (e[_OWED] is None or not rec.held_only)]:
                    self._drop(mid)
            elif kind is Sync:
                self.channels = dict(rec.channels)
                for topic in {e[_TOPIC] for e in live.values()}:
                    self._forget_channels(topic, self.channels.get(topic, _EMPTY))
            elif kind is Attempts:
                e = live.get(rec.id)
                if e is not None and rec.attempts > e[_ATT]:
                    e[_ATT] = rec.attempts
            elif kind is Marker:
                if rec.kind == RESHIP_BEGIN:
                    self._reshipped = set()
                elif self._reshipped is not None:
                    self._take_orphans(self._reshipped)
                    self._reshipped = None
            channels_get = self.channels.get  # a SYNC replaces the map
        if added:
            self._count(seg, added, added_bytes)

    def _count(self, seg: int, n: int, nbytes: int) -> None:
        self._seg_live[seg] += n
        self._seg_live_bytes[seg] += nbytes
        self.live_bytes += nbytes

    def _take_orphans(self, reshipped: set[bytes]) -> None:
        lost = {mid for mid in self.live if mid not in reshipped}
        if not lost:
            return
        if not self._replaying:
            self.orphans.extend(m for m in self.messages() if m[0].id in lost)
        for mid in lost:
            self._drop(mid)

    def _forget_channels(self, topic: str, keep: frozenset) -> None:
        """Channels gone from the topic owe nothing any more."""
        for mid, e in list(self.live.items()):
            owed = e[_OWED]
            if e[_TOPIC] != topic or owed is None or owed <= keep:
                continue
            owed = owed & keep
            if owed:
                e[_OWED] = owed
            else:
                self._drop(mid)

    def _drop(self, mid: bytes) -> None:
        e = self.live.pop(mid, None)
        if e is not None:
            self._seg_live[e[_SEG]] -= 1
            self._seg_live_bytes[e[_SEG]] -= e[_SIZE]
            self.live_bytes -= e[_SIZE]

    # --- bounding the log ----------------------------------------------------------------------

    def _trim_head(self) -> None:
        while len(self.segments) > 1:
            head = self.segments[0]
            if self._seg_live[head] and self._seg_live_bytes[head] * 2 >= self._seg_size[head]:
                return
            if self._seg_live[head]:
                self._compact(head)
            os.unlink(self._file(head))
            self.segments.pop(0)
            for d in (self._seg_live, self._seg_live_bytes, self._seg_size):
                d.pop(head, None)

    def _compact(self, seg: int) -> None:
        """Copy the segment's live messages to the tail, owed sets as they are now."""
        copies: list[bytes] = []
        moved: list[bytes] = []
        for rec, e in self._indexed(seg):
            if e[_OWED] is None:
                copies.append(enc_msg(rec.topic, rec.id, rec.timestamp, e[_ATT], e[_DUE],
                                      True, rec.body))
            else:
                copies.append(enc_msg_owed(rec.topic, rec.id, rec.timestamp, e[_ATT],
                                           e[_DUE], e[_OWED], rec.body))
            moved.append(rec.id)
        if not copies:
            return
        off = self._write(b"".join(copies))
        cur = self.current
        for mid in moved:
            e = self.live[mid]
            self._seg_live[seg] -= 1
            self._seg_live_bytes[seg] -= e[_SIZE]
            e[_SEG], e[_OFF] = cur, off
            self._seg_live[cur] += 1
            self._seg_live_bytes[cur] += e[_SIZE]

    def sync(self) -> None:
        """fsync what ``append(..., defer_sync=True)`` wrote (one fsync for many batches)."""
        if self._unsynced:
            self._unsynced = False
            os.fsync(self._fd)

    def write_staged(self) -> None:
        """(nothing to write: ``append`` wrote the entries already)"""

    def prepare(self) -> list[Write]:
        """The group commit's flush of what ``append(..., defer_sync=True)`` wrote: the entries
        are in the file already (the index applied them), the writer thread only fsyncs it."""
        if not self._unsynced or self._fd < 0:
            return []
        self._unsynced = False
        return [Write(os.dup(self._fd), self._seg_size[self.current])]

    def committed(self, error: OSError | None) -> None:
        """(the link answers from the commit's step: an error fails it, as a failed sync does)"""

    # --- reading -------------------------------------------------------------------------------

    def messages(self) -> Iterator[tuple[Msg, frozenset | None, int, int]]:
        """Every live message as (record with body, owed channels or None if topic-held,
        attempts, due_ns), oldest first: what adoption hands to the peer's own topics."""
        wanted: dict[int, set[int]] = {}
        for e in self.live.values():
            wanted.setdefault(e[_SEG], set()).add(e[_OFF])
        for seg in list(self.segments):
            offs = wanted.get(seg)
            if offs:
                for rec, e in self._indexed(seg, offs):
                    yield rec, e[_OWED], e[_ATT], e[_DUE]

    def _indexed(self, seg: int, offs: set[int] | None = None) -> Iterator[tuple[Msg, list]]:
        """The segment's message records the index points at (only in entries at ``offs``),
        with their index entries, each id once. One entry can hold an id twice: after a relink
        the origin resends its unacked batches and re-ships all it holds in the same batch, and
        the index keeps a single place for both, so yielding every matching record would hand
        adoption (or a compaction) the message twice."""
        for off, payload in self._entries(seg):
            if offs is not None and off not in offs:
                continue
            seen: set[bytes] = set()
            for rec in decode_records(payload):
                if type(rec) is not Msg or rec.id in seen:
                    continue
                e = self.live.get(rec.id)
                if e is not None and e[_SEG] == seg and e[_OFF] == off:
                    seen.add(rec.id)
                    yield rec, e

    def stats(self) -> dict:
        topics: dict[str, dict] = {}
        for e in self.live.values():
            t = topics.setdefault(e[_TOPIC], {"messages": 0, "held": 0, "channels": {}})
            t["messages"] += 1
            if e[_OWED] is None:
                t["held"] += 1
            else:
                chans = t["channels"]
                for c in e[_OWED]:
                    chans[c] = chans.get(c, 0) + 1
        return {"messages": len(self.live), "bytes": self.live_bytes,
                "disk_bytes": self.disk_bytes, "segments": len(self.segments),
                "topics": [{"name": n, **topics[n]} for n in sorted(topics)]}

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


__all__ = ["ReplicaStore"]
