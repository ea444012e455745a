"""A topic's retained log: append-only segment files in ``<data_path>/<topic>.history/``.

Layout (docs/history.md §2)
    ``<20-digit segment id>.seg``  blocks, one per publish command (PUB, MPUB, DPUB, HTTP):
    ``[u32 length][u32 crc32]`` then ``length`` bytes of its n records by columns:
    ``[u32 n][u32 DPUB delay ms]``, n ``i64`` timestamps (ns), n ``u32`` body sizes, n 16-byte
    ids, the n bodies back to back.
    ``<id>.idx``  a sealed segment's summary and sparse index (JSON, rebuilt from the segment when
    missing or stale: it is never needed for correctness).

Why blocks: one ``pwritev`` and one CRC per publish command, not per message, and a torn tail
(a crash in the middle of a write, a power loss) is found at the first block whose length or
CRC does not hold; everything before it is intact and everything from it on is cut.
Why columns: each is made (and cut again) by one C call over all the records of the block, so
neither writing nor reading does Python work per message.

Memory stays flat whatever the log holds: per segment a few integers and a sparse index of
(offset, greatest timestamp before it) every :data:`SPARSE_STEP` bytes; records are read from
the files a chunk at a time (:class:`Cursor`).
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import struct
import time
from array import array
from itertools import accumulate, compress, repeat
from operator import itemgetter

from isal.isal_zlib import crc32  # zlib's CRC-32, computed with the CPU's carry-less multiply

from ...protocol.repeated import RepeatedRecords
from ..storage.background import FilesAhead
from ..storage.commit import GroupCommit, Write, Written
from ..storage.files import cut_back, cut_torn_tail, fdatasync, fsync_dir, write_all
from concurrent.futures import Executor
from typing import Any, Iterator


BLOCK = struct.Struct(">II")  # length of the block's columns that follow, their crc32
COUNT = struct.Struct(">II")  # the columns' head: records, DPUB delay ms
TS = struct.Struct(">q")
SIZE = struct.Struct(">I")
#: a one-record block's columns up to its body: COUNT, its timestamp, its size, its id
ONE_HEAD = struct.Struct(">IIqI16s")
# a block's columns cut in C (bodies: one unpacker per body size met, a bounded few)
_TSS, _SIZES, _IDS = (RepeatedRecords("q", 256, ">"), RepeatedRecords("I", 256, ">"),
                      RepeatedRecords("16s", 256))
_same_size: dict[int, RepeatedRecords] = {}
# a staged block's fields (``Log._staged``): its bytes, records, least and greatest timestamp
_SIZE, _N, _LO, _HI = itemgetter(1), itemgetter(2), itemgetter(3), itemgetter(4)
SUFFIX = ".history"  # <data-path>/<topic>.history/: one topic's segments
SEGMENT_BYTES = 64 << 20  # a segment rolls past this (smaller with a small --retention-bytes)
MIN_SEGMENT_BYTES = 4096
MIN_ROLL_NS = 1_000_000_000
SPARSE_STEP = 256 << 10
#: a sealed segment smaller than this gets no ``.idx``: it is scanned at start-up in about a
#: millisecond, and a thousand topics with short retention would otherwise create, rename and
#: remove an index file at every roll (journal work that PUBs' writes wait behind)
INDEX_MIN = 4 * SPARSE_STEP
CHUNK = 1 << 20  # reads go a chunk at a time
REPLAYS = "replays.json"  # beside the segments: replays under way at the last stop
_fdatasync = fdatasync


class Segment:
    """One segment file's summary; ``sparse_off[i]`` is a block start, ``sparse_max[i]`` the
    greatest timestamp of the records before it (so a seek to ``ts`` starts at the last entry
    whose ``sparse_max`` is below ``ts`` and skips nothing it should return)."""

    __slots__ = ("sid", "size", "count", "first_ts", "last_ts", "min_ts", "max_ts",
                 "sparse_off", "sparse_max", "next_mark")

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.size = 0
        self.count = 0
        self.first_ts = self.last_ts = self.min_ts = self.max_ts = 0
        self.sparse_off = array("q")
        self.sparse_max = array("q")
        self.next_mark = 0

    def add_block(self, offset: int, size: int, n: int, lo: int, hi: int, first: int, last: int) -> None:
        if offset >= self.next_mark:
            self.sparse_off.append(offset)
            self.sparse_max.append(self.max_ts if self.count else -1)
            self.next_mark = offset + SPARSE_STEP
        if not self.count:
            self.first_ts, self.min_ts, self.max_ts = first, lo, hi
        else:
            self.min_ts = min(self.min_ts, lo)
            self.max_ts = max(self.max_ts, hi)
        self.last_ts = last
        self.count += n
        self.size = offset + size

    def add_blocks(self, offset: int, blocks: list[tuple]) -> int:
        """A group commit's batch of blocks (``Log._staged`` items: ``(iov, size, n, lo, hi,
        first, last)``) written back to back from ``offset``; returns where they end. The
        summary moves once per batch, by passes in C over the blocks' fields, not once per
        block: a batch of one-message publishes holds a block per publisher. Only a batch in
        which a sparse mark falls goes block by block, so the index is exactly what adding
        each block alone makes."""
        sizes = list(map(_SIZE, blocks))
        end = offset + sum(sizes)
        if end - sizes[-1] >= self.next_mark:  # (a mark at one of its blocks: rare)
            for block, start in zip(blocks, accumulate(sizes, initial=offset)):
                self.add_block(start, *block[1:])
            return end
        lo, hi = min(map(_LO, blocks)), max(map(_HI, blocks))
        if not self.count:
            self.first_ts, self.min_ts, self.max_ts = blocks[0][5], lo, hi
        else:
            self.min_ts = min(self.min_ts, lo)
            self.max_ts = max(self.max_ts, hi)
        self.last_ts = blocks[-1][6]
        self.count += sum(map(_N, blocks))
        self.size = end
        return end

    def seek(self, ts: int) -> int:
        """The offset of the block to start reading at for records with timestamp >= ts."""
        i = bisect.bisect_left(self.sparse_max, ts) - 1
        return self.sparse_off[i] if i >= 0 else 0

    def summary(self) -> dict[str, int]:
        return {"segment": self.sid, "first_timestamp": self.first_ts,
                "last_timestamp": self.last_ts, "count": self.count, "bytes": self.size}

    def to_json(self) -> bytes:
        return json.dumps({"size": self.size, "count": self.count, "first": self.first_ts,
                           "last": self.last_ts, "min": self.min_ts, "max": self.max_ts,
                           "off": list(self.sparse_off), "pmax": list(self.sparse_max)}).encode()

    @classmethod
    def from_json(cls, sid: int, raw: bytes, file_size: int) -> "Segment | None":
        try:
            d = json.loads(raw)
            if d["size"] != file_size:
                return None
            seg = cls(sid)
            seg.size, seg.count = d["size"], d["count"]
            seg.first_ts, seg.last_ts, seg.min_ts, seg.max_ts = d["first"], d["last"], d["min"], d["max"]
            seg.sparse_off, seg.sparse_max = array("q", d["off"]), array("q", d["pmax"])
            seg.next_mark = (seg.sparse_off[-1] + SPARSE_STEP) if seg.sparse_off else 0
            return seg
        except (ValueError, KeyError, TypeError):
            return None


class Records:
    """Records read from a log, by column: ``ids``, ``bodies``, ``tss`` (one entry per record)
    and ``delays`` (DPUB delays in ms; None while every record has none, the usual case).

    Iterated, they are ``(id, body, ts, delay_ms)`` tuples made by one ``zip``: with no delay,
    the very tuple a channel queues, ``(id, body, ts, attempts 0)``. A loop that unpacks each as
    it goes (``Channel._send``) makes no tuple per record at all (``zip`` hands out the same
    one again), so a replayed message costs its id and its body, as a published one does."""

    __slots__ = ("ids", "bodies", "tss", "delays")

    def __init__(self, ids: list | None = None, bodies: list | None = None,
                 tss: list | None = None, delays: list | None = None) -> None:
        self.ids: list[bytes] = [] if ids is None else ids
        self.bodies: list[bytes] = [] if bodies is None else bodies
        self.tss: list[int] = [] if tss is None else tss
        self.delays = delays

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[tuple]:
        delays = self.delays
        return zip(self.ids, self.bodies, self.tss,
                   repeat(0, len(self.ids)) if delays is None else delays)

    def part(self, start: int, stop: int) -> "Records":
        """Records ``start`` to ``stop`` (list slices: pointers copied in C)."""
        delays = self.delays
        return Records(self.ids[start:stop], self.bodies[start:stop], self.tss[start:stop],
                       None if delays is None else delays[start:stop])

    def where(self, keep: list[bool]) -> "Records":
        """The records whose ``keep`` is true."""
        delays = self.delays
        return Records(list(compress(self.ids, keep)), list(compress(self.bodies, keep)),
                       list(compress(self.tss, keep)),
                       None if delays is None else list(compress(delays, keep)))

    def delay_column(self) -> list[int]:
        """``delays``, made (every record so far without one) when a first DPUB record comes."""
        if self.delays is None:
            self.delays = [0] * len(self.ids)
        return self.delays

    def extend(self, other: "Records") -> None:
        if other.delays is not None:
            self.delay_column().extend(other.delays)
        elif self.delays is not None:
            self.delays += repeat(0, len(other))
        self.ids += other.ids
        self.bodies += other.bodies
        self.tss += other.tss


def parse_block(buf: bytes, at: int, out: Records) -> None:
    """Append the records of the block whose columns start at ``buf[at]`` to ``out``. Each
    column is cut by ``struct`` in C, from the buffer the block was read into (no copy of the
    block): no Python loop per record, and nothing made per record but its id and body."""
    n, delay = COUNT.unpack_from(buf, at)
    tpos = at + COUNT.size
    spos = tpos + 8 * n
    ipos = spos + 4 * n
    bpos = ipos + 16 * n
    if buf[tpos:spos] == buf[tpos:tpos + 8] * n:
        # one publish, one timestamp: one int object for the run (a channel packs one frame head
        # for it, ``Channel._send``), compared as bytes rather than unpacked n times
        out.tss += repeat(TS.unpack_from(buf, tpos)[0], n)
    else:
        _TSS.unpack_into(out.tss, buf, tpos, n)
    if delay or out.delays is not None:
        out.delay_column().extend(repeat(delay, n))
    _IDS.unpack_into(out.ids, buf, ipos, n)
    size = SIZE.unpack_from(buf, spos)[0]
    if buf[spos:ipos] == buf[spos:spos + 4] * n:  # one size (an MPUB's usual case)
        unpacker = _same_size.get(size)
        if unpacker is None:
            if len(_same_size) > 64:
                _same_size.clear()
            unpacker = _same_size[size] = RepeatedRecords(f"{size}s", 64)
        unpacker.unpack_into(out.bodies, buf, bpos, n)
    else:
        sizes: list = []
        _SIZES.unpack_into(sizes, buf, spos, n)
        starts = list(accumulate(sizes, initial=bpos))
        out.bodies += map(buf.__getitem__, map(slice, starts, starts[1:]))


def _block_stats(data: bytes) -> tuple[int, int, int, int, int] | None:
    """``(count, min ts, max ts, first ts, last ts)`` of a block's payload; None when its
    columns do not fill it exactly (a torn or corrupt block)."""
    if len(data) < COUNT.size:
        return None
    n = COUNT.unpack_from(data, 0)[0]
    bpos = COUNT.size + 28 * n
    if not n or bpos > len(data):
        return None
    if bpos + sum(struct.unpack_from(f">{n}I", data, COUNT.size + 8 * n)) != len(data):
        return None
    tss = struct.unpack_from(f">{n}q", data, COUNT.size)
    return n, min(tss), max(tss), tss[0], tss[-1]


def scan_segment(path: str, sid: int, logger: logging.Logger) -> Segment:
    """Rebuild a segment's summary by reading it; a torn or corrupt tail is cut off."""
    seg = Segment(sid)
    fd = os.open(path, os.O_RDWR)
    try:
        file_size = os.fstat(fd).st_size
        pos = 0
        while pos < file_size:
            head = os.pread(fd, BLOCK.size, pos)
            if len(head) < BLOCK.size:
                break
            length, crc = BLOCK.unpack(head)
            if length == 0 or pos + BLOCK.size + length > file_size:
                break
            data = os.pread(fd, length, pos + BLOCK.size)
            if len(data) != length or crc32(data) != crc:
                break
            st = _block_stats(data)
            if st is None:
                break
            seg.add_block(pos, BLOCK.size + length, st[0], st[1], st[2], st[3], st[4])
            pos += BLOCK.size + length
        if pos < file_size:
            cut_torn_tail(fd, path, pos, file_size, logger, "HISTORY")
        seg.size = pos
    finally:
        os.close(fd)
    return seg


class Log:
    """The retained log of one topic (``topic.history``, the core's ``hooks.History``)."""

    def __init__(self, data_path: str, topic_name: str, retention_ns: int, retention_bytes: int,
                 sync_every: int, sync_timeout: float, logger: logging.Logger,
                 executor: Executor, ahead: Executor | None = None,
                 commit: GroupCommit | None = None) -> None:
        """``commit``: nsqd's group commit (``--sync-every=1``): appends are staged and written
        and flushed with the turn's batch, and the topic fans a publish out once it returned."""
        self.dir = os.path.join(data_path, topic_name + SUFFIX)
        self.topic_name = topic_name
        self.logger = logger
        self.executor = executor
        #: segment files made ahead, on a thread of their own (``ahead``), so that a roll does not
        #: find its file still queued behind fsyncs (and then make it on the event loop)
        self.ahead = FilesAhead(ahead if ahead is not None else executor, logger,
                                f"HISTORY({topic_name})")
        self.sync_every = max(1, sync_every)
        self.sync_timeout = sync_timeout
        self.retention_ns = self.retention_bytes = 0
        self.segment_bytes = SEGMENT_BYTES
        self.configure(retention_ns, retention_bytes)
        self.segments: list[Segment] = []
        self.fd = -1  # the last segment's, opened on the first append
        self.unsynced = 0
        self.last_sync = time.monotonic()
        self._sync_queued = False
        #: fds of sealed segments whose last writes wait for the log's next background fsync
        #: (a roll adds no fsync of its own: the sync every N messages or --sync-timeout covers
        #: them, so a thousand topics rolling each second do not fsync a thousand times more)
        self._sealed: list[int] = []
        #: the newest timestamp expiry dropped (0: nothing yet): a point at or before it asks for
        #: messages the log no longer has (BEFORE_OLDEST)
        self.dropped_ts = 0
        #: channels replaying this log (``replay.Replay`` by channel name), and the positions of
        #: replays saved at the last stop, until their channel is made again (``replays.json``)
        self.replaying: dict[str, Any] = {}
        self.saved: dict[str, dict[str, int]] = {}
        self._saved_text = b""
        self.closed = False
        # the group commit's side (storage/commit.py): blocks staged for the next batch, those
        # the batch on the writer thread holds (offset, block) and the segment they go to
        self.commit = commit
        self.in_commit = False
        self._staged: list[tuple] = []
        self._taken: list[tuple] = []
        self._taken_seg: Segment | None = None
        self._taken_start = self._taken_end = 0  # where that batch lies in its segment
        # the open batch's part already in the file (``place``: its segment)
        self._written = Written()
        self._epoch = self._taken_epoch = 0  # bumped by close/delete: a batch then is moot
        self._bytes = 0  # what the segments hold: a running total, not a sum per append
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir, exist_ok=True)
            if self.sync_every <= 1:  # the log's name is on disk before its first OK (POSIX:
                self._fsync_dir(data_path)  # a new entry needs its directory fsynced)
        self._load()
        self._load_replays()

    def configure(self, retention_ns: int, retention_bytes: int) -> None:
        self.retention_ns, self.retention_bytes = retention_ns, retention_bytes
        # a segment spans at most an eighth of the retention time, and at least a second (so
        # a thousand topics with short retention do not make thousands of files a second)
        self.roll_ns = max(retention_ns // 8, MIN_ROLL_NS)
        seg = SEGMENT_BYTES
        if retention_bytes:  # dropping whole segments stays within an eighth of the cap
            seg = max(MIN_SEGMENT_BYTES, min(seg, retention_bytes // 8))
        self.segment_bytes = seg

    # --- files ---------------------------------------------------------------------------------

    def path(self, sid: int, ext: str = "seg") -> str:
        return os.path.join(self.dir, f"{sid:020d}.{ext}")

    def _load(self) -> None:
        ids = sorted(int(n[:-4]) for n in os.listdir(self.dir)
                     if n.endswith(".seg") and n[:-4].isdigit())
        for i, sid in enumerate(ids):
            path = self.path(sid)
            seg = None
            if i < len(ids) - 1:
                try:
                    with open(self.path(sid, "idx"), "rb") as f:
                        seg = Segment.from_json(sid, f.read(), os.path.getsize(path))
                except OSError:
                    seg = None
            if seg is None:
                seg = scan_segment(path, sid, self.logger)
                if i < len(ids) - 1 and seg.size >= INDEX_MIN:  # sealed: summary for next time
                    self.executor.submit(self._write_index, sid, seg.to_json())
            self.segments.append(seg)
            self._bytes += seg.size
        if not self.segments:
            self.segments.append(Segment(1))
        elif ids[0] > 1:  # segments were dropped before the restart: older than what is left
            self.dropped_ts = max(self.oldest() - 1, 0)

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    def _open_active(self) -> None:
        """Open the segment appends go to. Its file was usually made ahead by the helper thread
        (creating a file waits on the file system's journal, which a busy disk makes slow);
        the next one is made ahead now."""
        seg = self.active
        self.fd = self.ahead.take(seg.sid, self.path(seg.sid))
        if seg.size == 0 and self.sync_every <= 1 and self.commit is None:
            # its name must be on disk before an OK (the group commit's batch fsyncs it)
            self._fsync_dir()  # (with N > 1 the segment's first fdatasync carries it on ext4)
        self.ahead.make(seg.sid + 1, self.path(seg.sid + 1))

    def _roll(self) -> None:
        """Seal the active segment (its summary beside it) and start the next one."""
        seg = self.active
        if self.fd >= 0:
            if self.unsynced:  # (only with --sync-every=N>1: with 1 every block is synced)
                self._sealed.append(self.fd)  # synced, then closed, with the next fsync
            else:
                os.close(self.fd)
            self.fd = -1
        if seg.size >= INDEX_MIN:  # the summary is only a cache: written by the helper thread
            self.executor.submit(self._write_index, seg.sid, seg.to_json())
        self.segments.append(Segment(seg.sid + 1))

    def _write_index(self, sid: int, text: bytes) -> None:
        try:
            tmp = self.path(sid, "idx.tmp")
            with open(tmp, "wb") as f:
                f.write(text)
            os.replace(tmp, self.path(sid, "idx"))
        except FileNotFoundError:
            pass  # the segment expired meanwhile
        except OSError as err:  # the segment is scanned at the next start instead
            self.logger.warning("HISTORY(%s): failed to write segment index - %s",
                                self.topic_name, err)

    def _sync(self, background: bool) -> None:
        """fdatasync the sealed segments still unsynced, then the active one: now, or on the
        helper thread (at most one waiting per log for the active segment: a later one covers
        every write before it)."""
        self.unsynced = 0
        self.last_sync = time.monotonic()
        fds, self._sealed = self._sealed, []
        if not background:
            for fd in fds:
                try:
                    _fdatasync(fd)
                finally:
                    os.close(fd)
            if self.fd >= 0:
                _fdatasync(self.fd)
            return
        active = self.fd >= 0 and not self._sync_queued
        if active:
            fds.append(os.dup(self.fd))
            self._sync_queued = True
        if not fds:
            return

        def sync() -> None:
            if active:
                self._sync_queued = False
            for fd in fds:
                try:
                    _fdatasync(fd)
                except OSError as err:
                    self.logger.error("HISTORY(%s): fsync failed - %s", self.topic_name, err)
                finally:
                    os.close(fd)

        self.executor.submit(sync)

    def _fsync_dir(self, path: str | None = None) -> None:
        fsync_dir(path or self.dir)

    # --- appending (hooks.History) -------------------------------------------------------------

    def append(self, msgs: list[tuple], delay_ms: int = 0, columns: tuple | None = None) -> bool:
        """One block for one publish command; raises OSError (the publish is refused) and then
        leaves the log exactly as it was. With ``--sync-every=1`` the block is on disk before
        the publisher's OK: staged for the group commit (returns True: the topic fans the
        publish out once the batch returned, or refuses it), or written and flushed now when
        the log has no group commit (returns False, as in every other mode).

        The block is built by columns (timestamps, sizes, ids, bodies), each made in C by one
        ``join``/``pack`` over the messages, and handed to one ``pwritev`` as they are: no Python
        work per message, one copy of the bodies (the join, which the CRC reads). An MPUB hands
        its ``columns`` (``hooks.Columns``: the id column as the id factory made it, the bodies
        and sizes it read, one timestamp); other publishes are taken apart here, by one ``zip``."""
        n = len(msgs)
        if n == 1 and columns is None:  # a PUB, a DPUB, an HTTP /pub: the most common block
            return self._append_one(msgs[0], delay_ms)
        if columns is not None:
            ids, bodies, sizes = columns
            first = last = msgs[0][2]
            one_ts = True
        else:
            idlist, bodies, tss, _attempts = zip(*msgs)  # the messages turned into columns, in C
            ids = b"".join(idlist)
            sizes = list(map(len, bodies))
            first, last = tss[0], tss[-1]
            one_ts = tss.count(first) == n
        if one_ts:  # one publish command: one timestamp
            tcol = TS.pack(first) * n
            lo = hi = first
        else:
            tcol = struct.pack(f">{n}q", *tss)
            lo, hi = min(tss), max(tss)
        if sizes.count(sizes[0]) == n:  # an MPUB's usual case: one size
            scol = SIZE.pack(sizes[0]) * n
        else:
            scol = struct.pack(f">{n}I", *sizes)
        head = b"".join((COUNT.pack(n, delay_ms), tcol, scol))
        data = b"".join(bodies)
        crc = crc32(data, crc32(ids, crc32(head)))
        length = len(head) + len(ids) + len(data)
        iov = [BLOCK.pack(length, crc), head, ids, data]
        return self._put_block(iov, BLOCK.size + length, n, lo, hi, first, last)

    def _append_one(self, msg: tuple, delay_ms: int) -> bool:
        """:meth:`append` of one message: its block's columns up to the body (the id with them)
        are one ``pack``, the body goes to the kernel as it is (no column joins: a publisher with
        one message in flight makes one such block per round trip): three buffers, two CRC
        calls."""
        mid, body, ts, _attempts = msg
        head = ONE_HEAD.pack(1, delay_ms, ts, len(body), mid)
        length = ONE_HEAD.size + len(body)
        iov = [BLOCK.pack(length, crc32(body, crc32(head))), head, body]
        return self._put_block(iov, BLOCK.size + length, 1, ts, ts, ts, ts)

    def _put_block(self, iov: list[bytes], size: int, n: int, lo: int, hi: int, first: int,
                   last: int) -> bool:
        """Write (or stage) one block made by :meth:`append`; see there."""
        if self.commit is not None:
            self._staged.append((iov, size, n, lo, hi, first, last))
            try:
                self.commit.stage(self)
            except OSError:  # written at once (not a publish) and refused: nothing of it stays
                self._staged.pop()
                raise
            return True
        seg = self.active
        if seg.size and (seg.size + size > self.segment_bytes or (
                self.retention_ns and first - seg.first_ts > self.roll_ns)):
            self._roll()
            seg = self.active
        if self.fd < 0:
            self._open_active()
        offset = seg.size
        try:
            write_all(self.fd, iov, offset)
            if self.sync_every <= 1:
                self._sync(background=False)
        except OSError:  # nothing of a refused publish stays behind
            self._cut_back(self.fd, offset)
            raise
        seg.add_block(offset, size, n, lo, hi, first, last)
        self._bytes += size
        if self.sync_every > 1:
            self.unsynced += n
            if self.unsynced >= self.sync_every:
                self._sync(background=True)
        if self.retention_bytes and self._bytes > self.retention_bytes:
            self.expire(time.time_ns())
        return False

    # --- the group commit (storage/commit.py) ---------------------------------------------------

    def write_staged(self) -> None:
        """Hand the staged blocks to the segment file now (a message nsqd already held, such
        as a dead letter: a kill -9 must not lose it once the loop moved on); the batch flushes
        them, and makes them readable once it returned."""
        if not self.closed:
            self._written.write(self._staged, self._batch_start)

    def _batch_start(self, first: tuple) -> tuple[int, int]:
        """Where the open batch's blocks go: right after the batch on the writer thread (in
        its segment: a roll waits for a batch that starts with nothing in flight), else at the
        active segment's end, rolled first when the first block does not fit its size or time
        span. A segment may so pass its size, or its span, by the rest of one batch."""
        if self._taken_seg is not None:
            self._written.place = self._taken_seg
            return self.fd, self._taken_end
        seg = self.active
        if seg.size and (seg.size + first[1] > self.segment_bytes or (
                self.retention_ns and first[5] - seg.first_ts > self.roll_ns)):
            self._roll()
            seg = self.active
        if self.fd < 0:
            self._open_active()
        self._written.place = seg
        return self.fd, seg.size

    def _cut_back(self, fd: int, size: int) -> None:
        cut_back(fd, size, self.logger, f"HISTORY({self.topic_name})")

    def prepare(self) -> list[Write]:
        """The batch takes every staged block and writes what is not written yet (one
        ``pwritev`` to the active segment); the writer thread flushes it. A batch has one
        outcome."""
        self._taken_epoch = self._epoch
        staged = self._staged
        self._taken, self._taken_seg = [], None
        if not staged or self.closed:
            self._staged = []
            self._written.forget()
            return []
        try:
            start, seg, end = self._written.take(staged, self._batch_start, self._cut_back)
        finally:
            self._staged = []
        self._taken, self._taken_seg, self._taken_start, self._taken_end = staged, seg, start, end
        return [Write(os.dup(self.fd), start, self.dir if start == 0 else "")]

    def committed(self, error: OSError | None) -> None:
        """The batch returned: its blocks are readable (the segment's summary has them), or
        were cut off again and are dropped."""
        taken, seg = self._taken, self._taken_seg
        self._taken, self._taken_seg = [], None
        if self._taken_epoch != self._epoch or seg is None:
            return
        if error is not None:
            self._written.write_again(self, self.fd, seg.size, self._cut_back)
            return
        self._bytes += seg.add_blocks(self._taken_start, taken) - self._taken_start
        if self.retention_bytes and self._bytes > self.retention_bytes:
            self.expire(time.time_ns())

    # --- expiry --------------------------------------------------------------------------------

    def total_bytes(self) -> int:
        return self._bytes

    def expire(self, now_ns: int) -> int:
        """Drop whole segments, oldest first: those entirely older than the retention time, then
        while the log holds more than the byte cap. Returns how many were dropped."""
        dropped = []
        segs = self.segments
        # the group commit's batches are writing to these: kept until they return
        busy = (self._taken_seg, self._written.place)
        while len(segs) > 1 and not segs[0].count and segs[0] not in busy:  # (made ahead, restart)
            dropped.append(self._drop_first())
        if self.retention_ns:
            cutoff = now_ns - self.retention_ns
            while (segs and (segs[0].count or len(segs) > 1) and segs[0].max_ts < cutoff
                   and segs[0] not in busy):
                dropped.append(self._drop_first())
        if self.retention_bytes:
            while self._bytes > self.retention_bytes and segs[0].size and segs[0] not in busy:
                dropped.append(self._drop_first())
        if dropped:
            self.executor.submit(self._unlink, dropped)
        return len(dropped)

    def _drop_first(self) -> int:
        seg = self.segments[0]
        self._bytes -= seg.size
        if seg.count:
            self.dropped_ts = max(self.dropped_ts, seg.max_ts)
        if len(self.segments) == 1:  # the active one goes too: writing moves to a new segment
            self._roll()
        self.segments.pop(0)
        return seg.sid

    def _unlink(self, sids: list[int]) -> None:
        for sid in sids:
            for ext in ("seg", "idx"):
                try:
                    os.unlink(self.path(sid, ext))
                except FileNotFoundError:
                    pass
                except OSError as err:
                    self.logger.error("HISTORY(%s): failed to remove segment %d - %s",
                                      self.topic_name, sid, err)

    def _load_replays(self) -> None:
        try:
            with open(os.path.join(self.dir, REPLAYS), "rb") as f:
                self._saved_text = f.read()
            doc = json.loads(self._saved_text)
            self.saved = {str(k): {f: int(v[f]) for f in ("start", "threshold", "segment", "offset")}
                          for k, v in doc.items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            self.logger.error("HISTORY(%s): ignoring %s - %s", self.topic_name, REPLAYS, err)

    def save_replays(self) -> None:
        """Where every replay under way is (every tick and at close): after a crash a replay
        goes on from its last saved chunk, so it may deliver that chunk twice, never skip."""
        doc = dict(self.saved)
        for name, replay in self.replaying.items():
            doc[name] = replay.state()
        text = json.dumps(doc, sort_keys=True).encode() if doc else b""
        if text == self._saved_text:
            return
        path = os.path.join(self.dir, REPLAYS)
        try:
            if not text:
                os.unlink(path)
            else:
                with open(path + ".tmp", "wb") as f:
                    f.write(text)
                os.replace(path + ".tmp", path)
            self._saved_text = text
        except FileNotFoundError:
            self._saved_text = text
        except OSError as err:
            self.logger.error("HISTORY(%s): failed to save replay positions - %s",
                              self.topic_name, err)

    def tick(self, now: float) -> None:
        """Periodic: fsync what waits longer than --sync-timeout, then expire."""
        if self.replaying or self._saved_text:
            self.save_replays()
        if self.unsynced and now - self.last_sync >= self.sync_timeout:
            self._sync(background=True)
        if self.retention_ns:
            self.expire(time.time_ns())

    # --- reading -------------------------------------------------------------------------------

    def oldest(self) -> int:
        return min((s.min_ts for s in self.segments if s.count), default=0)

    def newest(self) -> int:
        return max((s.max_ts for s in self.segments if s.count), default=0)

    def messages(self) -> int:
        return sum(s.count for s in self.segments)

    def end(self) -> tuple[int, int]:
        """The position after the last record now."""
        return self.active.sid, self.active.size

    def position(self, ts: int) -> tuple[int, int]:
        """Where records with timestamp >= ``ts`` start (negative: the beginning)."""
        for seg in self.segments:
            if seg.count and seg.max_ts >= ts:
                return seg.sid, seg.seek(ts)
        return self.end()

    def segment(self, sid: int) -> Segment | None:
        for seg in self.segments:
            if seg.sid == sid:
                return seg
        return None

    def stats(self) -> dict[str, int]:
        """The ``history`` key of the topic in /stats (the contract's shape)."""
        return {"messages": self.messages(), "bytes": self.total_bytes(),
                "segments": len(self.segments), "oldest_timestamp": self.oldest(),
                "retention_ns": self.retention_ns, "retention_bytes": self.retention_bytes}

    # --- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._epoch += 1  # (nsqd drains the group commit before closing: nothing is staged)
        self._staged = []
        self._written.forget()
        self.ahead.close()
        self.save_replays()
        for fd in self._sealed:
            try:
                _fdatasync(fd)
            except OSError as err:
                self.logger.error("HISTORY(%s): fsync at close failed - %s", self.topic_name, err)
            os.close(fd)
        self._sealed = []
        if self.fd >= 0:
            try:
                _fdatasync(self.fd)
            except OSError as err:
                self.logger.error("HISTORY(%s): fsync at close failed - %s", self.topic_name, err)
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        """The topic is deleted (or keeps no history any more): its log goes with it."""
        self.close()
        sids = [s.sid for s in self.segments]
        self.segments = [Segment(sids[-1] + 1 if sids else 1)]
        self._bytes = 0
        self._unlink(sids)
        try:
            for name in os.listdir(self.dir):
                os.unlink(os.path.join(self.dir, name))
            os.rmdir(self.dir)
        except OSError as err:
            self.logger.error("HISTORY(%s): failed to remove %s - %s", self.topic_name, self.dir, err)


class Cursor:
    """Reads a log's records in order from a position, a chunk at a time; stops at ``stop``
    (a position, default: wherever the log ends when :meth:`next` is called)."""

    def __init__(self, log: Log, sid: int, offset: int,
                 stop: tuple[int, int] | None = None) -> None:
        self.log = log
        self.sid, self.offset = sid, offset
        self.stop = stop
        self._fd = -1
        self._fd_sid = -1

    def _segment(self) -> Segment | None:
        """The segment the cursor is in, moving on past ones dropped meanwhile."""
        for seg in self.log.segments:
            if seg.sid >= self.sid:
                if seg.sid > self.sid:
                    self.sid, self.offset = seg.sid, 0
                return seg
        return None

    def next(self) -> Records | None:
        """The next records (a chunk's worth); None at the end."""
        while True:
            seg = self._segment()
            if seg is None:
                return None
            end = seg.size
            stop = self.stop
            if stop is not None:
                if self.sid > stop[0] or (self.sid == stop[0] and self.offset >= stop[1]):
                    return None
                if self.sid == stop[0]:
                    end = min(end, stop[1])
            if self.offset >= end:
                if seg is self.log.segments[-1] or (stop is not None and self.sid >= stop[0]):
                    return None
                self.sid, self.offset = self.sid + 1, 0
                continue
            try:
                fd = self._open(seg.sid)
            except FileNotFoundError:  # dropped by expiry meanwhile
                self.sid, self.offset = self.sid + 1, 0
                continue
            buf = os.pread(fd, min(CHUNK, end - self.offset), self.offset)
            out = Records()
            pos = 0
            while pos + BLOCK.size <= len(buf):
                length = BLOCK.unpack_from(buf, pos)[0]
                if pos + BLOCK.size + length > len(buf):
                    break
                parse_block(buf, pos + BLOCK.size, out)
                pos += BLOCK.size + length
            if pos == 0:  # one block larger than a chunk
                length = BLOCK.unpack_from(buf, 0)[0]
                parse_block(os.pread(fd, length, self.offset + BLOCK.size), 0, out)
                pos = BLOCK.size + length
            self.offset += pos
            return out

    def _open(self, sid: int) -> int:
        if self._fd_sid != sid:
            self.close()
            self._fd = os.open(self.log.path(sid), os.O_RDONLY)
            self._fd_sid = sid
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._fd_sid = -1, -1

    def __iter__(self) -> Iterator[Records]:
        while True:
            got = self.next()
            if got is None:
                self.close()
                return
            yield got
