"""The history block (``/history/read``'s framing and the log's) on bytes: encoding, the
splitter under every chunking, and what it refuses."""

from __future__ import annotations

import struct

import pytest

from nsqpy.protocol.history_block import (
    HEAD_SIZE, BlockSplitter, FramingError, block_timestamps, column_offsets, decode_block,
    encode_block,
)

pytestmark = pytest.mark.timeout(60)


def _blocks(n_blocks: int) -> tuple[bytes, list[tuple[bytes, bytes, int]]]:
    """Blocks of 1..7 records, bodies of 0..40 bytes, timestamps going back now and then."""
    stream, recs, k = [], [], 0
    for b in range(n_blocks):
        block = []
        for _ in range(1 + b % 7):
            block.append((b"%016x" % k, bytes([65 + k % 26]) * (k * 7 % 41), 1_700_000_000_000_000_000 + 1000 * k * (-1) ** k))
            k += 1
        stream.append(encode_block([r[0] for r in block], [r[1] for r in block], [r[2] for r in block], b % 3))
        recs += block
    return b"".join(stream), recs


def test_a_block_is_its_columns() -> None:
    block = encode_block([b"a" * 16, b"b" * 16], [b"xyz", b""], [5, -3], 250)
    length, crc, n, delay = struct.unpack_from(">IIII", block)
    assert (length, n, delay) == (len(block) - 8, 2, 250)
    ts_at, sizes_at, ids_at, bodies_at = column_offsets(0, n)
    assert struct.unpack_from(">2q", block, ts_at) == (5, -3)
    assert struct.unpack_from(">2I", block, sizes_at) == (3, 0)
    assert block[ids_at:bodies_at] == b"a" * 16 + b"b" * 16 and block[bodies_at:] == b"xyz"
    assert list(block_timestamps(block, 0, n)) == [5, -3]
    assert decode_block(block, 0) == [(b"a" * 16, b"xyz", 5), (b"b" * 16, b"", -3)]
    import zlib
    assert crc == zlib.crc32(block[8:])


def test_splitter_any_chunking() -> None:
    stream, recs = _blocks(60)
    for size in (1, 3, 8, 15, 16, 17, 61, 1000, len(stream)):
        sp = BlockSplitter()
        got = []
        for at in range(0, len(stream), size):
            sp.feed(stream[at:at + size])
            got += sp.records()
        sp.close()
        assert got == recs
        assert sp.blocks == 60 and sp.bytes == len(stream)


def test_splitter_positions_and_truncation() -> None:
    one = encode_block([b"0" * 16], [b"xyz"], [5])
    two = encode_block([b"1" * 16, b"2" * 16], [b"a", b"bc"], [6, 7])
    sp = BlockSplitter()
    sp.feed(one + two + one[:HEAD_SIZE + 2])
    buf, starts, counts, stop = sp.take()
    assert starts == [0, len(one)] and counts == [1, 2] and stop == len(one) + len(two)
    assert bytes(buf[:stop]) == one + two
    assert sp.pending == HEAD_SIZE + 2
    with pytest.raises(FramingError, match="ended inside a block"):
        sp.close()


def test_splitter_refuses_what_is_not_a_block() -> None:
    good = encode_block([b"0" * 16], [b"xyz"], [5])
    for bad, what in ((struct.pack(">IIII", 8, 0, 0, 0), "holding 0 records"),  # no records
                      (struct.pack(">IIII", 30, 0, 2, 0) + b"x" * 22, "holding 2 records"),  # columns overrun it
                      (struct.pack(">IIII", 1 << 31, 0, 1, 0), "block of 2147483648 bytes")):
        sp = BlockSplitter()
        sp.feed(good + bad)
        with pytest.raises(FramingError, match=f"{what}.* at offset {len(good)}: not a history block"):
            sp.take()


def test_decode_refuses_sizes_that_do_not_fill_the_block() -> None:
    block = bytearray(encode_block([b"0" * 16], [b"xyz"], [5]))
    struct.pack_into(">I", block, column_offsets(0, 1)[1], 2)  # says 2 bytes, holds 3
    with pytest.raises(FramingError, match="body sizes do not fill it"):
        decode_block(block, 0)
