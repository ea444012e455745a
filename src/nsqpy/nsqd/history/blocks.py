"""What ``GET /history/read`` sends: the blocks of a range as they lie in the segment files
(docs/history.md §6), read on a thread so the event loop only hands the pieces to the socket.

A read is planned on the event loop when the request arrives (:func:`plan_read`): which
segments, from which block to which, and whether each lies wholly inside ``[from, to)`` (its
smallest and greatest timestamps say so). The reader thread then runs :meth:`RangeRead.next_piece`:
a span wholly inside goes out as the file's bytes, 1 MiB preads from the page cache, without
even finding its block boundaries; in a span that straddles an end of the range, each block's
timestamp column is looked at (one C call), a block inside goes out as it is, a block partly
inside is cut (a new block of the records inside, CRC made again), a block outside is skipped.
A byte window (``byte_from``/``byte_to``, for readers that split a segment) is the blocks that
*start* inside it: each block is in exactly one of the windows that tile a segment. The plan
holds positions, never records: a read holds one piece in memory (plus one read ahead).
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from typing import Any

from ...protocol.history_block import (
    FRAME, HEAD, HEAD_SIZE, block_timestamps, decode_block, encode_block,
)

PIECE = 1 << 20  # bytes per pread
_HEAD_TS = struct.Struct(HEAD.format + "q")  # a block's head and its first timestamp


@dataclass
class Span:
    """A run of whole blocks of one segment file, from block start ``start`` to ``end`` (a
    block start, or the segment's end). ``walk_start`` / ``walk_end``: ``(block, byte)`` when
    the span begins (ends) at the first block starting at or after ``byte`` instead, found on
    the reader thread by walking the block heads from ``block``, a block start at most one
    sparse step (and one block) before it."""

    path: str
    start: int
    end: int
    whole: bool
    walk_start: tuple[int, int] | None = None
    walk_end: tuple[int, int] | None = None


def _block_before(seg: Any, byte: int) -> int:
    """A block start at or before ``byte``: the segment's sparse index entry."""
    i = bisect.bisect_right(seg.sparse_off, byte) - 1
    return seg.sparse_off[i] if i >= 0 else 0


def plan_read(log: Any, frm: int, to: int, start: tuple[int, int], stop: tuple[int, int],
              window: tuple[int, int] | None = None) -> list[Span]:
    """The spans of a read from position ``start`` up to position ``stop`` (both taken on the
    event loop: the active segment keeps growing). ``window``: byte offsets in ``start``'s
    segment (then ``stop`` lies in it too)."""
    spans = []
    for seg in list(log.segments):
        if seg.sid < start[0] or seg.sid > stop[0] or not seg.count:
            continue
        begin = start[1] if seg.sid == start[0] else 0
        end = min(seg.size, stop[1]) if seg.sid == stop[0] else seg.size
        whole = frm <= seg.min_ts and seg.max_ts < to
        span = Span(log.path(seg.sid), begin, end, whole)
        if window is not None:
            lo, hi = window
            if lo >= end or hi <= begin:  # (so a walk never reads past the segment)
                continue
            if begin < lo:
                span.start = max(begin, _block_before(seg, lo))
                span.walk_start = (span.start, lo)
            if hi < end:
                span.walk_end = (_block_before(seg, hi), hi)
        if span.start < span.end:
            spans.append(span)
    return spans


class RangeRead:
    """One ``/history/read`` answer's bytes, piece by piece; every method but :meth:`close`
    runs on the reader thread, one call at a time."""

    def __init__(self, spans: list[Span], frm: int, to: int) -> None:
        self.spans = spans
        self.frm, self.to = frm, to
        self.fd = -1
        self.pos = 0

    def next_piece(self) -> bytes | None:
        """The next bytes to send (never empty); None at the end."""
        while self.spans:
            span = self.spans[0]
            if self.fd < 0 and not self._open(span):
                self.spans.pop(0)
                continue
            if self.pos < span.end:
                piece = self._whole(span) if span.whole else self._cut(span)
                if piece:
                    return piece
                if self.pos < span.end:
                    continue  # (blocks outside the range: nothing to send from this read)
            self.spans.pop(0)
            self._close_fd()
        return None

    def _open(self, span: Span) -> bool:
        try:
            self.fd = os.open(span.path, os.O_RDONLY)
        except FileNotFoundError:  # expired since the plan: nothing of it to send
            return False
        if span.walk_end is not None:
            span.end = self._first_block_from(*span.walk_end, span.end)
        if span.walk_start is not None:
            span.start = self._first_block_from(*span.walk_start, span.end)
        self.pos = span.start
        return True

    def _first_block_from(self, block: int, target: int, limit: int) -> int:
        """The first block start at or after byte ``target``, walking from ``block`` (a block
        start at most a sparse step and a block before it); ``limit`` if the file ends first."""
        data = os.pread(self.fd, max(0, target - block) + FRAME.size, block)
        pos = block
        while pos < target and pos < limit:
            at = pos - block
            if at + FRAME.size > len(data):
                return limit
            pos += FRAME.size + FRAME.unpack_from(data, at)[0]
        return min(pos, limit)

    def _whole(self, span: Span) -> bytes:
        data = os.pread(self.fd, min(PIECE, span.end - self.pos), self.pos)
        if not data:  # the file is shorter than its summary says (cut since): stop there
            self.pos = span.end
        self.pos += len(data)
        return data

    def _cut(self, span: Span) -> bytes:
        """The blocks of one pread, those inside the range as they are, those partly inside cut."""
        data = os.pread(self.fd, min(PIECE, span.end - self.pos), self.pos)
        if len(data) >= FRAME.size and FRAME.size + FRAME.unpack_from(data, 0)[0] > len(data):
            # one block larger than a piece: read it whole
            data = os.pread(self.fd, FRAME.size + FRAME.unpack_from(data, 0)[0], self.pos)
        frm, to = self.frm, self.to
        view = memoryview(data)
        parts: list[Any] = []
        at = 0
        while at + HEAD_SIZE + 8 <= len(data):
            length, _, n, delay, lo = _HEAD_TS.unpack_from(data, at)
            nxt = at + FRAME.size + length
            if nxt > len(data):
                break
            hi = lo
            if n > 1:  # (a PUB's block holds one record: its head says all)
                stamps = block_timestamps(data, at, n)
                lo, hi = min(stamps), max(stamps)
            if frm <= lo and hi < to:
                parts.append(view[at:nxt])
            elif hi >= frm and lo < to:
                kept = [r for r in decode_block(data, at) if frm <= r[2] < to]
                parts.append(encode_block([r[0] for r in kept], [r[1] for r in kept],
                                          [r[2] for r in kept], delay))
            at = nxt
        if at == 0:  # a torn tail the summary does not cover: nothing more to read here
            self.pos = span.end
            return b""
        self.pos += at
        return b"".join(parts)

    def _close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def close(self) -> None:
        """Once no call runs any more (the answer ended or the client went away)."""
        self._close_fd()
        self.spans = []
