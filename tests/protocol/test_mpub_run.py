"""Same-size MPUB bodies taken in blocks: the same commands and errors as message by message."""

from __future__ import annotations

import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol.commands import CommandParser, Limits, encode_mpub
from nsqpy.protocol.errors import FatalError
from nsqpy.protocol.mpub_run import take_uniform

I32 = struct.Struct(">i").pack


def messages(bodies: list[bytes]) -> bytearray:
    """MPUB's message list without its line, body size and count: what take_uniform reads."""
    return bytearray(b"".join(I32(len(b)) + b for b in bodies))


def test_a_block_of_one_size_is_taken_whole():
    bodies = [os.urandom(200) for _ in range(200)]  # 3 blocks of 64 and 8 more
    buf = messages(bodies)
    assert take_uniform(buf, 0, len(buf), 200, 1 << 20, 1 << 20) == (len(buf), bodies)


def test_only_whole_buffered_messages_up_to_the_count_are_taken():
    bodies = [bytes([i]) * 10 for i in range(20)]
    buf = messages(bodies) + I32(10) + b"part"
    assert take_uniform(buf, 0, len(buf), 50, 1 << 20, 1 << 20) == (20 * 14, bodies)
    assert take_uniform(buf, 0, len(buf), 12, 1 << 20, 1 << 20) == (12 * 14, bodies[:12])
    assert take_uniform(buf, 14, len(buf), 50, 1 << 20, 1 << 20) == (20 * 14, bodies[1:])


def test_anything_else_is_left_to_the_general_loop():
    same = [b"x" * 10] * 20
    mixed = same[:10] + [b"y" * 11] + same[:9]
    for buf, want, room, max_msg in [
        (messages(mixed), 20, 1 << 20, 1 << 20),  # a different size among them
        (messages(same[:7]), 7, 1 << 20, 1 << 20),  # too few to be worth it
        (messages(same), 20, 1 << 20, 9),  # each over --max-msg-size
        (messages(same), 20, 14 * 7, 1 << 20),  # only 7 fit in what the MPUB may still hold
        (bytearray(I32(0) * 20), 20, 1 << 20, 1 << 20),  # empty bodies are an error
    ]:
        assert take_uniform(buf, 0, len(buf), want, room, max_msg) is None


def test_a_limit_crossed_inside_a_block_gives_the_general_error():
    # 20 messages of 100 bytes: the body limit falls inside the run, at message 10
    limits = Limits(max_msg_size=100, max_body_size=4 + 10 * 104 + 50)
    # (the declared body size is only range-checked: the stream is what counts, as upstream)
    data = b"MPUB t\n" + I32(8) + I32(20) + messages([b"a" * 100] * 20)
    out = CommandParser(limits).feed(data)
    assert isinstance(out[-1], FatalError)
    assert out[-1].payload == b"E_BAD_BODY MPUB body too big 1148 > 1094"


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 40), count=st.integers(1, 150), odd=st.lists(st.integers(0, 149), max_size=3),
       cuts=st.lists(st.integers(1, 8000), max_size=6))
def test_parsed_the_same_however_split(size, count, odd, cuts):
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
