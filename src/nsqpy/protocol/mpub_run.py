"""MPUB bodies of one size taken in blocks: the publish path's body parsing, batched.

An MPUB's messages are ``[int32 size][size bytes]`` back to back, so reading them means a size,
a bounds check and a copy per message in Python -- the largest per-message cost of publishing.
Batches from one producer very often hold messages of a single size (fixed-size records, the
benchmarks' payloads). :func:`take_uniform` recognises that case with column checks on the size
fields (extended slices, C speed, no per-message work) and copies 64 bodies out per
``struct.unpack_from`` call.

Anything else -- mixed sizes, a size that fails a limit, too few messages buffered -- returns
None and the caller's message-by-message loop reads it, so every error and its index are those
of the general path.
"""

from __future__ import annotations

import struct

_BLOCK = 64
_MIN_RUN = 8  # below this the general loop is as fast
_MAX_CACHED = 64  # distinct sizes whose block Struct is kept
_blocks: dict[int, struct.Struct] = {}
_unpack_i32 = struct.Struct(">i").unpack_from


def _block(size: int) -> struct.Struct:
    """The Struct that skips a size field and copies a body, ``_BLOCK`` times."""
    block = _blocks.get(size)
    if block is None:
        if len(_blocks) >= _MAX_CACHED:
            _blocks.clear()
        block = _blocks[size] = struct.Struct(f"4x{size}s" * _BLOCK)
    return block


def take_uniform(buf: bytearray, pos: int, end: int, want: int, room: int,
                 max_msg: int) -> tuple[int, list[bytes]] | None:
    """The bodies of the next messages at ``pos`` when every whole one buffered (up to ``want``)
    has the first one's size, and that size passes the limits the general loop checks
    (``0 < size <= max_msg``, all of them within ``room`` bytes): ``(new pos, bodies)``.
    None otherwise -- nothing is consumed then."""
    if want < _MIN_RUN or end - pos < 4:
        return None
    size = _unpack_i32(buf, pos)[0]
    if size <= 0 or size > max_msg:
        return None
    stride = size + 4
    n = min(want, (end - pos) // stride, room // stride)
    if n < _MIN_RUN:
        return None
    stop = pos + n * stride
    for k in range(4):  # each byte of the size field, in every message
        if buf[pos + k:stop:stride] != buf[pos + k:pos + k + 1] * n:
            return None
    bodies: list[bytes] = []
    full = n - n % _BLOCK
    if full:
        unpack_from = _block(size).unpack_from
        span = _BLOCK * stride
        for at in range(pos, pos + full * stride, span):
            bodies += unpack_from(buf, at)
    if full < n:
        view = memoryview(buf)
        try:
            for at in range(pos + full * stride + 4, stop, stride):
                bodies.append(view[at:at + size].tobytes())
        finally:
            view.release()
    return stop, bodies
