"""snappy (framed) and deflate (raw) stream codecs: round trips with arbitrary cut points, and
compatibility with other implementations of the same formats."""

from __future__ import annotations

import zlib

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.client.compression import DeflateCodec, SnappyCodec

pytestmark = pytest.mark.timeout(30)

payloads = st.lists(st.binary(max_size=3000), min_size=1, max_size=12)


def feed_in_pieces(decode, data: bytes, cuts: list[int]) -> bytes:
    out = []
    points = sorted({c % (len(data) + 1) for c in cuts})
    prev = 0
    for p in points + [len(data)]:
        out.append(decode(data[prev:p]))
        prev = p
    return b"".join(out)


@pytest.mark.parametrize("codec", [SnappyCodec, DeflateCodec])
@settings(max_examples=80, deadline=None)
@given(writes=payloads, cuts=st.lists(st.integers(0, 10**6), max_size=10))
def test_round_trip_split_anywhere(codec, writes, cuts):
    enc, dec = codec(), codec()
    stream = b"".join(enc.encode(w) for w in writes)
    assert feed_in_pieces(dec.decode, stream, cuts) == b"".join(writes)


def test_snappy_stream_is_standard_framing():
    """What we write, another framed-snappy decoder reads (nsqd uses golang/snappy's reader)."""
    enc = SnappyCodec()
    data = b"".join(enc.encode(b"hello world " * n) for n in (1, 100, 10000))
    assert bytes(cramjam.snappy.decompress(data)) == b"".join(b"hello world " * n for n in (1, 100, 10000))
    assert data.startswith(b"\xff\x06\x00\x00sNaPpY")


def test_snappy_reads_foreign_stream_and_detects_corruption():
    stream = bytes(cramjam.snappy.compress(b"abc" * 5000))
    assert SnappyCodec().decode(stream) == b"abc" * 5000
    bad = bytearray(stream)
    bad[15] ^= 0xFF  # inside the first chunk's CRC
    with pytest.raises(ValueError):
        SnappyCodec().decode(bytes(bad))


def test_snappy_python_snappy_interop():
    snappy = pytest.importorskip("snappy")
    comp = snappy.StreamCompressor()
    stream = comp.add_chunk(b"x" * 70000) + comp.add_chunk(b"tail")
    assert SnappyCodec().decode(stream) == b"x" * 70000 + b"tail"
    enc = SnappyCodec()
    ours = enc.encode(b"one") + enc.encode(b"two" * 1000)
    assert snappy.StreamDecompressor().decompress(ours) == b"one" + b"two" * 1000


def test_deflate_is_raw_and_sync_flushed():
    enc = DeflateCodec(level=6)
    first = enc.encode(b"hello")
    # raw deflate (no zlib header) and complete after each write: decodable on its own
    assert zlib.decompressobj(-15).decompress(first) == b"hello"
    assert first.endswith(b"\x00\x00\xff\xff")  # Z_SYNC_FLUSH marker
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    foreign = comp.compress(b"abc") + comp.flush(zlib.Z_SYNC_FLUSH)
    assert DeflateCodec().decode(foreign) == b"abc"
    with pytest.raises(ValueError):
        DeflateCodec().decode(b"\xff\xff\xff\xff")
