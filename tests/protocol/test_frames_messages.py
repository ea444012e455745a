"""Frames, the message encoding, ids and names on raw bytes."""

from __future__ import annotations

import struct

import pytest

from nsqpy.protocol.frames import (
    FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, HEARTBEAT_FRAME, OK_FRAME, Frame,
    FrameDecoder, FrameTooLarge, encode_error, encode_frame,
)
from nsqpy.protocol.message import (
    IdFactory, decode_message, encode_message, encode_message_frame, text_run_lines,
    text_run_messages,
)
from nsqpy.protocol.names import is_ephemeral, is_valid_name


def test_response_frames_bytes():
    assert OK_FRAME == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    assert HEARTBEAT_FRAME == struct.pack(">ii", 15, 0) + b"_heartbeat_"
    assert encode_error(b"E_INVALID x") == struct.pack(">ii", 15, 1) + b"E_INVALID x"


def test_message_encoding_layout():
    raw = encode_message(b"0123456789abcdef", b"body", 1234567890123456789, 3)
    assert raw == struct.pack(">qH", 1234567890123456789, 3) + b"0123456789abcdef" + b"body"
    msg = decode_message(raw)
    assert (msg.id, msg.body, msg.timestamp, msg.attempts) == (b"0123456789abcdef", b"body", 1234567890123456789, 3)
    frame = encode_message_frame(b"0123456789abcdef", b"body", 1234567890123456789, 3)
    assert frame == encode_frame(FRAME_TYPE_MESSAGE, raw)


def test_decode_short_message_fails():
    with pytest.raises(ValueError):
        decode_message(b"x" * 25)


def test_frame_decoder_incremental():
    stream = OK_FRAME + encode_error(b"E_X y") + encode_message_frame(b"a" * 16, b"b", 1, 1)
    dec = FrameDecoder()
    frames = []
    for i in range(len(stream)):
        frames.extend(dec.feed(stream[i : i + 1]))
    assert [f.frame_type for f in frames] == [FRAME_TYPE_RESPONSE, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE]
    assert frames[0] == Frame(0, b"OK")


def test_frame_decoder_limit():
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_frame_size=100).feed(struct.pack(">ii", 1000, 0))


def test_ids_unique_monotonic_and_hex():
    f = IdFactory(513)
    ids = f.next_ids(10000) + [f.next_id() for _ in range(100)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    for i in ids[:5]:
        assert len(i) == 16 and int(i, 16) >= 0
        assert (int(i, 16) >> 12) & 0x3FF == 513


def test_ids_follow_the_snowflake_layout_across_sequence_rollovers(monkeypatch):
    """A frozen clock: 4096 ids per tick, then the next tick is borrowed (seq restarts at 0)."""
    import nsqpy.protocol.message as message
    now = 1_700_000_000_000_000_000
    monkeypatch.setattr(message.time, "time_ns", lambda: now)
    f = IdFactory(7)
    tick = now >> 20
    ids = f.next_ids(3000) + f.next_ids(5000) + [f.next_id() for _ in range(300)] + f.next_ids(1)
    expected = [b"%016x" % ((((tick + i // 4096) - message._TWEPOCH) << 22) | 7 << 12 | i % 4096)
                for i in range(len(ids))]
    assert ids == expected


def test_id_blocks_are_the_ids_back_to_back_across_sequence_rollovers(monkeypatch):
    """A frozen clock: a block spanning a borrowed tick holds the ids next_ids would give."""
    import nsqpy.protocol.message as message
    monkeypatch.setattr(message.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    a, b = IdFactory(7), IdFactory(7)
    for count in (3000, 5000, 1, 4096):
        block = a.next_id_block(count)
        assert [block[i:i + 16] for i in range(0, len(block), 16)] == b.next_ids(count)


def test_text_runs_count_and_make_what_the_line_split_makes():
    """Every body of short lines over a small alphabet: a body ``text_run_lines`` counts makes,
    as a run, exactly the non-empty lines the /mpub split publishes; it refuses only bodies
    with an empty line."""
    import itertools

    ids = IdFactory(1)
    taken = 0
    for size in range(1, 9):
        for letters in itertools.product(b"a\n", repeat=size):
            body = bytes(letters)
            lines = list(filter(None, body.split(b"\n")))
            n = text_run_lines(body)
            if not n:  # only a body with an empty line
                parts = body.split(b"\n")
                if not parts[-1]:
                    parts.pop()
                assert b"" in parts, body
                continue
            taken += 1
            block = ids.next_id_block(n)
            msgs = text_run_messages(block, body, 5)
            assert [m[1] for m in msgs] == lines and len(lines) == n, body
            assert [m[0] for m in msgs] == [block[i:i + 16] for i in range(0, 16 * n, 16)]
            assert {(m[2], m[3]) for m in msgs} == {(5, 0)}
    assert taken == 87  # of the 510 bodies: the others hold an empty line


def test_id_column_is_the_ids_back_to_back_across_a_sequence_rollover(monkeypatch):
    """The history's id column comes with the ids (the buffer they are cut from), also when a
    batch spans two ticks, and the ids go on from where ``next_ids`` left off."""
    import nsqpy.protocol.message as message
    monkeypatch.setattr(message.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    f, g = IdFactory(9), IdFactory(9)
    for count in (1, 200, 4000, 3000):  # the third and fourth batches borrow the next ticks
        ids, column = f.next_id_column(count)
        assert ids == g.next_ids(count)
        assert column == b"".join(ids) and len(column) == 16 * count


def test_id_factory_rejects_bad_node():
    with pytest.raises(ValueError):
        IdFactory(1024)


@pytest.mark.parametrize("name,ok", [
    ("a", True), ("a.b_c-d", True), ("x" * 64, True), ("x" * 65, False), ("", False),
    ("t#ephemeral", True), ("x" * 54 + "#ephemeral", True), ("x" * 55 + "#ephemeral", False),
    ("a b", False), ("a#b", False), ("é", False), ("#ephemeral", False),
])
def test_names(name, ok):
    assert is_valid_name(name) is ok


def test_ephemeral():
    assert is_ephemeral("c#ephemeral") and not is_ephemeral("c")
