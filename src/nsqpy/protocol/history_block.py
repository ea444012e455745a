"""The history's block: one publish command as a topic's log stores it, and as ``GET
/history/read`` sends it (docs/history.md §2 and §6). Sans I/O.

A block, big-endian::

    [u32 length][u32 crc32 of the length bytes that follow]
    [u32 n][u32 DPUB delay ms]                 \\
    n x i64 timestamps (ns)                     |  ``length`` bytes, CRC'd
    n x u32 body sizes                          |
    n x 16-byte ids                             |
    the n bodies, back to back                 /

The first 16 bytes say where every column is (:func:`column_offsets`), so a reader takes a
block's timestamps, sizes, ids and bodies as four slices, whatever n is: no step per record.
``/history/read`` streams blocks back to back as they lie in the segment files; only a block
with records outside the asked range is sent cut (a new block of the records inside it, its CRC
made again). :class:`BlockSplitter` finds the blocks in a stream as it arrives; the columns are
then cut by numpy (``nsqpy.spark.arrow``) or, for callers that want one object per record, by
:func:`decode_block`.
"""

from __future__ import annotations

import struct
import sys
from array import array
from itertools import accumulate
from typing import Sequence
from zlib import crc32

#: ``length``, ``crc32``, ``n``, ``delay_ms``: a block's first 16 bytes
HEAD = struct.Struct(">IIII")
HEAD_SIZE = HEAD.size
#: the part of the head the CRC does not cover
FRAME = struct.Struct(">II")
#: bytes per record in the fixed-width columns: timestamp 8, size 4, id 16
FIXED = 28
ID_SIZE = 16
#: the largest block a reader accepts (nsqd's --max-body-size is far below)
MAX_BLOCK = 1 << 30
#: ``Content-Type`` of ``/history/read``: a reader refuses any other framing by its name
CONTENT_TYPE = "application/vnd.nsqpy.history-blocks"


class FramingError(ValueError):
    """The stream is not a run of history blocks (or was cut inside one)."""


def column_offsets(start: int, n: int) -> tuple[int, int, int, int]:
    """Where the timestamps, sizes, ids and bodies of the block at ``start`` begin."""
    ts = start + HEAD_SIZE
    return ts, ts + 8 * n, ts + 12 * n, ts + FIXED * n


def encode_block(ids: Sequence[bytes], bodies: Sequence[bytes], timestamps: Sequence[int],
                 delay_ms: int = 0) -> bytes:
    """One block of these records (the columns made in C by one pack or join each)."""
    n = len(ids)
    columns = b"".join((struct.pack(f">II{n}q{n}I", n, delay_ms, *timestamps, *map(len, bodies)),
                        *ids, *bodies))
    return FRAME.pack(len(columns), crc32(columns)) + columns


def block_timestamps(buf: bytes | bytearray | memoryview, start: int, n: int) -> array:
    """The timestamps of the block at ``start`` (an ``array('q')``, made in C)."""
    out = array("q")
    at = start + HEAD_SIZE
    out.frombytes(buf[at:at + 8 * n])
    if sys.byteorder == "little":
        out.byteswap()
    return out


def decode_block(buf: bytes | bytearray | memoryview, start: int) -> list[tuple[bytes, bytes, int]]:
    """The records of the block at ``start`` as ``(id, body, timestamp)``: for readers that
    want an object per record (the tools print each message)."""
    length, _, n, _ = HEAD.unpack_from(buf, start)
    ts_at, sizes_at, ids_at, bodies_at = column_offsets(start, n)
    view = memoryview(buf)
    sizes = struct.unpack_from(f">{n}I", buf, sizes_at)
    ends = list(accumulate(sizes, initial=bodies_at))
    if ends[-1] != start + FRAME.size + length:
        raise FramingError(f"block at offset {start}: its body sizes do not fill it")
    ids = [bytes(view[at:at + ID_SIZE]) for at in range(ids_at, bodies_at, ID_SIZE)]
    bodies = [bytes(view[a:b]) for a, b in zip(ends, ends[1:])]
    return list(zip(ids, bodies, block_timestamps(buf, start, n)))


class BlockSplitter:
    """Sans-I/O: feed the bytes of a ``/history/read`` answer as they come, take whole blocks.

    :meth:`take` returns the buffer and where each complete block starts (and its record count),
    keeping a partial block for the next feed; the one loop per block here is the sequential
    part of reading (each length says where the next block starts), everything per record is
    left to the caller's column code. The pieces fed are joined once, when :meth:`take` has a
    whole block to give (a growing buffer costs a copy per growth). :meth:`close` raises
    FramingError if the stream ended inside a block."""

    def __init__(self) -> None:
        self._pieces: list[bytes | bytearray | memoryview] = []
        self._held = 0
        self._need = HEAD_SIZE  # bytes that must be held before a block can be whole
        self.blocks = 0
        self.bytes = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._pieces.append(data)
        self._held += len(data)
        self.bytes += len(data)

    @property
    def pending(self) -> int:
        """Bytes held that do not make a whole block yet (or were not taken)."""
        return self._held

    def take(self) -> tuple[bytes, list[int], list[int], int]:
        """``(buffer, starts, counts, stop)``: block i starts at ``starts[i]`` and holds
        ``counts[i]`` records; the last one ends at ``stop``."""
        starts: list[int] = []
        counts: list[int] = []
        if self._held < self._need:
            return b"", starts, counts, 0
        buf = self._pieces[0] if len(self._pieces) == 1 else b"".join(self._pieces)
        end = len(buf)
        unpack = HEAD.unpack_from
        pos = 0
        need = HEAD_SIZE
        while pos + HEAD_SIZE <= end:
            length, _, n, _ = unpack(buf, pos)
            if length > MAX_BLOCK or not n or length < FRAME.size + FIXED * n:
                raise FramingError(f"block of {length} bytes holding {n} records at offset "
                                   f"{self.bytes - end + pos}: not a history block")
            nxt = pos + FRAME.size + length
            if nxt > end:
                need = nxt - pos
                break
            starts.append(pos)
            counts.append(n)
            pos = nxt
        self.blocks += len(starts)
        self._pieces = [] if pos == end else [memoryview(buf)[pos:]]
        self._held, self._need = end - pos, need
        return buf, starts, counts, pos

    def records(self) -> list[tuple[bytes, bytes, int]]:
        """The records of every complete block so far, ``(id, body, timestamp)`` each."""
        buf, starts, _, _ = self.take()
        out: list[tuple[bytes, bytes, int]] = []
        for start in starts:
            out += decode_block(buf, start)
        return out

    def close(self) -> None:
        if self._held:
            raise FramingError(f"history stream ended inside a block ({self._held} bytes left)")

