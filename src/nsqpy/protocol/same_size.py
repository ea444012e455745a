"""Runs of size-prefixed records of one size, taken in blocks: batched parsing for the two
places a broker reads records by the thousand.

MPUB's messages (``[int32 size][body]``) and nsqd's disk queue records
(``[int32 size][int64 timestamp][uint16 attempts][16-byte id][body]``) are both read record by
record: a size, a bounds check and a copy per record in Python -- the largest per-message cost
of publishing and of delivering from disk. Very often every record in a batch has the same size
(one producer's fixed-size records, the benchmarks' payloads). :func:`same_size_run` recognises
that with column checks on the size fields (extended slices, C speed, nothing per record), and
:func:`bodies` / :func:`messages` copy the records out up to 64 per struct unpack
(:mod:`.repeated`).

When the records differ in size, or a size fails a limit, :func:`same_size_run` returns None
and the caller's record-by-record loop reads them, so every error and its position are those
of the general path.
"""

from __future__ import annotations

import struct

from .repeated import RepeatedRecords

_BLOCK = 64
_MIN_RUN = 8  # below this the record-by-record loops are as fast
_MAX_CACHED = 64  # (kind, size) pairs whose unpackers are kept
_unpackers: dict[tuple[str, int], RepeatedRecords] = {}
_unpack_i32 = struct.Struct(">i").unpack_from

#: record payload layouts after the size field: an MPUB body, a disk record's message
_FORMATS = {"body": "4x{}s", "message": "4xqH16s{}s"}
_MESSAGE_HEADER = 26  # timestamp, attempts, id


def same_size_run(buf: bytes | bytearray, pos: int, end: int, want: int, lo: int, hi: int,
                  room: int) -> tuple[int, int] | None:
    """``(size, n)`` when the next ``n`` records at ``pos`` (as many whole ones as are buffered
    before ``end``, at most ``want``, at least a few) all have the first one's size, that size
    is within ``[lo, hi]`` and all ``n`` records fit in ``room`` bytes; None otherwise."""
    if want < _MIN_RUN or end - pos < 4:
        return None
    size = _unpack_i32(buf, pos)[0]
    if size < lo or size > hi:
        return None
    stride = size + 4
    n = min(want, (end - pos) // stride, room // stride)
    if n < _MIN_RUN:
        return None
    stop = pos + n * stride
    for k in range(4):  # each byte of the size field, in every record
        if buf[pos + k:stop:stride] != buf[pos + k:pos + k + 1] * n:
            return None
    return size, n


def _records(kind: str, size: int) -> RepeatedRecords:
    """The unpacker of records of this kind and payload size (up to ``_BLOCK`` per call)."""
    key = (kind, size)
    found = _unpackers.get(key)
    if found is None:
        if len(_unpackers) >= _MAX_CACHED:
            _unpackers.clear()
        one = _FORMATS[kind].format(size if kind == "body" else size - _MESSAGE_HEADER)
        found = _unpackers[key] = RepeatedRecords(one, largest=_BLOCK, order=">")
    return found


def bodies(buf: bytes | bytearray, pos: int, size: int, n: int) -> list[bytes]:
    """The bodies of ``n`` MPUB messages of ``size`` bytes at ``pos``."""
    out: list[bytes] = []
    _records("body", size).unpack_into(out, buf, pos, n)
    return out


def messages(buf: bytes | bytearray, pos: int, size: int, n: int) -> list[tuple]:
    """``n`` disk records of ``size`` bytes at ``pos`` decoded as messages
    ``(id, body, timestamp, attempts)``; ``size`` must be at least the 26-byte header."""
    flat: list = []  # timestamp, attempts, id, body of each record in turn
    _records("message", size).unpack_into(flat, buf, pos, n)
    return list(zip(flat[2::4], flat[3::4], flat[0::4], flat[1::4]))
