"""Stream compression that NSQ negotiates in IDENTIFY: snappy (framed format) and raw DEFLATE.

Each codec is sans-I/O: ``compress(bytes) -> bytes`` emits a self-contained flush of everything
given so far, ``decompress(bytes) -> bytes`` accepts the stream in arbitrary pieces.
"""

from __future__ import annotations

import zlib

_SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"
_MAX_SNAPPY_CHUNK = 1 << 24


class CompressionError(Exception):
    """The peer's compressed stream is corrupt."""


class SnappyCodec:
    """Snappy framing format (what golang/snappy's Reader/Writer and python-snappy speak)."""

    def __init__(self) -> None:
        import cramjam  # imported on first use: most servers never negotiate snappy (idle RSS)

        self._snappy = cramjam.snappy
        self._compressor = cramjam.snappy.Compressor()
        self._inbuf = bytearray()

    def compress(self, data: bytes) -> bytes:
        self._compressor.compress(data)
        return bytes(self._compressor.flush())

    def decompress(self, data: bytes) -> bytes:
        buf = self._inbuf
        buf += data
        out: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            chunk_type = buf[pos]
            length = buf[pos + 1] | (buf[pos + 2] << 8) | (buf[pos + 3] << 16)
            if end - pos - 4 < length:
                break
            body = bytes(buf[pos + 4 : pos + 4 + length])
            pos += 4 + length
            if chunk_type == 0x00:  # compressed: 4-byte masked crc32c, then raw snappy
                try:
                    out.append(bytes(self._snappy.decompress_raw(body[4:])))
                except Exception as err:  # cramjam raises its own DecompressionError
                    raise CompressionError(f"snappy: corrupt chunk - {err}") from None
            elif chunk_type == 0x01:  # uncompressed: crc then data
                out.append(body[4:])
            elif chunk_type == 0xFF:
                if body != _SNAPPY_STREAM_ID[4:]:
                    raise CompressionError("snappy: bad stream identifier")
            elif chunk_type <= 0x7F:
                raise CompressionError(f"snappy: unsupported chunk type {chunk_type:#x}")
            # 0x80-0xfe: skippable / padding
        if pos:
            del buf[:pos]
        if len(buf) > _MAX_SNAPPY_CHUNK + 4:
            raise CompressionError("snappy: chunk too large")
        return b"".join(out)


class DeflateCodec:
    """Raw DEFLATE (no zlib header), each compress() ending in a sync flush, as Go's flate.Writer."""

    def __init__(self, level: int = 6) -> None:
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)

    def compress(self, data: bytes) -> bytes:
        c = self._compressor
        return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)

    def decompress(self, data: bytes) -> bytes:
        try:
            return self._decompressor.decompress(data)
        except zlib.error as err:
            raise CompressionError(f"deflate: {err}") from None
