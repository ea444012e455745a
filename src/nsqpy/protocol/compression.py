"""Stream compression that NSQ negotiates in IDENTIFY: snappy (framed format) and raw DEFLATE.

Each codec is sans-I/O: ``compress(bytes) -> bytes`` emits a self-contained flush of everything
given so far, ``decompress(bytes) -> bytes`` accepts the stream in arbitrary pieces.

Both decoders are safe against hostile peers: snappy chunks are held to the framing format's
limits (as golang/snappy's reader does: at most 64 KiB decoded per chunk, checked from the block
header before decoding), and a :class:`DeflateCodec` made with ``max_output`` returns at most that
many bytes per call, keeping the rest of its input (``pending``) for the next call, so a small
"deflate bomb" cannot be inflated into memory at once.
"""

from __future__ import annotations

import zlib

_SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"
_MAX_BLOCK = 65536  # decoded bytes per chunk (framing format; golang/snappy maxBlockSize)
_MAX_ENCODED_CHUNK = 76490 + 4  # golang/snappy maxEncodedLenOfMaxBlockSize + the checksum


def _snappy_decoded_len(block: bytes) -> int:
    """The uvarint that starts a raw snappy block (its decoded length); -1 if malformed."""
    value = shift = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
    return -1


class CompressionError(Exception):
    """The peer's compressed stream is corrupt."""


class SnappyCodec:
    """Snappy framing format (what golang/snappy's Reader/Writer and python-snappy speak)."""

    def __init__(self) -> None:
        import cramjam  # imported on first use: most servers never negotiate snappy (idle RSS)

        self._snappy = cramjam.snappy
        self._compressor = cramjam.snappy.Compressor()
        self._inbuf = bytearray()
        self._skip = 0  # bytes of a skippable chunk still to discard

    def compress(self, data: bytes) -> bytes:
        self._compressor.compress(data)
        return bytes(self._compressor.flush())

    def decompress(self, data: bytes) -> bytes:
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return b""
            data = data[self._skip:]
            self._skip = 0
        buf = self._inbuf
        buf += data
        out: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            chunk_type = buf[pos]
            length = buf[pos + 1] | (buf[pos + 2] << 8) | (buf[pos + 3] << 16)
            if 0x80 <= chunk_type <= 0xFE:  # skippable / padding: discarded as it streams in
                if end - pos - 4 < length:
                    self._skip = length - (end - pos - 4)
                    pos = end
                    break
                pos += 4 + length
                continue
            if length > _MAX_ENCODED_CHUNK:
                raise CompressionError(f"snappy: chunk too large ({length} bytes)")
            if end - pos - 4 < length:
                break
            body = bytes(buf[pos + 4 : pos + 4 + length])
            pos += 4 + length
            if chunk_type == 0x00:  # compressed: 4-byte masked crc32c, then raw snappy
                if length < 5 or not 0 <= _snappy_decoded_len(body[4:]) <= _MAX_BLOCK:
                    raise CompressionError("snappy: corrupt chunk - bad decoded length")
                try:
                    out.append(bytes(self._snappy.decompress_raw(body[4:])))
                except Exception as err:  # cramjam raises its own DecompressionError
                    raise CompressionError(f"snappy: corrupt chunk - {err}") from None
            elif chunk_type == 0x01:  # uncompressed: crc then data
                if not 4 <= length <= _MAX_BLOCK + 4:
                    raise CompressionError("snappy: corrupt uncompressed chunk")
                out.append(body[4:])
            elif chunk_type == 0xFF:
                if body != _SNAPPY_STREAM_ID[4:]:
                    raise CompressionError("snappy: bad stream identifier")
            else:  # 0x02-0x7f: reserved unskippable
                raise CompressionError(f"snappy: unsupported chunk type {chunk_type:#x}")
        if pos:
            del buf[:pos]
        return b"".join(out)


class DeflateCodec:
    """Raw DEFLATE (no zlib header), each compress() ending in a sync flush, as Go's flate.Writer.

    With ``max_output`` each :meth:`decompress` returns at most that many bytes; while
    :attr:`pending` is true, call it again (with new data or ``b""``) for the rest.
    """

    def __init__(self, level: int = 6, max_output: int = 0) -> None:
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)
        self._max_output = max_output
        self._tail = b""
        self.pending = False

    def compress(self, data: bytes) -> bytes:
        c = self._compressor
        return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)

    def decompress(self, data: bytes) -> bytes:
        d = self._decompressor
        try:
            if not self._max_output:
                return d.decompress(data)
            if self._tail:
                data = self._tail + data
            out = d.decompress(data, self._max_output)
        except zlib.error as err:
            raise CompressionError(f"deflate: {err}") from None
        self._tail = d.unconsumed_tail
        # a full answer may leave output inside zlib even when all input was taken
        self.pending = bool(self._tail) or len(out) >= self._max_output
        return out
