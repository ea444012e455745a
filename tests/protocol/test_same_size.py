"""Runs of same-size records taken in blocks: the same results and errors as record by record."""

from __future__ import annotations

import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol import same_size
from nsqpy.protocol.commands import CommandParser, Limits, encode_mpub
from nsqpy.protocol.errors import FatalError
from nsqpy.protocol.message import encode_message
from nsqpy.protocol.same_size import same_size_run

I32 = struct.Struct(">i").pack
BIG = 1 << 20


def records(payloads: list[bytes]) -> bytearray:
    """Size-prefixed records, as MPUB's message list and the disk queue hold them."""
    return bytearray(b"".join(I32(len(p)) + p for p in payloads))


def test_a_run_of_one_size_is_taken_whole():
    payloads = [os.urandom(200) for _ in range(200)]  # 3 blocks of 64 and 8 more
    buf = records(payloads)
    assert same_size_run(buf, 0, len(buf), 200, 1, BIG, BIG) == (200, 200)
    assert same_size.bodies(buf, 0, 200, 200) == payloads


def test_disk_records_decode_as_messages():
    msgs = [(b"%016x" % i, os.urandom(i % 3 + 50), 1700000000000000000 + i, i % 7) for i in range(150)]
    msgs = [(mid, body[:50], ts, att) for mid, body, ts, att in msgs]  # one size
    buf = records([encode_message(*m) for m in msgs])
    assert same_size_run(buf, 0, len(buf), 150, 26, BIG, len(buf)) == (76, 150)
    assert same_size.messages(buf, 0, 76, 150) == msgs


def test_only_whole_buffered_records_up_to_the_limit_are_taken():
    payloads = [bytes([i]) * 10 for i in range(20)]
    buf = records(payloads) + I32(10) + b"part"
    assert same_size_run(buf, 0, len(buf), 50, 1, BIG, BIG) == (10, 20)
    assert same_size_run(buf, 0, len(buf), 12, 1, BIG, BIG) == (10, 12)
    assert same_size_run(buf, 14, len(buf), 50, 1, BIG, BIG) == (10, 19)
    assert same_size.bodies(buf, 14, 10, 19) == payloads[1:]


def test_anything_else_is_left_to_the_record_by_record_loop():
    same = [b"x" * 10] * 20
    mixed = same[:10] + [b"y" * 11] + same[:9]
    for buf, want, lo, hi, room in [
        (records(mixed), 20, 1, BIG, BIG),  # a different size among them
        (records(same[:7]), 7, 1, BIG, BIG),  # too few to be worth it
        (records(same), 20, 1, 9, BIG),  # each over the largest size allowed
        (records(same), 20, 11, BIG, BIG),  # each under the smallest
        (records(same), 20, 1, BIG, 14 * 7),  # only 7 fit in the room left
        (bytearray(I32(0) * 20), 20, 1, BIG, BIG),  # empty MPUB bodies are an error
    ]:
        assert same_size_run(buf, 0, len(buf), want, lo, hi, room) is None


def test_an_mpub_limit_crossed_inside_a_run_gives_the_general_error():
    # 20 messages of 100 bytes: the body limit falls inside the run, at message 10
    limits = Limits(max_msg_size=100, max_body_size=4 + 10 * 104 + 50)
    # (the declared body size is only range-checked: the stream is what counts, as upstream)
    data = b"MPUB t\n" + I32(8) + I32(20) + records([b"a" * 100] * 20)
    out = CommandParser(limits).feed(data)
    assert isinstance(out[-1], FatalError)
    assert out[-1].payload == b"E_BAD_BODY MPUB body too big 1148 > 1094"


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 40), count=st.integers(1, 150), odd=st.lists(st.integers(0, 149), max_size=3),
       cuts=st.lists(st.integers(1, 8000), max_size=6))
def test_mpub_parsed_the_same_however_split(size, count, odd, cuts):
    bodies = [bytes([i % 251]) * size for i in range(count)]
    for i in odd:
        if i < count:
            bodies[i] = b"z" * (size + 1)
    data = encode_mpub("t", bodies) + b"NOP\n"
    parser = CommandParser()
    got: list = []
    at = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        got += parser.feed(data[at:cut])
        at = max(at, min(cut, len(data)))
    assert got == [(b"MPUB", [b"MPUB", b"t"], bodies), (b"NOP", [b"NOP"], None)]
