"""A synchronous, crash-safe FIFO on disk, in go-diskqueue's exact file format.

nsqd gives every non-ephemeral topic and channel one of these as the overflow behind its memory
queue. Files written by upstream Go nsqd (go-diskqueue v1.1.0) are read by this class and vice
versa, so a data directory can move between the two implementations.

On-disk format (upstream's, unchanged)
    ``<data_path>/<name>.diskqueue.%06d.dat``  data files, records ``[int32 BE length][payload]``
    with ``min_msg_size <= length <= max_msg_size``;
    ``<data_path>/<name>.diskqueue.meta.dat``  text ``"%d\\n%d,%d\\n%d,%d\\n"`` = depth,
    readFileNum,readPos, writeFileNum,writePos; replaced atomically via ``<meta>.<rand>.tmp``.
    A write rolls to the next file first when ``writePos > 0 and writePos + 4 + len >
    max_bytes_per_file``. A file is deleted once the reader has consumed it and moved on.

Design (why it differs from go-diskqueue's goroutine)
    nsqd calls this from its asyncio event loop, so every method is a plain synchronous call
    with no threads and no locks. Throughput comes from batching, not concurrency:
    ``put_many`` issues one ``pwrite`` per data file touched, ``get_many`` parses records out of
    1 MiB ``pread`` chunks, and fsync happens per ``sync_every`` records (group commit), not per
    record. Writes go straight to the kernel (no user-space write buffer) so that a failing disk
    (ENOSPC, EFBIG, EIO) raises out of the ``put`` that caused it, and the reader can see every
    record the moment ``put`` returns. Writes are positional (``pwrite`` at ``write_pos``) rather
    than O_APPEND, so a half-written batch is cut off with ``ftruncate`` and the next write lands
    in the right place whatever is left past ``write_pos``.

    Positions are only advanced for records actually handed out by ``get``/``get_many``;
    records sitting in the read buffer are not consumed.

Sync policy
    fsync (fdatasync) of the write file + metadata when reads+writes since the last sync reach
    ``sync_every`` (with ``sync_every > 1`` this group commit runs on a background thread, as
    upstream's ioLoop goroutine does it beside the publishers: the event loop only snapshots the
    metadata and hands over a dup of the write fd, and a generation number keeps an older
    snapshot from ever replacing a newer one); from ``tick`` once ``sync_timeout`` has passed
    with activity; on every roll
    and every reader file advance; on ``close``. The directory is fsynced after a sync that
    follows creating or deleting files. With nsqd's group commit (``--sync-every=1``: ``commit``
    set, nsqd/storage/commit.py) a put is staged instead: counted in ``depth`` at once, written
    with the turn's batch (at once when it is not a publish: ``write_staged``) and flushed by the
    commit's writer thread, readable (``on_commit``) once that returned; the metadata follows
    at the sync tick (``sync_timeout``), on the sync thread (a batch that starts a data file
    writes it itself, before its answers: upstream reads no file its metadata does not name).
    Errors from these automatic syncs are logged, never raised out of ``put``/``get`` (the
    record is already written or handed out; raising would make the caller retry and duplicate
    it); an explicit ``sync()`` raises.

Recovery (upstream semantics, plus a few improvements that are marked *beyond upstream*)
    * Missing metadata and no data files: an empty queue at file 0.
    * Current write file longer (or shorter) than ``writePos`` (crash before sync): writes move
      to a new file; the reader later salvages the old file up to its real end (upstream). The
      salvaged tail's records are counted into ``depth`` (*beyond upstream*).
    * Data files numbered past ``writeFileNum`` (metadata older than the last roll) are read
      too, and writing resumes after the highest (*beyond upstream*).
    * Unparseable or impossible metadata (and data files without metadata): the metadata is
      moved aside as ``.bad`` (if present), an error is logged, and positions and depth are
      rebuilt by scanning the data files in order (*beyond upstream*, which starts fresh and
      then overwrites file 0 in place). Records consumed after the last sync are redelivered,
      which is within NSQ's at-least-once guarantee.
    * A torn last record (the last file written before a crash ends inside a record, or in
      zeros a power loss left): the file is cut in place after its last whole record at
      start-up (*beyond upstream*, which later moves the file aside as ``.bad``).
    * Read error (length out of range, truncated record, unreadable file): the file is renamed
      ``<file>.bad``, an error is logged, reading continues with the next file; reading the
      write file itself moves writing to a new file (upstream ``handleReadError``). A missing
      file is skipped straight to the next file that exists (*beyond upstream*: no loop over
      absent numbers). Depth never goes below 0 and is reset to 0 with an error log when the
      reader reaches the writer (upstream ``checkTailCorruption``).
    * A reader that has consumed all of the write file when the writer rolls moves to the new
      file cleanly; go-diskqueue issue #42 renames such a file ``.bad`` on the next read.

    ``get``/``get_many`` never raise on corruption and every recovery step strictly advances
    the read file number or the read position, so they cannot loop forever.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import re
import struct
import time
from collections.abc import Callable, Sequence
from functools import partial

from ..protocol.same_size import messages as same_size_messages, same_size_run
from .storage.background import sync_thread
from .storage.commit import GroupCommit, Write, Written
from .storage.files import O_CLOEXEC, cut_back, cut_torn_tail, fdatasync, fsync_dir, write_all

__all__ = ["DiskQueue", "DummyQueue", "scan_records"]

_LEN = struct.Struct(">i")
_pack_len = _LEN.pack
_unpack_len = _LEN.unpack_from
# a record's length followed by the NSQ message header's timestamp and attempts (get_messages)
_unpack_msg_head = struct.Struct(">iqH").unpack_from
#: the NSQ message header (timestamp 8, attempts 2, id 16): the shortest record get_messages accepts
MESSAGE_HEADER_SIZE = 26

#: bytes asked of the kernel per read; a record larger than this is read whole
READ_CHUNK = 1 << 20

_DATA_RE = re.compile(r"(\d+)\.dat")
_TMP_RE = re.compile(r"\.\d+\.tmp")
_META_RE = re.compile(rb"\s*(-?\d+)\n(-?\d+),(-?\d+)\n(-?\d+),(-?\d+)\n?\s*")

_O_CLOEXEC = O_CLOEXEC
_fdatasync = fdatasync  # (a module global: tests count the calls)


def scan_records(fd: int, start: int, end: int, min_size: int, max_size: int
                 ) -> tuple[int, int, str | None]:
    """Count the whole, valid records in ``[start, end)`` of an open data file.

    Returns ``(count, stop_pos, error)``: ``stop_pos`` is where the last valid record ends and
    ``error`` says why scanning stopped early (``None`` when it reached ``end`` cleanly). Only
    length prefixes are examined; payloads bigger than a chunk are skipped without reading.
    """
    count = 0
    pos = start
    while pos < end:
        if end - pos < 4:
            return count, pos, "truncated record header"
        chunk = os.pread(fd, min(READ_CHUNK, end - pos), pos)
        n = len(chunk)
        if n < 4:
            return count, pos, "unexpected end of file"
        off = 0
        while off + 4 <= n:
            (size,) = _unpack_len(chunk, off)
            if size < min_size or size > max_size:
                return count, pos + off, f"invalid message read size ({size})"
            nxt = off + 4 + size
            if pos + nxt > end:
                return count, pos + off, "truncated record"
            count += 1
            off = nxt
        pos += off
    return count, pos, None


class DiskQueue:
    """A FIFO of byte strings persisted in go-diskqueue's format; see the module docstring."""

    __slots__ = (
        "name", "data_path", "max_bytes_per_file", "min_msg_size", "max_msg_size",
        "sync_every", "sync_timeout", "logger", "depth",
        "read_file_num", "write_file_num", "write_pos",
        "_rfd", "_rbuf", "_roff", "_rbase", "_rlimit",
        "_wfd", "_wdirty", "_count", "_needs_sync", "_pending", "_dir_dirty",
        "_last_sync", "_closed", "_prefix", "_meta_path",
        "_meta_lock", "_meta_gen", "_meta_written", "_bg_busy", "_bg_error", "watch",
        "_left_data", "_left_bad",
        "commit", "in_commit", "on_commit", "_staged", "_staged_n", "_taken_n", "_taken_end",
        "_epoch", "_taken_epoch", "_taken_refused",
        "_written", "_flushing",
    )

    def __init__(self, name: str, data_path: str, max_bytes_per_file: int, min_msg_size: int,
                 max_msg_size: int, sync_every: int, sync_timeout: float,
                 logger: logging.Logger, files: list[str] | None = None) -> None:
        """``files``: the names in ``data_path`` that may be this queue's, when the caller
        already listed the directory (nsqd does, once, at start: a create then costs the same
        with 10 or 50,000 queues beside it); None lists the directory."""
        self.name = name
        self.data_path = data_path
        self.max_bytes_per_file = max_bytes_per_file
        self.min_msg_size = min_msg_size
        self.max_msg_size = max_msg_size
        self.sync_every = max(1, sync_every)
        self.sync_timeout = sync_timeout
        self.logger = logger
        self._prefix = name + ".diskqueue."
        self._meta_path = os.path.join(data_path, name + ".diskqueue.meta.dat")

        #: records written and not yet handed out
        self.depth = 0
        self.read_file_num = 0
        self.write_file_num = 0
        self.write_pos = 0
        # reader: fd of the read file, a chunk of it, the offset of the next record in the
        # chunk and the file offset of the chunk; read_pos is always _rbase + _roff
        self._rfd: int | None = None
        self._rbuf = b""
        self._roff = 0
        self._rbase = 0
        self._rlimit = 0  # size of the read file once it is complete (read file < write file)
        # writer
        self._wfd: int | None = None
        self._wdirty = False  # written since the last fdatasync
        # sync bookkeeping
        self._count = 0  # reads + writes since the last sync
        self._needs_sync = False  # sync before returning (roll, advance, recovery)
        self._pending = False  # a failed sync to retry from tick()
        self._dir_dirty = False  # files created/removed since the last directory fsync
        self._last_sync = time.monotonic()
        self._closed = False
        # background group commit: metadata writes are ordered by generation under the lock
        self._meta_lock = threading.Lock()
        self._meta_gen = 0
        self._meta_written = 0
        self._bg_busy = False
        self._bg_error: OSError | None = None
        #: a set this queue adds itself to whenever it is read or written (nsqd's sync tick
        #: visits only those, and drops a queue once :attr:`idle`)
        self.watch: set | None = None
        # files of this queue outside its live range (read..write file): found at start, or
        # renamed .bad since; emptying and deleting remove them without listing the directory
        self._left_data: set[str] = set()
        self._left_bad: set[str] = set()

        # group commit (``--sync-every=1`` in nsqd: storage/commit.py): puts are staged, written
        # with the turn's batch (or at once) and flushed on the writer thread, and readable once
        # it returned
        self.commit: GroupCommit | None = None
        self.in_commit = False
        #: called once records staged for the group commit are readable (the owner delivers)
        self.on_commit: Callable[[], None] | None = None
        #: per put: (length/record parts, bytes, called if its batch is refused)
        self._staged: list[tuple[list[bytes], int, Callable[[], None] | None]] = []
        self._taken_refused: list[Callable[[], None]] = []  # those of the batch being flushed
        self._staged_n = 0  # records staged, not yet taken by a batch
        self._taken_n = 0  # records the batch on the writer thread holds
        self._taken_end = 0  # write_pos once they are on disk
        self._epoch = self._taken_epoch = 0  # bumped by empty/delete/close: a batch then is moot
        # the open batch's part already in the file (``place``: whether its first write made
        # the file), and whether a batch of this queue is on the writer thread
        self._written = Written()
        self._flushing = False

        self._load(files)
        if self._needs_sync:
            self._sync_quiet()

    # --- public API -----------------------------------------------------------------------------

    @property
    def read_pos(self) -> int:
        return self._rbase + self._roff

    @property
    def idle(self) -> bool:
        """Nothing for :meth:`tick` to do until the queue is next read or written."""
        return self._closed or not (self._count or self._needs_sync or self._pending
                                    or self._bg_busy or self._bg_error is not None)

    def _touched(self) -> None:
        watch = self.watch
        if watch is not None:
            watch.add(self)

    def put(self, data: bytes) -> None:
        """Append one record. Raises OSError when the disk fails (nothing is counted then) and
        ValueError when ``len(data)`` is outside ``[min_msg_size, max_msg_size]``."""
        n = len(data)
        if n < self.min_msg_size or n > self.max_msg_size:
            raise ValueError(f"invalid message write size ({n}) minMsgSize={self.min_msg_size} "
                             f"maxMsgSize={self.max_msg_size}")
        if self._closed:
            raise OSError(errno.EBADF, f"DISKQUEUE({self.name}) is closed")
        self._touched()
        if self.commit is not None:
            self._stage([_pack_len(n), data], n + 4)
            return
        pos = self.write_pos
        if pos and pos + 4 + n > self.max_bytes_per_file:
            self._put_across_files((data,))
            return
        fd = self._wfd
        if fd is None:
            fd = self._open_write()
        self._pwrite(fd, _pack_len(n) + data, pos)
        self.write_pos = pos + 4 + n
        self.depth += 1
        self._wdirty = True
        self._count += 1
        if self._needs_sync:
            self._sync_quiet()
        elif self._count >= self.sync_every:
            self._sync_due()

    def put_many(self, datas: Sequence[bytes],
                 refused: Callable[[], None] | None = None) -> None:
        """Append records in order with one ``pwrite`` per data file touched.

        All or nothing: on OSError every byte this call wrote is cut off again, no record is
        counted and the error is raised. A size outside the limits raises ValueError before
        anything is written. Staged for the group commit, a refusal comes later: the records
        are dropped and ``refused`` is called (a requeue keeps its messages in memory then).
        """
        k = len(datas)
        if not k:
            return
        lens = list(map(len, datas))
        if min(lens) < self.min_msg_size or max(lens) > self.max_msg_size:
            bad = next(x for x in lens if x < self.min_msg_size or x > self.max_msg_size)
            raise ValueError(f"invalid message write size ({bad}) minMsgSize={self.min_msg_size} "
                             f"maxMsgSize={self.max_msg_size}")
        if self._closed:
            raise OSError(errno.EBADF, f"DISKQUEUE({self.name}) is closed")
        self._touched()
        pos = self.write_pos
        total = sum(lens) + 4 * k
        parts: list[bytes] = [b""] * (2 * k)
        parts[::2] = map(_pack_len, lens)
        parts[1::2] = datas
        if self.commit is not None:
            self._stage(parts, total, refused)
            return
        if pos + total > self.max_bytes_per_file and (pos or k > 1):
            self._put_across_files(datas)
            return
        fd = self._wfd
        if fd is None:
            fd = self._open_write()
        self._pwrite(fd, b"".join(parts), pos)
        self.write_pos = pos + total
        self.depth += k
        self._wdirty = True
        self._count += k
        if self._needs_sync:
            self._sync_quiet()
        elif self._count >= self.sync_every:
            self._sync_due()

    # --- group commit (storage/commit.py) -------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records put but not yet readable: staged for the group commit or being flushed
        (counted in :attr:`depth`, so later puts queue behind them)."""
        return self._staged_n + self._taken_n

    def _stage(self, parts: list[bytes], nbytes: int,
               refused: Callable[[], None] | None = None) -> None:
        """A put with ``--sync-every=1``: kept until the turn's batch writes and flushes it, or
        (not a publish) written now and flushed by that batch. Raises OSError when that write
        fails (nothing of this put is kept then)."""
        k = len(parts) >> 1
        self._staged.append((parts, nbytes, refused))
        self._staged_n += k
        self.depth += k
        try:
            self.commit.stage(self)  # type: ignore[union-attr]
        except OSError:
            self._staged.pop()
            self._staged_n -= k
            self.depth -= k
            raise

    def write_staged(self) -> None:
        """Hand what is staged to the file now (the kernel keeps it through a kill -9): a
        message nsqd already held (a requeue, the pump, a dead letter) must not be lost once
        the loop has moved on, as go-diskqueue's ``Put`` has written before it returns. Only
        the fdatasync waits for the batch. Not readable before the batch returned."""
        self._written.write(self._staged, self._batch_start)

    def _batch_start(self, first: tuple) -> tuple[int, int]:
        """Where the open batch's records go: right after the batch on the writer thread (in
        its file: a roll waits for a batch that starts with nothing in flight), else at the
        end of the write file, rolled first when the first record does not fit. A file may
        so pass ``max_bytes_per_file`` by the rest of a batch: go-diskqueue reads a finished
        file to its real size, as this reader does."""
        if self._flushing:
            return self._wfd, self._taken_end  # type: ignore[return-value]
        if self.write_pos and self.write_pos + 4 + len(first[0][1]) > self.max_bytes_per_file:
            self._roll_writer()
        self._written.place = self._wfd is None and self.write_pos == 0  # (a new file)
        if self._wfd is None:
            self._open_write()
        return self._wfd, self.write_pos  # type: ignore[return-value]

    def prepare(self) -> list[Write]:
        """The batch takes everything staged and writes what is not written yet (one
        ``pwritev``); the writer thread flushes it. One batch, one outcome for all it holds."""
        self._taken_epoch = self._epoch
        chunks = self._staged
        self._taken_n, self._staged_n = self._staged_n, 0
        self._taken_refused = [c[2] for c in chunks if c[2] is not None]
        if not chunks:
            return []
        try:
            start, created, self._taken_end = self._written.take(chunks, self._batch_start,
                                                                 self._truncate)
        finally:
            self._staged = []
        self._flushing = True
        after = None
        if created:  # the metadata names the new file before anything in it is answered
            with self._meta_lock:
                self._meta_gen += 1
                gen = self._meta_gen
            after = partial(self._persist_meta_gen, gen, b"%d\n%d,%d\n%d,%d\n" % (
                self.depth, self.read_file_num, self.read_pos, self.write_file_num,
                self._taken_end))
        return [Write(os.dup(self._wfd), start,  # type: ignore[arg-type]
                      self.data_path if created else "", after)]

    def committed(self, error: OSError | None) -> None:
        """The batch returned: its records are on disk and readable, or refused and dropped
        (a requeue among them is handed back: its ``refused`` callback)."""
        n, self._taken_n = self._taken_n, 0
        refused, self._taken_refused = self._taken_refused, []
        self._flushing = False
        if self._taken_epoch != self._epoch:
            return  # emptied, deleted or closed meanwhile: nothing of it counts
        if error is not None:
            self.depth -= n
            for rescue in refused:
                rescue()
            self._written.write_again(self, self._wfd, self.write_pos, self._truncate)
            return
        self.write_pos = self._taken_end
        self._count += n
        self._touched()
        if self._needs_sync:
            self._sync_due()  # the metadata, on the sync thread: the data is flushed already
        # (else the metadata follows at the sync tick: what a batch wrote is flushed already,
        # and a start after a crash counts the records past the metadata's write position)
        if self.on_commit is not None:
            self.on_commit()

    def _roll_writer(self) -> None:
        """Writing moves on to the next file; the current one is whole and flushed."""
        old_num, old_end = self.write_file_num, self.write_pos
        self._close_write()
        self.write_file_num = old_num + 1
        self.write_pos = 0
        self._needs_sync = True
        if self.read_file_num == old_num:
            self._rlimit = old_end
            if self.read_pos >= old_end:
                self._advance_reader()

    def _write_staged_now(self) -> None:
        """Closing: what is still staged is written without the group commit."""
        chunks, self._staged = self._staged, []
        self.depth -= self._staged_n
        self._staged_n = 0
        self._written.forget()  # (rewritten in place: nothing is in flight at a close)
        commit, self.commit = self.commit, None
        try:
            for parts, _nbytes, _refused in chunks:
                self.put_many(parts[1::2])
        finally:
            self.commit = commit

    def _drop_staged(self) -> None:
        self._epoch += 1
        self._written.forget()
        self._flushing = False
        self._staged = []
        self._taken_refused = []
        self._staged_n = self._taken_n = 0

    def get(self) -> bytes | None:
        """Hand out the next record (it counts as consumed) or None when the queue is empty."""
        buf = self._rbuf
        off = self._roff
        if off + 4 <= len(buf):
            (size,) = _unpack_len(buf, off)
            end = off + 4 + size
            if end <= len(buf) and self.min_msg_size <= size <= self.max_msg_size:
                self._roff = end
                self._touched()
                self._consumed(1)
                return buf[off + 4:end]
        got = self.get_many(1)
        return got[0] if got else None

    def get_many(self, limit: int) -> list[bytes]:
        """Hand out up to ``limit`` records (all count as consumed); ``[]`` when empty.

        Corruption is handled inside (the file goes ``.bad``, reading moves on) and never
        raised; records before the corrupt spot are still returned.
        """
        return self._get(limit, False)

    def get_messages(self, limit: int) -> list[tuple[bytes, bytes, int, int]]:
        """:meth:`get_many` with each record decoded as an NSQ message ``(id, body, timestamp,
        attempts)`` in the same pass over the read buffer.

        This is nsqd's delivery path from disk: parsing the record and its message header
        together saves a copy and a call per message (a third of the cost of reading a backlog).
        A record shorter than the 26-byte message header counts as corruption here.
        """
        return self._get(limit, True)

    def _get(self, limit: int, messages: bool) -> list:
        out: list = []
        if limit <= 0 or self._closed:
            return out
        self._touched()
        append = out.append
        lo = self.min_msg_size
        hi = self.max_msg_size
        if messages and lo < MESSAGE_HEADER_SIZE:
            lo = MESSAGE_HEADER_SIZE
        while True:
            buf = self._rbuf
            off = self._roff
            n = len(buf)
            start = len(out)
            want = limit - start
            bad = None
            if messages:
                run = same_size_run(buf, off, n, want, lo, hi, n - off)  # no byte budget here
                if run is not None:  # records of one size, decoded in blocks
                    size, count = run
                    out += same_size_messages(buf, off, size, count)
                    off += count * (size + 4)
                    want -= count
                # the hottest loop of delivery from disk: one bound check and one size check
                # per record, the rare cases sorted out after the break
                last = n - 14
                for _ in range(want):
                    if off > last:  # too little buffered for a header: the length says enough
                        if off + 4 <= n:
                            (size,) = _unpack_len(buf, off)
                            if size < lo or size > hi:
                                bad = f"invalid message read size ({size})"
                        break
                    size, ts, attempts = _unpack_msg_head(buf, off)
                    end = off + 4 + size
                    if size < lo or size > hi or end > n:
                        if size < lo or size > hi:
                            bad = f"invalid message read size ({size})"
                        break
                    append((buf[off + 14:off + 30], buf[off + 30:end], ts, attempts))
                    off = end
                want = limit - len(out)
            else:
                while want and off + 4 <= n:
                    (size,) = _unpack_len(buf, off)
                    if size < lo or size > hi:
                        bad = f"invalid message read size ({size})"
                        break
                    end = off + 4 + size
                    if end > n:
                        break
                    append(buf[off + 4:end])
                    off = end
                    want -= 1
            self._roff = off
            if len(out) > start:
                self._consumed(len(out) - start)
            if bad is not None:
                self._bad_file(bad)
                continue
            if not want or not self._fill():
                return out

    def sync(self) -> None:
        """fdatasync the write file and persist metadata; raises OSError on failure."""
        if self._closed:
            return
        if self._wfd is not None and self._wdirty:
            _fdatasync(self._wfd)
            self._wdirty = False
        with self._meta_lock:
            self._meta_gen += 1
            self._persist_meta_text(self._meta_text())
            self._meta_written = self._meta_gen
        if self._dir_dirty:
            self._sync_dir()
        self._count = 0
        self._needs_sync = False
        self._pending = False
        self._last_sync = time.monotonic()

    def tick(self, now: float) -> None:
        """Periodic hook (``now`` from ``time.monotonic()``/``loop.time()``): sync when there
        was activity and ``sync_timeout`` has passed since the last sync."""
        if self._closed:
            return
        err = self._bg_error
        if err is not None:
            self._bg_error = None
            self.logger.error("DISKQUEUE(%s) failed to sync - %s", self.name, err)
            self._pending = True
        if (self._count or self._needs_sync or self._pending) and \
                now - self._last_sync >= self.sync_timeout and not self._bg_busy:
            self._sync_due()

    def empty(self) -> None:
        """Drop everything: delete all data files and the metadata, continue at the next file
        number (upstream). Raises the first OSError met after completing the reset."""
        self.logger.info("DISKQUEUE(%s): emptying", self.name)
        self._touched()
        self._drop_staged()
        with self._meta_lock:  # a background sync still running must not rewrite the metadata
            self._meta_gen += 1
            self._meta_written = self._meta_gen
        err = self._remove_all(bad_too=False)
        self.write_file_num += 1
        self.write_pos = 0
        self.read_file_num = self.write_file_num
        self._reset_reader(0)
        self.depth = 0
        self._count = 0
        self._needs_sync = False
        self._pending = False
        self._wdirty = False
        self._dir_dirty = True
        try:
            os.unlink(self._meta_path)
        except FileNotFoundError:
            pass
        except OSError as e:
            self.logger.error("DISKQUEUE(%s) failed to remove metadata file - %s", self.name, e)
            err = err or e
        if err is not None:
            raise err

    def close(self) -> None:
        """Sync and close. Raises OSError if the final sync fails (files are closed anyway)."""
        if self._closed:
            return
        self.logger.info("DISKQUEUE(%s): closing", self.name)
        err = None
        try:
            if self._staged:  # (memory queues flushed at shutdown, after the last batch)
                self._write_staged_now()
            self.sync()
        except OSError as e:
            self.logger.error("DISKQUEUE(%s) failed to sync - %s", self.name, e)
            err = e
        self._drop_staged()
        self._close_fds()
        self._closed = True
        if err is not None:
            raise err

    def delete(self) -> None:
        """Empty and close, leaving nothing of this queue on disk (``.bad`` files included,
        which upstream leaves behind)."""
        self.logger.info("DISKQUEUE(%s): deleting", self.name)
        if not self._closed:
            try:
                self.empty()
            except OSError:
                pass  # logged by empty()
        self._remove_all(bad_too=True)
        try:
            os.unlink(self._meta_path)
        except OSError:
            pass
        self._close_fds()
        self._closed = True

    def __repr__(self) -> str:
        return (f"<DiskQueue {self.name!r} depth={self.depth} read={self.read_file_num},"
                f"{self.read_pos} write={self.write_file_num},{self.write_pos}>")

    # --- paths ----------------------------------------------------------------------------------

    def file_name(self, file_num: int) -> str:
        return os.path.join(self.data_path, "%s%06d.dat" % (self._prefix, file_num))

    @property
    def meta_file_name(self) -> str:
        return self._meta_path

    def _list_files(self, names: list[str] | None = None) -> tuple[dict[int, str], list[str], list[str]]:
        """This queue's data files by number, its ``.bad`` files and stray metadata temps
        (among ``names`` when given, else in a listing of the directory)."""
        data: dict[int, str] = {}
        bad: list[str] = []
        tmps: list[str] = []
        prefix = self._prefix
        meta_base = os.path.basename(self._meta_path)
        try:
            if names is None:
                names = os.listdir(self.data_path)
        except OSError as e:
            self.logger.error("DISKQUEUE(%s) cannot list %s - %s", self.name, self.data_path, e)
            return data, bad, tmps
        for fn in names:
            if fn.startswith(meta_base):
                if _TMP_RE.fullmatch(fn, len(meta_base)):
                    tmps.append(os.path.join(self.data_path, fn))
                elif fn == meta_base + ".bad":
                    bad.append(os.path.join(self.data_path, fn))
                continue
            if not fn.startswith(prefix):
                continue
            rest = fn[len(prefix):]
            if rest.endswith(".bad"):
                if _DATA_RE.fullmatch(rest, 0, len(rest) - 4):
                    bad.append(os.path.join(self.data_path, fn))
                continue
            m = _DATA_RE.fullmatch(rest)
            if m:
                data[int(m.group(1))] = os.path.join(self.data_path, fn)
        return data, bad, tmps

    # --- writer ---------------------------------------------------------------------------------

    def _open_write(self) -> int:
        self._wfd = self._open_data_file(self.write_file_num, self.write_pos)
        return self._wfd

    def _open_data_file(self, file_num: int, pos: int) -> int:
        path = self.file_name(file_num)
        if pos == 0:
            # a new file: anything already there is not ours to extend or overwrite
            try:
                if os.stat(path).st_size > 0:
                    self.logger.error("DISKQUEUE(%s) unexpected data in new write file %s, "
                                      "saving it as %s.bad", self.name, path, path)
                    os.replace(path, path + ".bad")
                    self._left_bad.add(path + ".bad")
            except FileNotFoundError:
                pass
            self._dir_dirty = True
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | _O_CLOEXEC, 0o600)
        self.logger.info("DISKQUEUE(%s): opened %s for writing", self.name, path)
        return fd

    def _pwrite(self, fd: int, data: bytes, pos: int) -> None:
        """Write all of ``data`` at ``pos``; on failure cut the file back to ``pos`` and raise."""
        try:
            write_all(fd, (data,), pos)
        except OSError:
            self._truncate(fd, pos)
            raise

    def _truncate(self, fd: int, size: int) -> None:
        # (on failure the bytes past write_pos stay; the next write overwrites them)
        cut_back(fd, size, self.logger, f"DISKQUEUE({self.name})")

    def _put_across_files(self, datas: Sequence[bytes]) -> None:
        """The rolling write path: split ``datas`` per file, write each part, then commit."""
        max_bytes = self.max_bytes_per_file
        file_num = self.write_file_num
        pos = self.write_pos
        segments: list[tuple[int, int, int, list[bytes]]] = []  # file, start, end, parts
        parts: list[bytes] = []
        start = pos
        for d in datas:
            n = len(d)
            if pos and pos + 4 + n > max_bytes:
                segments.append((file_num, start, pos, parts))
                file_num += 1
                pos = start = 0
                parts = []
            parts.append(_pack_len(n))
            parts.append(d)
            pos += 4 + n
        segments.append((file_num, start, pos, parts))

        first = self.write_file_num
        fds: dict[int, int] = {}
        written: list[tuple[int, int]] = []
        try:
            for file_num, start, _end, parts in segments:
                if not parts:
                    continue  # the first record already rolled
                if file_num == first:
                    fd = self._wfd if self._wfd is not None else self._open_write()
                else:
                    fd = fds[file_num] = self._open_data_file(file_num, 0)
                self._pwrite(fd, b"".join(parts), start)
                written.append((fd, start))
        except OSError:
            for fd, start in written:
                self._truncate(fd, start)
            for file_num, fd in fds.items():
                os.close(fd)
                try:
                    os.unlink(self.file_name(file_num))
                except OSError:
                    pass
            raise

        # commit: seal every file but the last (fsync, cut any stale tail, close)
        old_write_pos = segments[0][2]
        for file_num, _start, end, _parts in segments[:-1]:
            fd = self._wfd if file_num == first else fds.get(file_num)
            if fd is None:
                continue
            try:
                if os.fstat(fd).st_size > end:
                    os.ftruncate(fd, end)
                _fdatasync(fd)
            except OSError as e:
                self.logger.error("DISKQUEUE(%s) failed to sync %s - %s",
                                  self.name, self.file_name(file_num), e)
            os.close(fd)
        last_num, _s, last_end, _p = segments[-1]
        self._wfd = fds.get(last_num, self._wfd if last_num == first else None)
        self.write_file_num = last_num
        self.write_pos = last_end
        self._wdirty = True
        self.depth += len(datas)
        self._count += len(datas)
        if len(segments) == 1:  # no roll after all
            if self._count >= self.sync_every or self._needs_sync:
                self._sync_quiet()
            return
        self._needs_sync = True  # sync every time writing starts on a new file
        if self.read_file_num == first:
            self._rlimit = old_write_pos
            if self.read_pos >= old_write_pos:
                # the reader had everything of the file just sealed; move it along now
                # (go-diskqueue issue #42 would rename this file .bad instead)
                self._advance_reader()
                return
        self._sync_quiet()

    # --- reader ---------------------------------------------------------------------------------

    def _reset_reader(self, pos: int) -> None:
        if self._rfd is not None:
            try:
                os.close(self._rfd)
            except OSError:
                pass
            self._rfd = None
        self._rbuf = b""
        self._roff = 0
        self._rbase = pos

    def _consumed(self, k: int) -> None:
        """Book ``k`` records as handed out; advance past a finished file; apply sync policy."""
        depth = self.depth - k
        if depth < 0:
            self.logger.error("DISKQUEUE(%s) depth went negative (%d), metadata corruption, "
                              "resetting 0...", self.name, depth)
            depth = 0
        self.depth = depth
        self._count += k
        pos = self._rbase + self._roff
        if self.read_file_num != self.write_file_num:
            if self._rfd is not None and pos >= self._rlimit:
                self._advance_reader()
                return
        elif pos >= self.write_pos:
            self._check_tail()
        if self._needs_sync:
            self._sync_quiet()
        elif self._count >= self.sync_every:
            self._sync_due()

    def _fill(self) -> bool:
        """Bring more bytes of the read file into the buffer, or move to the next file.

        Returns False when there is nothing more to read (the reader is at the writer), True
        when the buffer grew or the read position moved to another file; every True step makes
        progress, so callers may loop on it.
        """
        rfn = self.read_file_num
        at_write_file = rfn == self.write_file_num
        if self._rfd is None:
            if at_write_file and self._rbase >= self.write_pos:
                if self._rbase > self.write_pos:
                    self._bad_file("read position past write position")
                    return True
                return False
            path = self.file_name(rfn)
            try:
                self._rfd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
                if not at_write_file:
                    self._rlimit = os.fstat(self._rfd).st_size
            except FileNotFoundError:
                self._skip_missing()
                return True
            except OSError as e:
                self._bad_file(f"cannot open - {e}")
                return True
            self.logger.info("DISKQUEUE(%s): opened %s for reading", self.name, path)
        end = self.write_pos if at_write_file else self._rlimit
        buffered_end = self._rbase + len(self._rbuf)
        leftover = len(self._rbuf) - self._roff
        if buffered_end >= end:
            if buffered_end > end:
                self._bad_file("read position past end of data")
                return True
            if leftover:
                self._bad_file("truncated record" if not at_write_file
                               else "record extends past write position")
                return True
            if at_write_file:
                return False
            self._advance_reader()
            return True
        want = READ_CHUNK
        if leftover >= 4:
            (size,) = _unpack_len(self._rbuf, self._roff)
            want = max(want, 4 + size - leftover)
        want = min(want, end - buffered_end)
        try:
            data = os.pread(self._rfd, want, buffered_end)
        except OSError as e:
            self._bad_file(f"read failed - {e}")
            return True
        if not data:
            self._bad_file("unexpected end of file")
            return True
        if leftover:
            self._rbuf = self._rbuf[self._roff:] + data
        else:
            self._rbuf = data
        self._rbase += self._roff
        self._roff = 0
        return True

    def _advance_reader(self) -> None:
        """The read file is fully consumed: persist the move, then delete the file."""
        old = self.read_file_num
        self._reset_reader(0)
        self.read_file_num = old + 1
        self._dir_dirty = True
        self._needs_sync = True
        if self.read_file_num == self.write_file_num:
            self._check_tail()
        self._sync_quiet()
        path = self.file_name(old)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            self.logger.error("DISKQUEUE(%s) failed to Remove(%s) - %s", self.name, path, e)

    def _bad_file(self, reason: str) -> None:
        """Upstream ``handleReadError``: save the read file as ``.bad`` and jump past it."""
        rfn = self.read_file_num
        path = self.file_name(rfn)
        self.logger.error("DISKQUEUE(%s) reading at %d of %s - %s",
                          self.name, self.read_pos, path, reason)
        self._reset_reader(0)
        if rfn == self.write_file_num:
            # the write file itself is unreadable: stop appending to it too
            self._close_write()
            self.write_file_num += 1
            self.write_pos = 0
        self.logger.warning("DISKQUEUE(%s) jump to next file and saving bad file as %s.bad",
                            self.name, path)
        try:
            os.replace(path, path + ".bad")
            self._left_bad.add(path + ".bad")
        except OSError as e:
            self.logger.error("DISKQUEUE(%s) failed to rename bad diskqueue file %s to %s.bad "
                              "- %s", self.name, path, path, e)
        self.read_file_num = rfn + 1
        self._dir_dirty = True
        self._needs_sync = True
        self._check_tail()
        self._sync_quiet()

    def _skip_missing(self) -> None:
        """The read file does not exist: go to the next one that does (or to the writer)."""
        rfn = self.read_file_num
        self.logger.error("DISKQUEUE(%s) data file %s is missing, skipping it",
                          self.name, self.file_name(rfn))
        self._reset_reader(0)
        if rfn == self.write_file_num:
            self._close_write()
            self.write_file_num += 1
            self.write_pos = 0
            self.read_file_num = self.write_file_num
        else:
            data, _bad, _tmps = self._list_files()
            later = [n for n in data if rfn < n <= self.write_file_num]
            self.read_file_num = min(later) if later else self.write_file_num
        self._needs_sync = True
        self._check_tail()
        self._sync_quiet()

    def _check_tail(self) -> None:
        """Upstream ``checkTailCorruption``: at the writer, depth must be 0."""
        if self.read_file_num != self.write_file_num or self.read_pos != self.write_pos:
            return
        if self.depth != self._staged_n + self._taken_n:  # (those are not written yet)
            self.logger.error("DISKQUEUE(%s) %s depth at tail (%d), %s, resetting 0...",
                              self.name, "negative" if self.depth < 0 else "positive",
                              self.depth,
                              "metadata corruption" if self.depth < 0 else "data loss")
            self.depth = self._staged_n + self._taken_n
            self._needs_sync = True

    # --- sync and metadata ----------------------------------------------------------------------

    def _sync_quiet(self) -> None:
        try:
            self.sync()
        except OSError as e:
            self.logger.error("DISKQUEUE(%s) failed to sync - %s", self.name, e)
            self._count = 0
            self._needs_sync = False
            self._pending = True  # tick() retries
            self._last_sync = time.monotonic()

    def wait_background(self, timeout: float = 5.0) -> None:
        """Block until a background group commit in progress is on disk (tests, tools)."""
        deadline = time.monotonic() + timeout
        while self._bg_busy and time.monotonic() < deadline:
            time.sleep(0.001)

    def _sync_due(self) -> None:
        """Group commit: synchronous for ``sync_every == 1`` (durable mode), else on the
        background thread; while one is running, further triggers just wait for the next."""
        if self.sync_every <= 1 and self.commit is None:
            self._sync_quiet()
            return
        if self._bg_busy or self._closed:
            return
        self._needs_sync = False  # (what it asks for: data, metadata, directory, all below)
        fd = None
        if self._wfd is not None and self._wdirty:
            try:
                fd = os.dup(self._wfd)
            except OSError:
                self._sync_quiet()
                return
            self._wdirty = False
        with self._meta_lock:
            self._meta_gen += 1
            gen = self._meta_gen
        text = self._meta_text()
        dir_fsync = self._dir_dirty
        self._dir_dirty = False
        self._count = 0
        self._pending = False
        self._last_sync = time.monotonic()
        self._bg_busy = True
        sync_thread().submit(self._background_sync, fd, text, gen, dir_fsync)

    def _background_sync(self, fd: int | None, text: bytes, gen: int, dir_fsync: bool) -> None:
        """Runs on the sync thread: fdatasync, then metadata no older than what is on disk."""
        try:
            if fd is not None:
                try:
                    _fdatasync(fd)
                finally:
                    os.close(fd)
            self._persist_meta_gen(gen, text)
            if dir_fsync:
                self._sync_dir()
        except OSError as e:
            self._bg_error = e  # reported and retried by tick() on the loop thread
        finally:
            self._bg_busy = False

    def _meta_text(self) -> bytes:
        return b"%d\n%d,%d\n%d,%d\n" % (self.depth - self._staged_n - self._taken_n,
                                         self.read_file_num, self.read_pos,
                                         self.write_file_num, self.write_pos)

    def _persist_meta(self) -> None:
        with self._meta_lock:
            self._meta_gen += 1
            self._persist_meta_text(self._meta_text())
            self._meta_written = self._meta_gen

    def _persist_meta_gen(self, gen: int, text: bytes) -> None:
        """Write ``text`` unless a newer metadata (a later generation) is on disk already."""
        with self._meta_lock:
            if gen > self._meta_written:
                self._persist_meta_text(text)
                self._meta_written = gen

    def _persist_meta_text(self, text: bytes) -> None:
        tmp = "%s.%d.tmp" % (self._meta_path, int.from_bytes(os.urandom(8), "big") >> 2)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o600)
        try:
            try:
                done = 0
                while done < len(text):
                    done += os.write(fd, text[done:])
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self._meta_path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def _sync_dir(self) -> None:
        fsync_dir(self.data_path)
        self._dir_dirty = False

    # --- startup --------------------------------------------------------------------------------

    def _load(self, files: list[str] | None) -> None:
        data, bad, tmps = self._list_files(files)
        self._left_data.update(data.values())
        self._left_bad.update(bad)
        for tmp in tmps:  # left by a crash between creating and renaming a metadata temp
            try:
                os.unlink(tmp)
            except OSError:
                pass
        try:
            with open(self._meta_path, "rb") as f:
                raw = f.read(4096)
        except FileNotFoundError:
            if data:
                self.logger.error("DISKQUEUE(%s) metadata file %s is missing but %d data file(s) "
                                  "exist; rebuilding positions from the data files",
                                  self.name, self._meta_path, len(data))
                self._rebuild(data)
            return
        except OSError as e:
            self.logger.error("DISKQUEUE(%s) failed to retrieveMetaData - %s", self.name, e)
            self._rebuild(data)
            return

        m = _META_RE.fullmatch(raw)
        problem = None
        if m is None:
            problem = f"unparseable metadata {raw[:80]!r}"
        else:
            depth, rfn, rpos, wfn, wpos = map(int, m.groups())
            if min(rfn, rpos, wfn, wpos) < 0:
                problem = "negative position"
            elif rfn > wfn or (rfn == wfn and rpos > wpos):
                problem = f"read position {rfn},{rpos} past write position {wfn},{wpos}"
        if problem is not None:
            self.logger.error("DISKQUEUE(%s) failed to retrieveMetaData - %s; saving it as "
                              "%s.bad and rebuilding positions from the data files",
                              self.name, problem, self._meta_path)
            try:
                os.replace(self._meta_path, self._meta_path + ".bad")
                self._left_bad.add(self._meta_path + ".bad")
            except OSError as e:
                self.logger.error("DISKQUEUE(%s) failed to rename metadata - %s", self.name, e)
            self._rebuild(data)
            return

        self.read_file_num = rfn
        self._rbase = rpos
        self.write_file_num = wfn
        self.write_pos = wpos
        self.depth = depth

        stale = sorted(n for n in data if n < rfn)
        if stale:
            self.logger.warning("DISKQUEUE(%s) data files before the read file %d are left "
                                "alone (already consumed per metadata): %s", self.name, rfn,
                                stale)

        extra = 0
        wpath = self.file_name(wfn)
        size = -1
        try:
            size = os.stat(wpath).st_size
        except FileNotFoundError:
            pass
        except OSError as e:
            self.logger.error("DISKQUEUE(%s) cannot stat %s - %s", self.name, wpath, e)
        next_write = wfn
        later = sorted(n for n in data if n > wfn)
        if size < 0:
            if wpos > 0:
                self.logger.error("DISKQUEUE(%s) write file %s is missing (writePos %d), "
                                  "skipping to a new file", self.name, wpath, wpos)
                next_write = wfn + 1
        elif size != wpos:
            self.logger.warning("DISKQUEUE(%s) %s metadata writePos %d != file size of %d, "
                                "skipping to new file", self.name, wpath, wpos, size)
            if size > wpos:  # written after the last sync: its last record may be torn
                extra += self._count_records(wpath, wpos, tail=not later)
            next_write = wfn + 1
        if later:
            self.logger.warning("DISKQUEUE(%s) data files after write file %d found %s "
                                "(metadata older than the data); reading them too",
                                self.name, wfn, later)
            for n in later:
                extra += self._count_records(data[n], 0, tail=n == later[-1])
            next_write = max(next_write, later[-1] + 1)
        if next_write != wfn:
            self.write_file_num = next_write
            self.write_pos = 0
            self._needs_sync = True
        if extra:
            self.logger.warning("DISKQUEUE(%s) %d unsynced record(s) found past the metadata; "
                                "depth %d -> %d", self.name, extra, self.depth,
                                self.depth + extra)
            self.depth += extra
        if self.depth < 0:
            self.logger.error("DISKQUEUE(%s) negative depth (%d) in metadata, recounting",
                              self.name, self.depth)
            self.depth = self._count_pending(data)
            self._needs_sync = True
        self._check_tail()

    def _rebuild(self, data: dict[int, str]) -> None:
        """Positions from the data files alone: read from the oldest, write after the newest."""
        if not data:
            self._needs_sync = True
            return
        nums = sorted(data)
        self.read_file_num = nums[0]
        self._rbase = 0
        self.write_file_num = nums[-1] + 1
        self.write_pos = 0
        self.depth = sum(self._count_records(data[n], 0, tail=n == nums[-1]) for n in nums)
        self.logger.warning("DISKQUEUE(%s) rebuilt: files %d..%d, depth %d",
                            self.name, nums[0], nums[-1], self.depth)
        self._needs_sync = True

    def _count_records(self, path: str, start: int, tail: bool = False) -> int:
        """Whole records from ``start`` on. ``tail``: the last file written before a crash,
        whose last record may be torn (a kill -9 inside a write, a power loss): it is cut in
        place after the last whole record (no ``.bad`` file: nothing after it was ever
        acknowledged, and every record before it stays)."""
        try:
            fd = os.open(path, (os.O_RDWR if tail else os.O_RDONLY) | _O_CLOEXEC)
        except OSError:
            return 0
        try:
            end = os.fstat(fd).st_size
            count, stop, err = scan_records(fd, start, end, self.min_msg_size, self.max_msg_size)
            if err is not None and tail:
                cut_torn_tail(fd, path, stop, end, self.logger, f"DISKQUEUE({self.name})")
        except OSError as e:
            if tail:
                self.logger.error("DISKQUEUE(%s) cannot cut the torn tail of %s - %s",
                                  self.name, path, e)
            return 0
        finally:
            os.close(fd)
        return count

    def _count_pending(self, data: dict[int, str]) -> int:
        """Records between the read and write positions (used only to repair a bad depth)."""
        total = 0
        for n in sorted(data):
            if self.read_file_num <= n <= self.write_file_num:
                start = self.read_pos if n == self.read_file_num else 0
                total += self._count_records(data[n], start)
        return total

    # --- teardown -------------------------------------------------------------------------------

    def _close_write(self) -> None:
        if self._wfd is not None:
            try:
                os.close(self._wfd)
            except OSError:
                pass
            self._wfd = None
            self._wdirty = False

    def _close_fds(self) -> None:
        self._reset_reader(self.read_pos)
        self._close_write()

    def _remove_all(self, bad_too: bool) -> OSError | None:
        """Remove the data files (the live range by number, as upstream, and any found at start
        or renamed since), with ``bad_too`` the ``.bad`` files as well. No directory listing:
        emptying or deleting a queue costs the same beside 10 or 50,000 others."""
        self._close_fds()
        paths = {self.file_name(n) for n in range(self.read_file_num, self.write_file_num + 1)}
        paths |= self._left_data
        self._left_data = set()
        if bad_too:
            paths |= self._left_bad
            self._left_bad = set()
        err = None
        for path in sorted(paths):
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            except OSError as e:
                self.logger.error("DISKQUEUE(%s) failed to remove data file - %s", self.name, e)
                err = err or e
                continue
            self._dir_dirty = True
        return err


class DummyQueue:
    """The backend of ``#ephemeral`` topics and channels: it keeps nothing."""

    __slots__ = ("name",)

    depth = 0
    pending = 0
    idle = True
    watch = None

    def __init__(self, name: str = "", *args: object, **kwargs: object) -> None:
        self.name = name

    def put(self, data: bytes) -> None:
        pass

    def put_many(self, datas: Sequence[bytes], refused: object = None) -> None:
        pass

    def get(self) -> None:
        return None

    def get_many(self, limit: int) -> list[bytes]:
        return []

    def get_messages(self, limit: int) -> list[tuple[bytes, bytes, int, int]]:
        return []

    def sync(self) -> None:
        pass

    def tick(self, now: float) -> None:
        pass

    def empty(self) -> None:
        pass

    def close(self) -> None:
        pass

    def delete(self) -> None:
        pass
