"""The V2 command parser on raw bytes: every command shape and every error path."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol.commands import (
    CommandParser, Limits, LineTooLong, as_int64, byte_to_base10, encode_command, encode_mpub, go_quote,
    ms_to_duration_ns,
)
from nsqpy.protocol.errors import FatalError

I32 = struct.Struct(">i").pack


def feed(data: bytes, limits: Limits | None = None) -> list:
    return CommandParser(limits).feed(data)


def error_of(data: bytes, limits: Limits | None = None) -> str:
    out = feed(data, limits)
    assert out and isinstance(out[-1], FatalError), out
    return out[-1].payload.decode()


def test_simple_commands():
    out = feed(b"NOP\nRDY 10\nFIN 0123456789abcdef\r\nCLS\n")
    assert out == [
        (b"NOP", [b"NOP"], None),
        (b"RDY", [b"RDY", b"10"], None),
        (b"FIN", [b"FIN", b"0123456789abcdef"], None),
        (b"CLS", [b"CLS"], None),
    ]


def test_pub_with_body_and_split_delivery():
    data = encode_command(b"PUB", "topic", body=b"hello world")
    parser = CommandParser()
    got = []
    for i in range(len(data)):  # one byte at a time
        got.extend(parser.feed(data[i : i + 1]))
    assert got == [(b"PUB", [b"PUB", b"topic"], b"hello world")]
    assert parser.buffered == 0


def test_mpub_parses_messages():
    out = feed(encode_mpub("t", [b"a", b"bb", b"ccc"]))
    assert out == [(b"MPUB", [b"MPUB", b"t"], [b"a", b"bb", b"ccc"])]


def test_dpub_and_identify_and_auth():
    out = feed(encode_command(b"DPUB", "t", "1000", body=b"x")
               + encode_command(b"IDENTIFY", body=b"{}") + encode_command(b"AUTH", body=b"secret"))
    assert out == [(b"DPUB", [b"DPUB", b"t", b"1000"], b"x"),
                   (b"IDENTIFY", [b"IDENTIFY"], b"{}"), (b"AUTH", [b"AUTH"], b"secret")]


def test_unknown_commands_are_returned_for_the_server_to_reject():
    assert feed(b"FOO bar\n") == [(b"FOO", [b"FOO", b"bar"], None)]
    assert feed(b"\n") == [(b"", [b""], None)]


@pytest.mark.parametrize("data,expected", [
    (b"PUB\n", "E_INVALID PUB insufficient number of parameters"),
    (b"MPUB\n", "E_INVALID MPUB insufficient number of parameters"),
    (b"DPUB t\n", "E_INVALID DPUB insufficient number of parameters"),
    (b"PUB bad!topic\n", 'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'),
    (b"MPUB bad!topic\n", 'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!topic" is not valid'),
    (b"DPUB bad!topic 10\n", 'E_BAD_TOPIC DPUB topic name "bad!topic" is not valid'),
    (b"PUB " + b"a" * 65 + b"\n", f'E_BAD_TOPIC PUB topic name "{"a" * 65}" is not valid'),
    (b"DPUB t abc\n", "E_INVALID DPUB could not parse timeout abc"),
    (b"DPUB t 3600001\n", "E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
    (b"DPUB t -1\n", "E_INVALID DPUB could not parse timeout -1"),
    (b"DPUB t 18446744073709551615\n", "E_INVALID DPUB timeout 18446744073709551615 out of range 0-3600000"),
    (b"PUB t\n" + I32(0), "E_BAD_MESSAGE PUB invalid message body size 0"),
    (b"PUB t\n" + I32(-5), "E_BAD_MESSAGE PUB invalid message body size -5"),
    (b"PUB t\n" + I32(1048577), "E_BAD_MESSAGE PUB message too big 1048577 > 1048576"),
    (b"DPUB t 5\n" + I32(0), "E_BAD_MESSAGE DPUB invalid message body size 0"),
    (b"MPUB t\n" + I32(0), "E_BAD_BODY MPUB invalid body size 0"),
    (b"MPUB t\n" + I32(5242881), "E_BAD_BODY MPUB body too big 5242881 > 5242880"),
    (b"MPUB t\n" + I32(4) + I32(0), "E_BAD_BODY MPUB invalid message count 0"),
    (b"MPUB t\n" + I32(4) + I32(-1), "E_BAD_BODY MPUB invalid message count -1"),
    (b"MPUB t\n" + I32(8) + I32(1) + I32(0), "E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
    (b"MPUB t\n" + I32(8) + I32(1) + I32(2000000), "E_BAD_MESSAGE MPUB message too big 2000000 > 1048576"),
    (b"MPUB t\n" + I32(8) + I32(2) + I32(0), "E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
    (b"IDENTIFY\n" + I32(0), "E_BAD_BODY IDENTIFY invalid body size 0"),
    (b"IDENTIFY\n" + I32(5242881), "E_BAD_BODY IDENTIFY body too big 5242881 > 5242880"),
    (b"AUTH x\n", "E_INVALID AUTH invalid number of parameters"),
    (b"AUTH\n" + I32(-1), "E_BAD_BODY AUTH invalid body size -1"),
])
def test_error_paths(data, expected):
    assert error_of(data) == expected


def test_mpub_count_bound_follows_max_body_size():
    limits = Limits(max_body_size=104)
    assert error_of(b"MPUB t\n" + I32(8) + I32(21) + I32(0), limits) == "E_BAD_BODY MPUB invalid message count 21"


def test_oversized_body_is_rejected_before_it_arrives():
    parser = CommandParser()
    out = parser.feed(b"PUB t\n" + I32(0x7FFFFFFF))
    assert isinstance(out[0], FatalError)
    assert parser.feed(b"more bytes") == []  # dead after a fatal error


def test_line_too_long_drops_connection():
    out = feed(b"X" * (16 * 1024 + 1))
    assert isinstance(out[-1], LineTooLong)


def test_commands_before_an_error_are_kept():
    out = feed(b"NOP\nPUB\n")
    assert out[0] == (b"NOP", [b"NOP"], None)
    assert isinstance(out[1], FatalError)


def test_waits_for_body_size():
    parser = CommandParser()
    assert parser.feed(b"PUB t\n\x00\x00") == []
    assert parser.feed(b"\x00\x01x") == [(b"PUB", [b"PUB", b"t"], b"x")]


def test_take_buffer_returns_unparsed_bytes():
    parser = CommandParser()
    assert parser.feed(b"NOP\nPU") == [(b"NOP", [b"NOP"], None)]
    assert parser.take_buffer() == b"PU"
    assert parser.buffered == 0


def test_mpub_fields_are_checked_as_they_arrive():
    # upstream answers a bad count or size at once, before the rest of the declared body
    assert error_of(b"MPUB t\n" + I32(1000) + I32(0)) == "E_BAD_BODY MPUB invalid message count 0"
    assert error_of(b"MPUB t\n" + I32(1000) + I32(2) + I32(1) + b"a" + I32(-3)) == \
        "E_BAD_MESSAGE MPUB invalid message(1) body size -3"
    assert error_of(b"MPUB t\n" + I32(1000) + I32(2) + I32(1048577)) == \
        "E_BAD_MESSAGE MPUB message too big 1048577 > 1048576"
    assert error_of(b"MPUB t\n" + I32(100) + I32(1 << 30)) == "E_BAD_BODY MPUB invalid message count 1073741824"


def test_mpub_reads_the_stream_not_the_declared_size():
    # upstream reads count and messages from the stream; the outer size is only range-checked
    assert feed(b"MPUB t\n" + I32(4) + I32(1) + I32(2) + b"ab" + b"NOP\n") == [
        (b"MPUB", [b"MPUB", b"t"], [b"ab"]), (b"NOP", [b"NOP"], None)]
    assert error_of(b"MPUB t\n" + I32(4) + I32(3) + b"PUB t\n", Limits(max_msg_size=1000)) == \
        "E_BAD_MESSAGE MPUB message too big 1347764768 > 1000"
    # but one MPUB never holds more than --max-body-size, whatever its declared size says
    limits = Limits(max_msg_size=100, max_body_size=150)
    assert error_of(b"MPUB t\n" + I32(10) + I32(2) + I32(100) + b"a" * 100 + I32(50), limits) == \
        "E_BAD_BODY MPUB body too big 162 > 150"


def test_mpub_split_anywhere_holds_nothing_back_until_complete():
    data = encode_mpub("t", [b"one", b"two", b"three"])
    parser = CommandParser()
    for i in range(len(data) - 1):
        assert parser.feed(data[i:i + 1]) == []
    assert parser.feed(data[-1:]) == [(b"MPUB", [b"MPUB", b"t"], [b"one", b"two", b"three"])]


@pytest.mark.parametrize("data,expected", [
    (b"", None),
    (b"PU", None),
    (b"NOP\nPUB t", None),
    (b"PUB t\n", ("E_BAD_MESSAGE PUB failed to read message body size", "EOF")),
    (b"PUB t\n\x00\x00", ("E_BAD_MESSAGE PUB failed to read message body size", "unexpected EOF")),
    (b"PUB t\n" + I32(5), ("E_BAD_MESSAGE PUB failed to read message body", "EOF")),
    (b"DPUB t 1\n" + I32(5) + b"ab", ("E_BAD_MESSAGE DPUB failed to read message body", "unexpected EOF")),
    (b"IDENTIFY\n", ("E_BAD_BODY IDENTIFY failed to read body size", "EOF")),
    (b"AUTH\n" + I32(5) + b"a", ("E_BAD_BODY AUTH failed to read body", "unexpected EOF")),
    (b"MPUB t\n", ("E_BAD_BODY MPUB failed to read body size", "EOF")),
    (b"MPUB t\n" + I32(20), ("E_BAD_BODY MPUB failed to read message count", "EOF")),
    (b"MPUB t\n" + I32(20) + b"\x00", ("E_BAD_BODY MPUB failed to read message count", "unexpected EOF")),
    (b"MPUB t\n" + I32(20) + I32(2) + I32(1) + b"a", ("E_BAD_MESSAGE MPUB failed to read message(1) body size", "EOF")),
    (b"MPUB t\n" + I32(20) + I32(2) + I32(3), ("E_BAD_MESSAGE MPUB failed to read message body", "EOF")),
    (b"MPUB t\n" + I32(20) + I32(2) + I32(3) + b"a", ("E_BAD_MESSAGE MPUB failed to read message body", "unexpected EOF")),
])
def test_eof_error_names_what_was_being_read(data, expected):
    parser = CommandParser()
    parser.feed(data)
    got = parser.eof_error()
    assert (None if got is None else (str(got[0]), got[1])) == expected


def test_go_quote():
    assert go_quote(b'a"b\\c\n') == '"a\\"b\\\\c\\n"'


_cmd = st.one_of(
    st.builds(lambda t, b: encode_command(b"PUB", t, body=b), st.sampled_from(["a", "b.c", "x_y-z"]),
              st.binary(min_size=1, max_size=50)),
    st.builds(lambda t, bs: encode_mpub(t, bs), st.sampled_from(["m"]),
              st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=5)),
    st.sampled_from([b"NOP\n", b"RDY 5\n", b"CLS\n", b"FIN 0123456789abcdef\n"]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_cmd, min_size=1, max_size=10), st.data())
def test_split_anywhere_equals_one_shot(cmds, data):
    stream = b"".join(cmds)
    whole = CommandParser().feed(stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    parser = CommandParser()
    pieces = []
    prev = 0
    for c in cuts + [len(stream)]:
        pieces.extend(parser.feed(stream[prev:c]))
        prev = c
    assert pieces == whole
    assert len(whole) == len(cmds)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise(blob):
    parser = CommandParser(Limits(max_msg_size=1000, max_body_size=5000))
    out = parser.feed(blob)
    for item in out:
        assert isinstance(item, (tuple, FatalError))


def test_byte_to_base10_is_upstreams():
    assert byte_to_base10(b"") == 0
    assert byte_to_base10(b"0042") == 42
    assert byte_to_base10(b"18446744073709551616") == 0  # uint64 wraps
    for bad in (b"-1", b"+1", b" 1", b"1 ", b"1.0", b"\xd9\xa3"):  # \xd9\xa3: an Arabic-Indic 3
        with pytest.raises(ValueError):
            byte_to_base10(bad)
    assert as_int64(byte_to_base10(b"18446744073709551615")) == -1
    assert ms_to_duration_ns(9223372036855) < 0  # time.Duration(ms) * time.Millisecond overflows


def test_stop_after_sub():
    parser = CommandParser()
    parser.stop_after_sub = True
    assert parser.feed(b"SUB t c\nRDY 1\n") == [(b"SUB", [b"SUB", b"t", b"c"], None)]
    assert parser.feed(b"") == [(b"RDY", [b"RDY", b"1"], None)]


# --- mpub_head: MPUB's line on its own, before its body (nsqd with AUTH) --------------------------

def _head_parser() -> CommandParser:
    parser = CommandParser(Limits(max_msg_size=100, max_body_size=1000))
    parser.mpub_head = True
    return parser


def test_mpub_head_comes_before_the_body_is_read():
    from nsqpy.protocol.commands import MPUB_HEAD

    data = encode_mpub("t", [b"a", b"bc"]) + b"NOP\n"
    whole = _head_parser().feed(data)
    assert whole == [(MPUB_HEAD, [b"MPUB", b"t"], None), (b"MPUB", [b"MPUB", b"t"], [b"a", b"bc"]),
                     (b"NOP", [b"NOP"], None)]
    parser = _head_parser()
    pieces = [item for i in range(len(data)) for item in parser.feed(data[i:i + 1])]
    assert pieces == whole  # byte by byte: the head once, as soon as its line is complete


def test_mpub_head_then_the_body_errors_in_order():
    from nsqpy.protocol.commands import MPUB_HEAD

    for body, error in ((I32(-1), "E_BAD_BODY MPUB invalid body size -1"),
                        (I32(2000), "E_BAD_BODY MPUB body too big 2000 > 1000"),
                        (I32(8) + I32(0), "E_BAD_BODY MPUB invalid message count 0")):
        head, err = _head_parser().feed(b"MPUB t\n" + body)
        assert head == (MPUB_HEAD, [b"MPUB", b"t"], None)
        assert isinstance(err, FatalError) and str(err) == error
    parser = _head_parser()
    assert len(parser.feed(b"MPUB t\n\x00\x00")) == 1  # the head; the size is cut
    err, cause = parser.eof_error()
    assert (str(err), cause) == ("E_BAD_BODY MPUB failed to read body size", "unexpected EOF")
