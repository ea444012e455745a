"""nsqlookupd's TCP protocol V1, sans I/O: the server-side parser and the client-side codec.

A client opens with the 4-byte magic ``"  V1"`` and then sends text lines. Each line is trimmed of
(Unicode) white space as Go's ``strings.TrimSpace`` does and split on *single* spaces, so a double
space yields an empty parameter. IDENTIFY is followed by ``[int32 size][JSON]``. Every reply is
``[int32 size][data]`` with no frame type, and every error is fatal: the server sends
``"<CODE> <description>"`` and closes.

:class:`LookupParser` does all of upstream's *protocol* checks in order, including the ones that
depend on whether the client has identified: it tracks that optimistically (an IDENTIFY line was
seen), which is exact because a failing IDENTIFY closes the connection before anything after it
is executed. What it returns is therefore safe to execute in order until the first error.

Bounds that upstream lacks (its ``bufio.Reader`` grows without limit and a negative IDENTIFY size
panics the process): lines are capped at :data:`MAX_LINE_LENGTH` (exceeding it closes the
connection silently, like a read error) and IDENTIFY bodies at ``max_body_size``.
"""

from __future__ import annotations

import struct
from typing import Any, Union

from .gojson import INT, OPTIONAL_STRING, STRING, GoJSONError, decode_struct
from .gojson import dumps as go_json
from .errors import E_BAD_BODY, E_BAD_CHANNEL, E_BAD_PROTOCOL, E_BAD_TOPIC, E_INVALID, FatalError
from .names import is_valid_name

MAGIC_V1 = b"  V1"
MAX_LINE_LENGTH = 16 * 1024
DEFAULT_MAX_BODY_SIZE = 5 * 1024 * 1024

PING = b"PING"
IDENTIFY = b"IDENTIFY"
REGISTER = b"REGISTER"
UNREGISTER = b"UNREGISTER"

OK = b"OK"

_I32 = struct.Struct(">i")
_pack_i32 = _I32.pack
_unpack_i32 = _I32.unpack_from


# --- errors -------------------------------------------------------------------------------------


class V1Error(FatalError):
    """A fatal V1 error. The description may carry raw client bytes (surrogate-escaped), which
    upstream echoes verbatim (``%s`` of a Go string), so the payload restores them byte-exact."""

    #: close without sending anything (what upstream does on a read error)
    silent = False

    @property
    def payload(self) -> bytes:
        return f"{self.code} {self.description}".encode("utf-8", "surrogateescape")


class BadMagic(V1Error):
    """The first 4 bytes were not ``"  V1"``; upstream's whole reply is ``E_BAD_PROTOCOL``."""

    def __init__(self, magic: bytes) -> None:
        super().__init__(E_BAD_PROTOCOL, f"bad protocol magic {_text(magic)!r}")
        self.magic = magic

    @property
    def payload(self) -> bytes:
        return E_BAD_PROTOCOL.encode()


class LineTooLong(V1Error):
    """A command line exceeded :data:`MAX_LINE_LENGTH`: the connection is dropped silently."""

    silent = True

    def __init__(self) -> None:
        super().__init__(E_INVALID, "failed to read command - line too long")


def _text(raw: bytes) -> str:
    """Raw client bytes as a str that round-trips through ``surrogateescape``."""
    return raw.decode("utf-8", "surrogateescape")


# --- Go's strings.TrimSpace ---------------------------------------------------------------------

_ASCII_SPACE = b" \t\n\v\f\r"
_UNICODE_SPACE = tuple(
    chr(c).encode()
    for c in (0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
)


def go_trim_space(line: bytes) -> bytes:
    """``strings.TrimSpace``: strip ASCII and Unicode white space (UTF-8) from both ends."""
    line = line.strip(_ASCII_SPACE)
    if line.isascii():
        return line
    while True:
        before = len(line)
        for ws in _UNICODE_SPACE:
            if line.startswith(ws):
                line = line[len(ws):]
            if line.endswith(ws):
                line = line[: -len(ws)]
        line = line.strip(_ASCII_SPACE)
        if len(line) == before:
            return line


# --- server side: the command parser ------------------------------------------------------------

#: A parsed command: ``(b"PING", None, None)``, ``(b"IDENTIFY", body, None)``,
#: ``(b"REGISTER" | b"UNREGISTER", topic, channel)`` with ``channel == ""`` for a topic.
Command = tuple
ParseResult = Union[Command, V1Error]

_S_MAGIC, _S_LINE, _S_SIZE, _S_BODY, _S_DEAD = range(5)


def _topic_channel(cmd: str, params: list[bytes]) -> tuple[str, str]:
    """Upstream's ``getTopicChan``: params after the command name → validated (topic, channel)."""
    if not params:
        raise V1Error(E_INVALID, f"{cmd} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else b""
    if not (topic.isascii() and is_valid_name(topic.decode("ascii"))):
        raise V1Error(E_BAD_TOPIC, f"{cmd} topic name '{_text(topic)}' is not valid")
    if channel and not (channel.isascii() and is_valid_name(channel.decode("ascii"))):
        raise V1Error(E_BAD_CHANNEL, f"{cmd} channel name '{_text(channel)}' is not valid")
    return topic.decode("ascii"), channel.decode("ascii")


class LookupParser:
    """Incremental parser of what a V1 client sends, magic included.

    :meth:`feed` returns the complete commands in order; a protocol violation appears as a
    :class:`V1Error` after the commands that preceded it, and the parser accepts nothing more.
    :meth:`eof` reports what upstream says when the peer stops sending mid-IDENTIFY.
    """

    __slots__ = ("_buf", "_state", "_body_size", "_identified", "_max_body", "magic")

    def __init__(self, max_body_size: int = DEFAULT_MAX_BODY_SIZE, *, expect_magic: bool = True):
        self._buf = bytearray()
        self._state = _S_MAGIC if expect_magic else _S_LINE
        self._body_size = 0
        self._identified = False
        self._max_body = max_body_size
        #: the 4 magic bytes once received (whether accepted or not)
        self.magic: bytes | None = None if expect_magic else MAGIC_V1

    @property
    def dead(self) -> bool:
        return self._state == _S_DEAD

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[ParseResult]:
        if self._state == _S_DEAD:
            return []
        buf = self._buf
        buf += data
        out: list[ParseResult] = []
        pos = 0
        end = len(buf)
        try:
            while True:
                state = self._state
                if state == _S_LINE:
                    nl = buf.find(b"\n", pos)
                    if nl < 0:
                        if end - pos > MAX_LINE_LENGTH:
                            raise LineTooLong()
                        break
                    if nl - pos > MAX_LINE_LENGTH:
                        raise LineTooLong()
                    line = bytes(buf[pos:nl])
                    pos = nl + 1
                    cmd = self._line(line)
                    if cmd is not None:
                        out.append(cmd)
                elif state == _S_SIZE:
                    if end - pos < 4:
                        break
                    (size,) = _unpack_i32(buf, pos)
                    pos += 4
                    if size < 0:
                        raise V1Error(E_BAD_BODY, f"IDENTIFY invalid body size {size}")
                    if size > self._max_body:
                        raise V1Error(E_BAD_BODY, f"IDENTIFY body too big {size} > {self._max_body}")
                    self._body_size = size
                    self._state = _S_BODY
                elif state == _S_BODY:
                    size = self._body_size
                    if end - pos < size:
                        break
                    out.append((IDENTIFY, bytes(buf[pos : pos + size]), None))
                    pos += size
                    self._state = _S_LINE
                elif state == _S_MAGIC:
                    if end - pos < 4:
                        break
                    magic = bytes(buf[pos : pos + 4])
                    pos += 4
                    self.magic = magic
                    if magic != MAGIC_V1:
                        raise BadMagic(magic)
                    self._state = _S_LINE
                else:  # pragma: no cover - dead is handled above
                    break
        except V1Error as err:
            self._state = _S_DEAD
            buf.clear()
            out.append(err)
            return out
        if pos:
            del buf[:pos]
        return out

    def _line(self, line: bytes) -> Command | None:
        params = go_trim_space(line).split(b" ")
        name = params[0]
        if name == PING:
            return (PING, None, None)
        if name == REGISTER or name == UNREGISTER:
            cmd = name.decode()
            if not self._identified:
                raise V1Error(E_INVALID, "client must IDENTIFY")
            topic, channel = _topic_channel(cmd, params[1:])
            return (name, topic, channel)
        if name == IDENTIFY:
            if self._identified:
                raise V1Error(E_INVALID, "cannot IDENTIFY again")
            self._identified = True
            self._state = _S_SIZE
            return None
        raise V1Error(E_INVALID, f"invalid command {_text(name)}")

    def eof(self) -> list[ParseResult]:
        """The peer closed its side: the error upstream replies with, if it was mid-IDENTIFY."""
        state = self._state
        self._state = _S_DEAD
        self._buf.clear()
        if state == _S_SIZE:
            return [V1Error(E_BAD_BODY, "IDENTIFY failed to read body size")]
        if state == _S_BODY:
            return [V1Error(E_BAD_BODY, "IDENTIFY failed to read body")]
        return []


# --- server side: the IDENTIFY body -------------------------------------------------------------

# upstream's PeerInfo: its JSON field names and Go types
_PEER_INFO = {"remote_address": STRING, "hostname": STRING, "broadcast_address": STRING,
              "tcp_port": INT, "http_port": INT, "version": STRING,
              # carried on purpose beyond v1.3.0 (which ignores the keys): a string is kept, any
              # other value ignored as upstream ignores it
              "topology_zone": OPTIONAL_STRING, "topology_region": OPTIONAL_STRING}
_ZERO_PEER_INFO = {name: 0 if kind == INT else "" for name, kind in _PEER_INFO.items()}


def parse_identify(body: bytes) -> dict[str, Any]:
    """Decode an IDENTIFY body the way Go's ``json.Unmarshal`` fills nsqlookupd's ``PeerInfo``
    (:func:`nsqpy.protocol.gojson.decode_struct`: Go's key folding, ``null`` leaves a field empty,
    unknown keys skipped, a value of the wrong type a decode error); the four required fields
    must then be non-empty/non-zero. Returns every field, ``remote_address`` included (the
    server overwrites it with the peer's address).
    """
    try:
        info = {**_ZERO_PEER_INFO, **decode_struct(body, _PEER_INFO)}
    except GoJSONError:
        raise V1Error(E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
    if not info["broadcast_address"] or not info["tcp_port"] or not info["http_port"] \
            or not info["version"]:
        raise V1Error(E_BAD_BODY, "IDENTIFY missing fields")
    return info


# --- both sides: responses ----------------------------------------------------------------------


def encode_response(data: bytes) -> bytes:
    """One V1 reply: ``[int32 size][data]``."""
    return _pack_i32(len(data)) + data


OK_RESPONSE = encode_response(OK)


class ResponseTooLarge(Exception):
    """A reply announced a size outside ``0..limit`` (nsqd's ``readResponseBounded``)."""


class ResponseDecoder:
    """Incremental decoder of V1 replies for clients (nsqd's registration loop, tests)."""

    __slots__ = ("_buf", "_limit")

    def __init__(self, max_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        self._buf = bytearray()
        self._limit = max_size

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _unpack_i32(buf, pos)
            if size < 0 or size > self._limit:
                raise ResponseTooLarge(
                    f"response body size ({size}) is greater than limit ({self._limit})")
            if end - pos - 4 < size:
                break
            out.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return out


def is_error_response(data: bytes) -> bool:
    """Replies starting ``E_`` are errors (and the server has closed the connection)."""
    return data[:2] == b"E_"


# --- client side: commands ----------------------------------------------------------------------

PING_COMMAND = b"PING\n"


def encode_identify(info: dict[str, Any]) -> bytes:
    """``IDENTIFY\\n[int32 size][JSON]``; the keys sorted, as go-nsq marshals nsqd's map."""
    body = go_json(info, sort_keys=True)
    return b"IDENTIFY\n" + _pack_i32(len(body)) + body


def _topic_command(name: bytes, topic: str, channel: str | None) -> bytes:
    if channel:
        return b"%s %s %s\n" % (name, topic.encode(), channel.encode())
    return b"%s %s\n" % (name, topic.encode())


def encode_register(topic: str, channel: str | None = None) -> bytes:
    """``REGISTER topic[ channel]\\n`` (an empty channel means the topic itself)."""
    return _topic_command(REGISTER, topic, channel)


def encode_unregister(topic: str, channel: str | None = None) -> bytes:
    """``UNREGISTER topic[ channel]\\n``."""
    return _topic_command(UNREGISTER, topic, channel)
