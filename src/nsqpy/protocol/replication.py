"""The nsqd-to-nsqd replication link, sans I/O: records, batches and the link's framing.

Only nodes started with ``--replicate-to``/``--accept-replicas`` ever see these bytes (see
docs/replication.md). The origin opens an ordinary V2 connection to its peer and sends
``RSUB <origin-address> <incarnation-hex> <origin-http-port>\\n``; once the peer answers ``OK``
the connection carries only:

* ``RPUB <seq>\\n[u32 size][records]``: a batch, answered ``OK <seq>`` (a response frame) once the
  peer has it in its replica store; acks are cumulative;
* ``RFIN <seq>\\n[u32 size][records]``: a batch without messages (FINs, channel events,
  keep-alives): stored but not answered, so the common consume path costs the peer no write back.

A batch is a concatenation of records, each ``[u8 kind][fields]``; names are ``[u8 len][ascii]``.
The same record bytes are what the peer appends to its replica log, so one codec serves the wire
and the disk.
"""

from __future__ import annotations

import struct
from typing import Iterable, NamedTuple, Union

# record kinds
MSG = 1         # a message published on the origin
FIN = 2         # ids FINished on one channel
CHAN_ADD = 3    # a channel was created
CHAN_DEL = 4    # a channel was deleted (or emptied: DEL then ADD)
PUMPED = 5      # topic-held messages were handed to the topic's current channels
TOPIC_DEL = 6   # a topic was deleted (or emptied of its topic-held messages)
SYNC = 7        # the full channel map (sent at link start; heads every replica log segment)
ATTEMPTS = 8    # a message's delivery attempts (REQ / timeout), so adoption keeps them
TOPIC_EMPTY = 9  # the topic's held messages were dropped (/topic/empty)
RESHIP_BEGIN = 10  # the origin re-ships everything it holds from here...
RESHIP_END = 11    # ...to here: what the peer holds and was not re-shipped, the origin lost

# how a MSG record's owed channel set is known
OWED_CHANNELS = 0  # the topic's channels at this point of the stream (the common case)
OWED_HELD = 1      # queued at the topic: owed by whichever channels exist when PUMPED
OWED_LIST = 2      # an explicit list follows (compaction copies, adoption state)

MAX_BATCH = 64 << 20  # a batch larger than this is a protocol error

_MSG_HEAD = struct.Struct(">16sqHqB")  # after the topic: id, ts, attempts, due_ns, owed mode
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_pack_u32 = _U32.pack
_unpack_u32 = _U32.unpack_from


class ReplicationError(Exception):
    """Malformed replication bytes: the link is dropped (the log is truncated there)."""


class Msg(NamedTuple):
    topic: str
    id: bytes
    timestamp: int
    attempts: int
    due_ns: int  # unix ns; 0 = not deferred
    owed: Union[int, frozenset]  # OWED_CHANNELS, OWED_HELD, or the explicit channel set
    body: bytes


class Fin(NamedTuple):
    topic: str
    channel: str
    ids: list


class ChanEvent(NamedTuple):
    kind: int  # CHAN_ADD or CHAN_DEL
    topic: str
    channel: str


class Pumped(NamedTuple):
    topic: str
    ids: list


class TopicDel(NamedTuple):
    topic: str
    held_only: bool = False  # TOPIC_EMPTY: only the messages still held at the topic


class Sync(NamedTuple):
    channels: dict  # topic -> frozenset of channel names


class Marker(NamedTuple):
    kind: int  # RESHIP_BEGIN or RESHIP_END


class Attempts(NamedTuple):
    topic: str
    id: bytes
    attempts: int


Record = Union[Msg, Fin, ChanEvent, Pumped, TopicDel, Sync, Attempts, Marker]


def _name(s: str) -> bytes:
    raw = s.encode("ascii")
    if not 0 < len(raw) < 256:
        raise ValueError(f"bad name {s!r}")
    return bytes((len(raw),)) + raw


# --- encoders --------------------------------------------------------------------------------

_MSG_HEAD_SIZE = struct.Struct(">16sqHqBI")  # _MSG_HEAD and the body's size, in one pack


def enc_msgs(topic: str, msgs: Iterable[tuple], due_ns: int, held: bool) -> bytes:
    """MSG records of many ``(id, body, timestamp, attempts)`` messages of one topic, the
    topic's bytes and the owed mode computed once (the origin's publish path): for each,
    kind, topic, then id, timestamp, attempts, due time, mode and body size in one pack."""
    prefix = b"\x01" + _name(topic)
    mode = OWED_HELD if held else OWED_CHANNELS
    pack = _MSG_HEAD_SIZE.pack
    parts: list[bytes] = []
    extend = parts.extend
    for mid, body, ts, attempts in msgs:
        extend((prefix, pack(mid, ts, attempts & 0xFFFF, due_ns, mode, len(body)), body))
    return b"".join(parts)


def enc_msg(topic: str, mid: bytes, ts: int, attempts: int, due_ns: int, held: bool,
            body: bytes) -> bytes:
    """One MSG record (:func:`enc_msgs` of one message)."""
    return enc_msgs(topic, ((mid, body, ts, attempts),), due_ns, held)


def enc_msg_owed(topic: str, mid: bytes, ts: int, attempts: int, due_ns: int,
                 owed: Iterable[str], body: bytes) -> bytes:
    """A MSG whose owed channels are given explicitly (compaction keeps the current state)."""
    names = sorted(owed)
    return b"".join((b"\x01", _name(topic),
                     _MSG_HEAD.pack(mid, ts, attempts & 0xFFFF, due_ns, OWED_LIST),
                     _U16.pack(len(names)), *map(_name, names),
                     _pack_u32(len(body)), body))


def enc_fin(topic: str, channel: str, ids: list) -> bytes:
    return b"".join((b"\x02", _name(topic), _name(channel), _pack_u32(len(ids)), *ids))


def enc_chan(kind: int, topic: str, channel: str) -> bytes:
    return bytes((kind,)) + _name(topic) + _name(channel)


def enc_pumped(topic: str, ids: list) -> bytes:
    return b"".join((b"\x05", _name(topic), _pack_u32(len(ids)), *ids))


def enc_topic_del(topic: str, held_only: bool = False) -> bytes:
    return (b"\x09" if held_only else b"\x06") + _name(topic)


def enc_sync(channels: dict) -> bytes:
    parts = [b"\x07", _pack_u32(len(channels))]
    for topic in sorted(channels):
        names = sorted(channels[topic])
        parts += [_name(topic), _U16.pack(len(names)), *map(_name, names)]
    return b"".join(parts)


def enc_marker(kind: int) -> bytes:
    return bytes((kind,))


def enc_attempts(topic: str, mid: bytes, attempts: int) -> bytes:
    return b"\x08" + _name(topic) + mid + _U16.pack(attempts & 0xFFFF)


# --- decoder ---------------------------------------------------------------------------------

class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise ReplicationError("record truncated")
        out = bytes(self.buf[self.pos:end])
        self.pos = end
        return out

    def name(self) -> str:
        n = self.take(1)[0]
        if n == 0:
            raise ReplicationError("empty name")
        try:
            return self.take(n).decode("ascii")
        except UnicodeDecodeError:
            raise ReplicationError("non-ascii name") from None

    def u32(self) -> int:
        return _unpack_u32(self.take(4))[0]

    def u16(self) -> int:
        return _U16.unpack(self.take(2))[0]

    def ids(self) -> list:
        n = self.u32()
        if n * 16 > len(self.buf) - self.pos:
            raise ReplicationError("id list truncated")
        raw = self.take(16 * n)
        return [raw[i:i + 16] for i in range(0, len(raw), 16)]

    def names(self) -> frozenset:
        return frozenset(self.name() for _ in range(self.u16()))


def decode_records(buf: bytes | memoryview) -> list[Record]:
    """Every record of a batch; ReplicationError on anything malformed (never a partial list)."""
    if isinstance(buf, memoryview):
        buf = bytes(buf)
    out: list[Record] = []
    append = out.append
    end = len(buf)
    pos = 0
    head_size = _MSG_HEAD.size
    unpack_head_size = _MSG_HEAD_SIZE.unpack_from
    new_msg = tuple.__new__  # Msg(...) without NamedTuple's Python-level __new__
    # a batch's messages usually share one topic: its record prefix is matched in place
    # (no slice, no decode) against the last one seen
    last_prefix = b""
    topic = ""
    try:
        while pos < end:
            kind = buf[pos]
            if kind == MSG:  # the hot path: inline, no helper calls
                if last_prefix and buf.startswith(last_prefix, pos):
                    pos += len(last_prefix)
                else:
                    n = buf[pos + 1]
                    tpos = pos + 2
                    if n == 0:
                        raise ReplicationError("record truncated")
                    topic = buf[tpos:tpos + n].decode("ascii")
                    last_prefix = bytes(buf[pos:tpos + n])
                    pos = tpos + n
                if pos + head_size + 4 > end:
                    raise ReplicationError("record truncated")
                mid, ts, attempts, due_ns, mode, size = unpack_head_size(buf, pos)
                if mode == OWED_CHANNELS or mode == OWED_HELD:
                    owed: int | frozenset = mode
                    pos += head_size + 4
                elif mode == OWED_LIST:
                    r = _Reader(buf)
                    r.pos = pos + head_size
                    owed = r.names()
                    pos = r.pos
                    if pos + 4 > end:
                        raise ReplicationError("record truncated")
                    size = _unpack_u32(buf, pos)[0]
                    pos += 4
                else:
                    raise ReplicationError(f"bad owed mode {mode}")
                if pos + size > end:
                    raise ReplicationError("record truncated")
                append(new_msg(Msg, (topic, mid, ts, attempts, due_ns, owed, buf[pos:pos + size])))
                pos += size
                continue
            r = _Reader(buf)
            r.pos = pos + 1
            if kind == FIN:
                append(Fin(r.name(), r.name(), r.ids()))
            elif kind in (CHAN_ADD, CHAN_DEL):
                append(ChanEvent(kind, r.name(), r.name()))
            elif kind == PUMPED:
                append(Pumped(r.name(), r.ids()))
            elif kind == TOPIC_DEL or kind == TOPIC_EMPTY:
                append(TopicDel(r.name(), kind == TOPIC_EMPTY))
            elif kind == SYNC:
                count = r.u32()
                if count > end:
                    raise ReplicationError("bad topic count")
                append(Sync({r.name(): r.names() for _ in range(count)}))
            elif kind == ATTEMPTS:
                append(Attempts(r.name(), r.take(16), r.u16()))
            elif kind == RESHIP_BEGIN or kind == RESHIP_END:
                append(Marker(kind))
            else:
                raise ReplicationError(f"unknown record kind {kind}")
            pos = r.pos
    except (IndexError, struct.error):
        raise ReplicationError("record truncated") from None
    except UnicodeDecodeError:
        raise ReplicationError("non-ascii name") from None
    return out


# --- link framing ----------------------------------------------------------------------------

def encode_rsub(origin: str, incarnation: str, http_port: int) -> bytes:
    return f"RSUB {origin} {incarnation} {http_port}\n".encode()


def parse_rsub(params: list[bytes]) -> tuple[str, str, int]:
    """``RSUB``'s parameters as (origin address, incarnation hex, origin HTTP port)."""
    if len(params) != 4:
        raise ReplicationError("RSUB needs <origin-address> <incarnation> <http-port>")
    try:
        origin = params[1].decode("ascii")
        incarnation = params[2].decode("ascii")
        int(incarnation, 16)
        http_port = int(params[3])
    except (UnicodeDecodeError, ValueError):
        raise ReplicationError("RSUB bad parameters") from None
    if not origin or "/" in origin or origin.startswith(".") or len(incarnation) != 16:
        raise ReplicationError("RSUB bad parameters")
    return origin, incarnation, http_port


def encode_batch(seq: int, records: bytes, acked: bool = True) -> bytes:
    return b"%s %d\n%s%s" % (b"RPUB" if acked else b"RFIN", seq, _pack_u32(len(records)), records)


class Batch(NamedTuple):
    seq: int
    acked: bool  # RPUB (answer OK <seq>) or RFIN (no answer)
    records: bytes


class LinkParser:
    """Incremental parser of the origin-to-peer stream after RSUB (the peer's side)."""

    def __init__(self, max_batch: int = MAX_BATCH) -> None:
        self._buf = bytearray()
        self._max = max_batch

    def feed(self, data: bytes) -> list[Batch]:
        """Complete batches; ReplicationError on a malformed stream."""
        buf = self._buf
        buf += data
        out: list[Batch] = []
        pos = 0
        while True:
            nl = buf.find(b"\n", pos, pos + 64)
            if nl < 0:
                if len(buf) - pos >= 64:
                    raise ReplicationError("line too long")
                break
            parts = bytes(buf[pos:nl]).split(b" ")
            if len(parts) != 2 or parts[0] not in (b"RPUB", b"RFIN") or not parts[1].isdigit():
                raise ReplicationError(f"bad replication command {bytes(buf[pos:nl])[:32]!r}")
            if nl + 5 > len(buf):
                break
            size = _unpack_u32(buf, nl + 1)[0]
            if size > self._max:
                raise ReplicationError(f"batch too big {size}")
            end = nl + 5 + size
            if end > len(buf):
                break
            out.append(Batch(int(parts[1]), parts[0] == b"RPUB", bytes(buf[nl + 5:end])))
            pos = end
        if pos:
            del buf[:pos]
        return out


def encode_ack(seq: int) -> bytes:
    return b"OK %d" % seq


def parse_ack(data: bytes) -> int | None:
    """The seq of an ``OK <seq>`` response, None for anything else (``OK``, heartbeats)."""
    if data.startswith(b"OK ") and data[3:].isdigit():
        return int(data[3:])
    return None
