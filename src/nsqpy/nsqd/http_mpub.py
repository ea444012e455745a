"""``POST /mpub`` bodies read as they stream in, as upstream's ``doMPUB`` reads them.

Both readers are :class:`~nsqpy.httpserver.BodyReader`\\ s: the connection feeds them each piece
of the body as it arrives and they answer as soon as upstream would, so neither a refused body
nor an accepted one is held longer than it must be:

* :class:`TextMpub` — one message per ``\\n``-terminated line, empty lines skipped, over the first
  ``--max-body-size`` + 1 bytes (Go's ``LimitReader``): a line longer than ``--max-msg-size`` is
  ``MSG_TOO_BIG`` when it ends, reaching the extra byte is ``BODY_TOO_BIG`` (checked first for
  the block that reaches it, as upstream's loop does);
* :class:`BinaryMpub` — ``[int32 n]`` then n × ``[int32 size][bytes]``: the count and each size
  are checked when their four bytes are in, before the bytes they announce are awaited; once n
  messages are read the answer goes (trailing bytes are left unread, as upstream leaves them).
  Upstream bounds this body by its Content-Length only (a chunked one by the count); so do we.

Errors are upstream's: ``BAD_BODY`` / ``BAD_MESSAGE`` (the MPUB codes without ``E_``) and the
size errors, all 413. A complete body goes to ``publish(topic, bodies)``, whose answer (or
awaitable answer) is the request's.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from ..common.http_api import v1_error
from ..protocol import same_size

#: ``publish(topic, bodies)``: the answer to a whole body
Publish = Callable[[Any, list[bytes]], Any]

_unpack_i32 = struct.Struct(">i").unpack_from
#: the binary reader's "no bound but the count" for the same-size fast path
_UNBOUNDED = 1 << 62


class TextMpub:
    """Text ``/mpub``: lines within ``max_body + 1`` bytes.

    With ``publish_whole``, a body no longer than a message (which can hold no line too long,
    and is not answered before its end) goes to it as it came, unsplit:
    ``publish_whole(topic, body)``. Its pieces are held back for that until one more would
    make it longer (they are then read as any others: nothing could have been answered on
    them anyway) or the body ends."""

    __slots__ = ("publish", "topic", "max_msg", "room", "bodies", "partial", "partial_len",
                 "publish_whole", "held", "held_len")

    def __init__(self, publish: Publish, topic: Any, max_msg: int, max_body: int,
                 publish_whole: Callable[[Any, bytes], Any] | None = None) -> None:
        self.publish = publish
        self.topic = topic
        self.max_msg = max_msg
        self.room = max_body + 1  # bytes left before Go's LimitReader stops
        self.bodies: list[bytes] = []
        self.partial: list[bytes] = []  # the line begun (dropped once it is too long anyway)
        self.partial_len = 0
        self.publish_whole = publish_whole
        # the pieces so far, while the body may still be published whole (None: it cannot)
        self.held: list[bytes] | None = [] if publish_whole is not None else None
        self.held_len = 0

    def feed(self, chunk: bytes) -> Any:
        held = self.held
        if held is not None:
            size = self.held_len + len(chunk)
            if size <= self.max_msg and size < self.room:
                held.append(chunk)
                self.held_len = size
                return None
            self.held = None  # too long to be published whole: read as it came
            for piece in held:
                self._feed(piece)
        return self._feed(chunk)

    def _feed(self, chunk: bytes) -> Any:
        last = len(chunk) >= self.room  # this piece reaches the limit's extra byte
        if last:
            chunk = chunk[:self.room]
        self.room -= len(chunk)
        lines = chunk.split(b"\n")
        if len(lines) > 1:
            first = lines[0]
            if self.partial_len:
                if self.partial_len + len(first) > self.max_msg:
                    first = None  # too long: its bytes are not needed
                else:
                    self.partial.append(first)
                    first = b"".join(self.partial)
                self.partial = []
            complete = lines[:-1]
            if last and not lines[-1]:
                complete.pop()  # the line ending on the extra byte: BODY_TOO_BIG, below
            max_msg = self.max_msg
            if complete:
                if first is None or len(first) > max_msg:
                    return v1_error(413, "MSG_TOO_BIG")
                complete[0] = first
                # a piece no longer than a message holds no line too long (the usual case)
                if len(chunk) > max_msg and max(map(len, complete)) > max_msg:
                    return v1_error(413, "MSG_TOO_BIG")
                self.bodies += filter(None, complete)
            tail = lines[-1]
            self.partial_len = len(tail)
            if tail and not last and self.partial_len <= max_msg:
                self.partial.append(tail)
        else:
            self.partial_len += len(chunk)
            if self.partial_len <= self.max_msg:
                self.partial.append(chunk)
            elif self.partial:
                self.partial = []
        if last:
            return v1_error(413, "BODY_TOO_BIG")
        return None

    def end(self) -> Any:
        held = self.held
        if held:
            self.held = None
            body = held[0] if len(held) == 1 else b"".join(held)
            return self.publish_whole(self.topic, body)  # type: ignore[misc]
        if self.partial_len:  # the last line, without its newline
            if self.partial_len > self.max_msg:
                return v1_error(413, "MSG_TOO_BIG")
            self.bodies.append(b"".join(self.partial))
        return self.publish(self.topic, self.bodies)

    def fail(self) -> None:
        self.bodies = []
        self.held = None


class BinaryMpub:
    """Binary ``/mpub``: a count, then size-prefixed messages."""

    __slots__ = ("publish", "topic", "max_msg", "max_count", "count", "bodies", "buf")

    def __init__(self, publish: Publish, topic: Any, max_msg: int, max_body: int) -> None:
        self.publish = publish
        self.topic = topic
        self.max_msg = max_msg
        self.max_count = (max_body - 4) // 5  # 4 for the count, 5 for a size and one byte
        self.count = -1
        self.bodies: list[bytes] = []
        #: what is left of the pieces so far (less than one field or message), grown in place
        self.buf: bytearray | None = None

    def feed(self, chunk: bytes) -> Any:
        buf = self.buf
        if buf is not None:
            buf += chunk
            data: bytes | bytearray = buf
        else:
            data = chunk  # the common case: parsed where it arrived
        end = len(data)
        pos = 0
        count = self.count
        if count < 0:
            if end < 4:
                self._keep(data, 0)
                return None
            count = self.count = _unpack_i32(data, 0)[0]
            pos = 4
            if count <= 0 or count > self.max_count:
                return v1_error(413, "BAD_BODY")  # MPUB invalid message count
        bodies = self.bodies
        max_msg = self.max_msg
        i = len(bodies)
        run = same_size.same_size_run(data, pos, end, count - i, 1, max_msg, _UNBOUNDED)
        if run is not None:  # messages of one size, copied out in blocks
            size, n = run
            bodies += same_size.bodies(data, pos, size, n)
            pos += n * (size + 4)
            i += n
        while i < count and end - pos >= 4:
            size = _unpack_i32(data, pos)[0]
            if size <= 0 or size > max_msg:
                return v1_error(413, "BAD_MESSAGE")  # invalid message body size / too big
            stop = pos + 4 + size
            if stop > end:
                break  # the size is read again with its body
            body = data[pos + 4:stop]
            bodies.append(body if type(body) is bytes else bytes(body))
            pos = stop
            i += 1
        if i == count:
            self.buf = None
            return self.publish(self.topic, bodies)
        self._keep(data, pos)
        return None

    def _keep(self, data: bytes | bytearray, pos: int) -> None:
        if data is self.buf:
            del data[:pos]  # type: ignore[arg-type]
        else:
            self.buf = bytearray(data[pos:])

    def end(self) -> Any:
        # the body ended before the count, or before a message, was complete
        return v1_error(413, "BAD_BODY" if self.count < 0 else "BAD_MESSAGE")

    def fail(self) -> None:
        self.bodies = []
