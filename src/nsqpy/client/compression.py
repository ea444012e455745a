"""Stream codecs for the IDENTIFY ``snappy`` and ``deflate`` upgrades.

After the upgrade *every* byte in both directions belongs to one long compressed stream, not to
individual frames, so each codec keeps state across calls and must cope with input cut anywhere.

* snappy: the *framed* format of golang/snappy ``NewReader``/``NewWriter`` (chunk = 1 type byte,
  3-byte little-endian length, payload; data chunks start with a masked CRC-32C). nsqd's reader
  verifies the CRCs, so we let cramjam (Rust) build and check chunks rather than hand-roll CRC-32C.
* deflate: raw DEFLATE (no zlib header, ``wbits=-15``) as Go's ``compress/flate``; every write is
  sync-flushed so the peer can decode it without waiting for more.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import cramjam

_SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"


class StreamCodec(Protocol):
    def encode(self, data: bytes) -> bytes: ...

    def decode(self, data: bytes) -> bytes: ...


class SnappyCodec:
    """Framed-snappy encoder and incremental decoder.

    Decoding: we split the buffer at the last complete chunk and give those chunks to
    ``cramjam.snappy.decompress`` in one call (with a stream identifier in front, which the
    format allows to repeat), so CRC checks and decompression run in Rust once per read.
    """

    __slots__ = ("_enc", "_buf")

    def __init__(self) -> None:
        self._enc = cramjam.snappy.Compressor()
        self._buf = bytearray()

    def encode(self, data: bytes) -> bytes:
        self._enc.compress(data)
        return bytes(self._enc.flush())

    def decode(self, data: bytes) -> bytes:
        buf = self._buf
        buf += data
        end = len(buf)
        pos = 0
        while end - pos >= 4:
            size = buf[pos + 1] | (buf[pos + 2] << 8) | (buf[pos + 3] << 16)
            if end - pos - 4 < size:
                break
            pos += 4 + size
        if not pos:
            return b""
        chunks = bytes(buf[:pos])
        del buf[:pos]
        try:
            return bytes(cramjam.snappy.decompress(_SNAPPY_STREAM_ID + chunks))
        except cramjam.DecompressionError as err:
            raise ValueError(f"corrupt snappy stream: {err}") from None


class DeflateCodec:
    """Raw-deflate encoder (sync-flushed per write) and incremental decoder."""

    __slots__ = ("_enc", "_dec")

    def __init__(self, level: int = 6) -> None:
        self._enc = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._dec = zlib.decompressobj(-15)

    def encode(self, data: bytes) -> bytes:
        return self._enc.compress(data) + self._enc.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes) -> bytes:
        try:
            return self._dec.decompress(data)
        except zlib.error as err:
            raise ValueError(f"corrupt deflate stream: {err}") from None
