"""Client-to-server commands of NSQ's TCP protocol V2: an incremental parser and encoders.

A command is one text line ``NAME[ SP param]*\\n``; IDENTIFY, AUTH, PUB, DPUB and MPUB append a
``[int32 size][size bytes]`` body. The parser checks every advertised size against the limits
*before* waiting for the bytes, so a hostile size cannot make the server buffer it. MPUB's
message count and each message size are checked as they arrive, as upstream reads them.

:meth:`CommandParser.feed` returns complete commands as ``(name, params, body)`` tuples; for
MPUB ``body`` is the list of message bodies. A protocol violation appears in the returned list
as a :class:`~nsqpy.protocol.errors.FatalError` after the commands that preceded it, and the
parser accepts nothing more.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NoReturn, Union

from . import same_size
from .errors import E_BAD_BODY, E_BAD_MESSAGE, E_BAD_PROTOCOL, E_BAD_TOPIC, E_INVALID, FatalError
from .fin_run import match_fin_run
from .names import is_valid_name

MAGIC_V2 = b"  V2"
MAX_LINE_LENGTH = 16 * 1024  # nsqd's bufio reader size; a longer line drops the connection

_I32 = struct.Struct(">i")
_unpack_i32 = _I32.unpack_from

Command = tuple  # (name: bytes, params: list[bytes], body: bytes | list[bytes] | None)
ParseResult = Union[Command, FatalError]

BODY_COMMANDS = frozenset((b"IDENTIFY", b"AUTH", b"PUB", b"DPUB", b"MPUB"))
#: an MPUB's line, parsed on its own before the body (``CommandParser.mpub_head``)
MPUB_HEAD = b"MPUB head"
_MPUB_SIZE_UNREAD = -2


@dataclass(frozen=True)
class Limits:
    """The nsqd options that bound what a client may send."""

    max_msg_size: int = 1048576
    max_body_size: int = 5242880
    max_req_timeout_ms: int = 3600_000  # REQ's clamp
    max_defer_timeout_ms: int = 3600_000  # DPUB's range (--max-defer-timeout, else REQ's)


class LineTooLong(FatalError):
    """The command line did not fit nsqd's read buffer; nsqd drops such a connection silently."""

    def __init__(self) -> None:
        super().__init__(E_INVALID, "failed to read command - line too long")


def go_quote(text: bytes | str) -> str:
    """Render a name as Go's ``%q`` would, for error texts such as ``topic name "x" is not valid``."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _name_ok(raw: bytes) -> bool:
    try:
        return is_valid_name(raw.decode("ascii"))
    except UnicodeDecodeError:
        return False


#: topic names seen valid, raw -> decoded: publishers repeat theirs on every command, and a
#: lone PUB cannot afford the decode and the regex each time (bounded: cleared when full)
_valid_topics: dict[bytes, str] = {}
_VALID_TOPICS_KEPT = 1024


def check_topic(cmd: str, params: list[bytes]) -> str:
    """Validate ``params[1]`` as a topic name for ``cmd``; returns it decoded."""
    topic = params[1]
    known = _valid_topics.get(topic)
    if known is not None:
        return known
    if not _name_ok(topic):
        prefix = "E_BAD_TOPIC " if cmd == "MPUB" else ""  # upstream's MPUB repeats the code
        raise FatalError(E_BAD_TOPIC, f"{prefix}{cmd} topic name {go_quote(topic)} is not valid")
    if len(_valid_topics) >= _VALID_TOPICS_KEPT:
        _valid_topics.clear()
    name = _valid_topics[topic] = topic.decode("ascii")
    return name


_U64 = 1 << 64
_I64_MIN = 1 << 63
MS = 1_000_000  # nanoseconds


BASE10_ERROR = "failed to convert to Base10"  # upstream's parse error, logged as the cause


def byte_to_base10(raw: bytes) -> int:
    """Upstream's ``protocol.ByteToBase10``: ASCII digits only (no sign, no space), the empty
    string is 0, and a value past 64 bits wraps around (Go's uint64 arithmetic); ValueError
    for anything else."""
    n = 0
    for d in raw:
        if not 48 <= d <= 57:
            raise ValueError(raw)
        n = n * 10 + d - 48
    return n % _U64


def as_int64(value: int) -> int:
    """Go's ``int64(u)`` of a uint64: the two's-complement reading."""
    value %= _U64
    return value - _U64 if value >= _I64_MIN else value


def ms_to_duration_ns(ms: int) -> int:
    """Go's ``time.Duration(ms) * time.Millisecond`` for a uint64 ``ms``, wrap-around included."""
    return as_int64(ms * MS)


def arg_text(raw: bytes) -> str:
    """A command argument as Go's ``%s`` prints it: the bytes as they came (undecodable bytes
    survive through ``surrogateescape`` into the error frame)."""
    return raw.decode("utf-8", "surrogateescape")


def pre_body_checks(name: bytes, params: list[bytes], limits: Limits) -> int:
    """Checks nsqd makes before reading a body; returns the max allowed body size."""
    if name == b"PUB" or name == b"MPUB":
        cmd = "PUB" if name == b"PUB" else "MPUB"
        if len(params) < 2:
            raise FatalError(E_INVALID, f"{cmd} insufficient number of parameters")
        check_topic(cmd, params)
        return limits.max_msg_size if name == b"PUB" else limits.max_body_size
    if name == b"DPUB":
        if len(params) < 3:
            raise FatalError(E_INVALID, "DPUB insufficient number of parameters")
        check_topic("DPUB", params)
        try:
            timeout = byte_to_base10(params[2])
        except ValueError:
            raise FatalError(E_INVALID, f"DPUB could not parse timeout {arg_text(params[2])}",
                             BASE10_ERROR) from None
        if not 0 <= ms_to_duration_ns(timeout) <= limits.max_defer_timeout_ms * MS:
            raise FatalError(
                E_INVALID, f"DPUB timeout {timeout} out of range 0-{limits.max_defer_timeout_ms}"
            )
        return limits.max_msg_size
    if name == b"AUTH" and len(params) != 1:
        raise FatalError(E_INVALID, "AUTH invalid number of parameters")
    return limits.max_body_size


def _check_body_size(name: bytes, size: int, limit: int) -> None:
    if 0 < size <= limit:
        return
    cmd = name.decode()
    if name == b"PUB" or name == b"DPUB":
        if size <= 0:
            raise FatalError(E_BAD_MESSAGE, f"{cmd} invalid message body size {size}")
        if size > limit:
            raise FatalError(E_BAD_MESSAGE, f"{cmd} message too big {size} > {limit}")
        return
    if name == b"MPUB":
        if size <= 0:
            raise FatalError(E_BAD_BODY, f"MPUB invalid body size {size}")
        if size > limit:
            raise FatalError(E_BAD_BODY, f"MPUB body too big {size} > {limit}")
        return
    if size <= 0:
        raise FatalError(E_BAD_BODY, f"{cmd} invalid body size {size}")
    if size > limit:
        raise FatalError(E_BAD_BODY, f"{cmd} body too big {size} > {limit}")


def _bad_mpub_size(index: int, size: int, limits: Limits, total: int) -> NoReturn:
    """The error for an MPUB message size that failed its check (kept off the hot loop)."""
    if size <= 0:
        raise FatalError(E_BAD_MESSAGE, f"MPUB invalid message({index}) body size {size}")
    if size > limits.max_msg_size:
        raise FatalError(E_BAD_MESSAGE, f"MPUB message too big {size} > {limits.max_msg_size}")
    raise FatalError(E_BAD_BODY, f"MPUB body too big {total} > {limits.max_body_size}")


class CommandParser:
    """Incremental V2 command parser (after the magic has been consumed).

    Knobs that serve nsqd's connection (they cost nothing per command when unused):

    * ``stop_after_identify``: return right after an IDENTIFY, leaving later bytes unparsed,
      because IDENTIFY may switch the stream to TLS or compression and those bytes then belong
      to the new stream (:meth:`take_buffer` hands them over).
    * ``stop_after_sub``: return right after a SUB, which changes what the lines after it may
      be (IDENTIFY and AUTH are refused from then on, before their bodies are read).
    * ``pre_body_check``: the function that vets a body command's line before its size is read
      (``(name, params, limits) -> max body size``): nsqd's state machine installs its own, which
      refuses a command the connection's state does not allow, as upstream does.
    * ``mpub_head``: an MPUB's line comes out on its own, as ``(MPUB_HEAD, params, None)``,
      before its body size is read, and the command follows once its messages are here. Upstream
      checks MPUB's authorization (and creates its topic) between the two, so nsqd must run that
      check in command order before any error of the body can be reported.
    """

    __slots__ = ("_buf", "_limits", "_pending", "_mpub", "_dead", "stop_after_identify",
                 "stop_after_sub", "pre_body_check", "fin_runs", "mpub_head")

    def __init__(self, limits: Limits | None = None) -> None:
        self._buf = bytearray()
        self._limits = limits or Limits()
        # (name, params, body_size) while waiting for a body that was already size-checked
        self._pending: tuple[bytes, list[bytes], int] | None = None
        # an MPUB being read: [params, message count (-1: not read yet; -2: nor its body size,
        # with mpub_head), bodies so far, bytes so far]
        self._mpub: list | None = None
        self._dead = False
        self.stop_after_identify = False
        self.stop_after_sub = False
        self.fin_runs = False  # nsqd: back-to-back FINs come out as one command (see fin_run)
        self.pre_body_check = pre_body_checks
        self.mpub_head = False

    def take_buffer(self) -> bytes:
        """Hand back unparsed bytes (after IDENTIFY switches the stream to compression)."""
        data = bytes(self._buf)
        self._buf.clear()
        self._pending = None
        self._mpub = None
        return data

    def eof_error(self) -> tuple[FatalError, str] | None:
        """What nsqd reports when the stream ends here: the error and its cause (``EOF`` when
        the field had not started, ``unexpected EOF`` when it was cut), or None when no command
        was under way past its line (a cut command line ends a connection silently upstream)."""
        if self._dead:
            return None
        buf = self._buf
        mpub = self._mpub
        if mpub is not None:
            cause = "unexpected EOF" if buf else "EOF"
            if mpub[1] == _MPUB_SIZE_UNREAD:
                return FatalError(E_BAD_BODY, "MPUB failed to read body size"), cause
            if mpub[1] < 0:
                return FatalError(E_BAD_BODY, "MPUB failed to read message count"), cause
            if len(buf) < 4:
                return FatalError(E_BAD_MESSAGE,
                                  f"MPUB failed to read message({len(mpub[2])}) body size"), cause
            cause = "unexpected EOF" if len(buf) > 4 else "EOF"
            return FatalError(E_BAD_MESSAGE, "MPUB failed to read message body"), cause
        pending = self._pending
        if pending is not None:
            name = pending[0]
            cause = "unexpected EOF" if buf else "EOF"
            if name == b"PUB" or name == b"DPUB":
                return FatalError(E_BAD_MESSAGE, f"{name.decode()} failed to read message body"), cause
            return FatalError(E_BAD_BODY, f"{name.decode()} failed to read body"), cause
        nl = buf.find(b"\n")
        if nl < 0:
            return None
        name = bytes(buf[:nl]).rstrip(b"\r").split(b" ")[0]
        if name not in BODY_COMMANDS:
            return None
        cause = "unexpected EOF" if len(buf) > nl + 1 else "EOF"
        if name == b"PUB" or name == b"DPUB":
            return FatalError(E_BAD_MESSAGE, f"{name.decode()} failed to read message body size"), cause
        return FatalError(E_BAD_BODY, f"{name.decode()} failed to read body size"), cause

    def _feed_mpub(self, buf: bytearray, pos: int, end: int) -> tuple[int, Command | None]:
        """Read an MPUB's count and messages as they arrive, each field checked the moment it
        is readable (upstream answers a bad count or size before the rest of the body comes).
        Upstream reads the fields from the stream without holding them to the declared body
        size; so do we, but never buffer more than --max-body-size for one MPUB (only a client
        that misstates its body size can reach that bound). Returns the new position and the
        whole command once all its messages are here."""
        state = self._mpub
        assert state is not None
        limits = self._limits
        count = state[1]
        if count == _MPUB_SIZE_UNREAD:  # mpub_head: the line went out alone
            if end - pos < 4:
                return pos, None
            _check_body_size(b"MPUB", _unpack_i32(buf, pos)[0], limits.max_body_size)
            pos += 4
            count = state[1] = -1
        if count < 0:
            if end - pos < 4:
                return pos, None
            (count,) = _unpack_i32(buf, pos)
            pos += 4
            if count <= 0 or count > (limits.max_body_size - 4) // 5:
                raise FatalError(E_BAD_BODY, f"MPUB invalid message count {count}")
            state[1] = count
        bodies: list[bytes] = state[2]
        append = bodies.append
        max_msg = limits.max_msg_size
        room = limits.max_body_size - state[3]  # what this MPUB may still hold
        i = len(bodies)
        run = same_size.same_size_run(buf, pos, end, count - i, 1, max_msg, room)
        if run is not None:  # messages of one size, copied out in blocks
            size, n = run
            bodies += same_size.bodies(buf, pos, size, n)
            pos += n * (size + 4)
            room -= n * (size + 4)
            i += n
        # bodies are copied out through a view: one copy each instead of a bytearray slice
        # and then bytes; released before feed() grows the buffer again
        view = memoryview(buf)
        try:
            while i < count:
                if end - pos < 4:
                    break
                size = _unpack_i32(buf, pos)[0]
                if size <= 0 or size > max_msg or size + 4 > room:
                    _bad_mpub_size(i, size, limits, limits.max_body_size - room + 4 + size)
                start = pos + 4
                stop = start + size
                if stop > end:
                    break  # the size is read again with its body
                append(view[start:stop].tobytes())
                pos = stop
                room -= size + 4
                i += 1
        finally:
            view.release()
        state[3] = limits.max_body_size - room
        if i < count:
            return pos, None
        self._mpub = None
        return pos, (b"MPUB", state[0], bodies)

    @property
    def dead(self) -> bool:
        """A fatal error was returned; nothing more is parsed."""
        return self._dead

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete command."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[ParseResult]:
        if self._dead:
            return []
        buf = self._buf
        buf += data
        out: list[ParseResult] = []
        pos = 0
        end = len(buf)
        limits = self._limits
        pre_body = self.pre_body_check
        stop_after_sub = self.stop_after_sub
        try:
            while True:
                if self._mpub is not None:
                    pos, command = self._feed_mpub(buf, pos, end)
                    if command is None:
                        break
                    out.append(command)
                    continue
                pending = self._pending
                if pending is not None:
                    name, params, size = pending
                    if end - pos < size:
                        break
                    body = bytes(buf[pos : pos + size])
                    pos += size
                    self._pending = None
                    out.append((name, params, body))
                    if name == b"IDENTIFY" and self.stop_after_identify:
                        break
                    continue
                if self.fin_runs and buf.startswith(b"FIN ", pos):
                    run = match_fin_run(buf, pos)
                    if run is not None:
                        pos = run[0]
                        out.append(run[1])
                        continue
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    if end - pos > MAX_LINE_LENGTH:
                        raise LineTooLong()
                    break
                if nl - pos > MAX_LINE_LENGTH:
                    raise LineTooLong()
                line_end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
                params = bytes(buf[pos:line_end]).split(b" ")
                name = params[0]
                if name in BODY_COMMANDS:
                    limit = pre_body(name, params, limits)
                    if name == b"MPUB" and self.mpub_head:
                        pos = nl + 1
                        out.append((MPUB_HEAD, params, None))
                        self._mpub = [params, _MPUB_SIZE_UNREAD, [], 4]
                        continue
                    if end - nl - 1 < 4:
                        break  # size not here yet: re-parse this line on the next feed
                    (size,) = _unpack_i32(buf, nl + 1)
                    _check_body_size(name, size, limit)
                    pos = nl + 5
                    if name == b"MPUB":
                        self._mpub = [params, -1, [], 4]
                    else:
                        self._pending = (name, params, size)
                    continue
                pos = nl + 1
                out.append((name, params, None))
                if stop_after_sub and name == b"SUB":
                    break
        except FatalError as err:
            self._dead = True
            out.append(err)
            buf.clear()
            return out
        if pos:
            del buf[:pos]
        return out


BAD_PROTOCOL_PAYLOAD = E_BAD_PROTOCOL.encode()  # upstream's whole error text for a bad magic


# --- encoders (clients) -------------------------------------------------------------------------


def encode_command(name: bytes, *params: bytes | str, body: bytes | None = None) -> bytes:
    """``NAME p1 p2\\n`` plus an optional size-prefixed body."""
    parts = [name]
    for p in params:
        parts.append(p.encode() if isinstance(p, str) else p)
    line = b" ".join(parts) + b"\n"
    if body is None:
        return line
    return line + _I32.pack(len(body)) + body


def encode_mpub(topic: str, bodies: list[bytes]) -> bytes:
    """``MPUB topic`` with the ``[n]([size][body])*`` payload."""
    pack = _I32.pack
    chunks = [pack(len(bodies))]
    for b in bodies:
        chunks.append(pack(len(b)))
        chunks.append(b)
    payload = b"".join(chunks)
    return b"MPUB " + topic.encode() + b"\n" + pack(len(payload)) + payload
