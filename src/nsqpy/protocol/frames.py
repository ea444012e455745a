"""Server-to-client frames: ``[int32 size][int32 frame_type][data]`` with ``size = 4 + len(data)``.

Encoding is what nsqd needs; :class:`FrameDecoder` is what clients (ours and the tests) need.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

FRAME_TYPE_RESPONSE = 0
FRAME_TYPE_ERROR = 1
FRAME_TYPE_MESSAGE = 2

HEARTBEAT = b"_heartbeat_"
OK = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"

_HEADER = struct.Struct(">ii")
_unpack_header = _HEADER.unpack_from
_pack_header = _HEADER.pack


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """One complete frame."""
    return _pack_header(len(data) + 4, frame_type) + data


def encode_response(data: bytes) -> bytes:
    return _pack_header(len(data) + 4, FRAME_TYPE_RESPONSE) + data


def encode_error(data: bytes) -> bytes:
    return _pack_header(len(data) + 4, FRAME_TYPE_ERROR) + data


OK_FRAME = encode_response(OK)
HEARTBEAT_FRAME = encode_response(HEARTBEAT)
CLOSE_WAIT_FRAME = encode_response(CLOSE_WAIT)


class Frame(NamedTuple):
    frame_type: int
    data: bytes


class FrameTooLarge(Exception):
    """A frame announced a size beyond the decoder's limit."""


class FrameDecoder:
    """Incremental decoder of server frames for clients: feed bytes, get complete frames."""

    def __init__(self, max_frame_size: int = 0) -> None:
        self._buf = bytearray()
        self._max = max_frame_size

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        end = len(buf)
        while end - pos >= 8:
            size, frame_type = _unpack_header(buf, pos)
            if size < 4 or (self._max and size > self._max):
                raise FrameTooLarge(f"bad frame size {size}")
            if end - pos - 4 < size:
                break
            frames.append(Frame(frame_type, bytes(buf[pos + 8 : pos + 4 + size])))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames
