"""The history client's sans-I/O parts on bytes: points and the /history/read framing."""

from __future__ import annotations

import struct

import pytest

from nsqpy.client.history import (
    EARLIEST, LATEST, FramingError, RecordSplitter, encode_record, format_point, parse_point,
    resolve_end, TopicHistory,
)


def _records(n: int) -> list[tuple[bytes, bytes, int]]:
    return [(b"%016x" % i, b"body-%d" % i * (i % 5), 1_700_000_000_000_000_000 + i) for i in range(n)]


def test_points() -> None:
    assert parse_point("earliest") == EARLIEST and parse_point(" LATEST ") == LATEST
    assert parse_point("1700000000123") == 1_700_000_000_123_000_000
    assert parse_point("2026-11-28T03:00:00Z") == 1_795_834_800 * 10**9
    assert parse_point("2026-11-28T03:00:00.5Z") == 1_795_834_800 * 10**9 + 500_000_000
    assert parse_point("2026-11-28T04:00:00.000000001+01:00") == 1_795_834_800 * 10**9 + 1
    for bad in ("yesterday", "2026-13-01T00:00:00Z", "2026-11-28 03:00", "1.5", ""):
        with pytest.raises(ValueError, match="invalid from"):
            parse_point(bad, "from")


def test_format_point_round_trips_to_the_nanosecond() -> None:
    for ns in (0, 1_795_834_800 * 10**9, 1_795_834_800 * 10**9 + 1, 1_700_000_000_123_456_789):
        assert parse_point(format_point(ns)) == ns
    assert format_point(1_795_834_800 * 10**9) == "2026-11-28T03:00:00Z"
    assert format_point(EARLIEST) == "earliest"


def test_splitter_any_chunking() -> None:
    recs = _records(200)
    stream = b"".join(encode_record(i, b, t) for i, b, t in recs)
    for size in (1, 3, 4, 7, 29, 30, 31, 1000, len(stream)):
        sp = RecordSplitter()
        got = []
        for at in range(0, len(stream), size):
            sp.feed(stream[at : at + size])
            got += sp.messages()
        sp.close()
        assert [(m.id, m.body, m.timestamp, m.attempts) for m in got] == [(i, b, t, 1) for i, b, t in recs]
        assert sp.records == 200 and sp.bytes == len(stream)


def test_splitter_positions_and_truncation() -> None:
    one = encode_record(b"0" * 16, b"xyz", 5)
    sp = RecordSplitter()
    sp.feed(one + one[:10])
    buf, starts, stop = sp.take()
    assert starts == [0] and stop == 33 and bytes(buf[4:33]) == one[4:]
    assert sp.pending == 10
    with pytest.raises(FramingError, match="ended inside a record"):
        sp.close()


def test_splitter_refuses_what_is_not_a_record() -> None:
    sp = RecordSplitter()
    sp.feed(struct.pack(">I", 3) + b"abc")
    with pytest.raises(FramingError, match="record of 3 bytes at offset 0: not a message"):
        sp.take()
    good = encode_record(b"0" * 16, b"xyz", 5)
    sp = RecordSplitter()
    sp.feed(good + struct.pack(">I", 2) + b"ab" + good)  # a short record between good ones
    with pytest.raises(FramingError, match="record of 2 bytes at offset 33"):
        sp.take()
    sp = RecordSplitter()
    sp.feed(good + struct.pack(">I", 1 << 31) + b"x")  # an absurd length: refused before its bytes
    with pytest.raises(FramingError, match="at offset 33"):
        sp.take()


def test_resolve_end() -> None:
    h = TopicHistory("http://x", "t", 1, 0, 10, 20, 2, 100, ())
    assert resolve_end(h, LATEST) == 21 and resolve_end(h, EARLIEST) == 10 and resolve_end(h, 15) == 15
    empty = TopicHistory("http://x", "t", 1, 0, 0, 0, 0, 0, ())
    assert resolve_end(empty, LATEST) == 0
