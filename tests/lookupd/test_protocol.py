"""The sans-I/O nsqlookupd V1 protocol (nsqpy.protocol.lookup) on raw bytes, every error path."""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol.lookup import (
    IDENTIFY, MAGIC_V1, MAX_LINE_LENGTH, OK_RESPONSE, PING, PING_COMMAND, REGISTER, UNREGISTER,
    BadMagic, LineTooLong, LookupParser, ResponseDecoder, ResponseTooLarge, V1Error,
    encode_identify, encode_register, encode_response, encode_unregister, go_trim_space,
    is_error_response, parse_identify,
)

pytestmark = pytest.mark.timeout(60)

INFO = {"version": "1.3.0", "tcp_port": 4150, "http_port": 4151,
        "broadcast_address": "host1", "hostname": "h"}


def identify_bytes(body: bytes | None = None) -> bytes:
    body = orjson.dumps(INFO) if body is None else body
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


def parsed(*chunks: bytes, max_body_size: int = 5 * 1024 * 1024) -> list:
    p = LookupParser(max_body_size)
    out = []
    for c in chunks:
        out.extend(p.feed(c))
    return out


def error_of(results: list) -> V1Error:
    assert results and isinstance(results[-1], V1Error), results
    return results[-1]


def identified(*lines: bytes) -> list:
    """Results after magic + a valid IDENTIFY (the IDENTIFY command itself dropped)."""
    res = parsed(MAGIC_V1 + identify_bytes() + b"".join(lines))
    assert res[0][0] == IDENTIFY
    return res[1:]


# --- magic --------------------------------------------------------------------------------------


def test_magic_then_ping():
    assert parsed(MAGIC_V1 + b"PING\n") == [(PING, None, None)]


def test_magic_split_across_feeds():
    p = LookupParser()
    assert p.feed(b"  ") == []
    assert p.magic is None
    assert p.feed(b"V1PI") == []
    assert p.magic == MAGIC_V1
    assert p.feed(b"NG\n") == [(PING, None, None)]


def test_bad_magic_payload_is_bare_code_and_parser_dies():
    p = LookupParser()
    res = p.feed(b"  V2PING\n")
    err = error_of(res)
    assert isinstance(err, BadMagic)
    assert err.payload == b"E_BAD_PROTOCOL"
    assert err.magic == b"  V2"
    assert p.dead
    assert p.feed(b"PING\n") == []
    assert p.eof() == []


def test_no_magic_mode():
    p = LookupParser(expect_magic=False)
    assert p.feed(b"PING\n") == [(PING, None, None)]


# --- lines --------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [b"PING\n", b"PING\r\n", b"  PING \t\n", b"PING extra args\n",
                                  b"\xc2\xa0PING\xe3\x80\x80\n", b"\x0bPING\x0c\n"])
def test_ping_forms(line):
    assert parsed(MAGIC_V1 + line) == [(PING, None, None)]


def test_partial_line_waits():
    p = LookupParser()
    assert p.feed(MAGIC_V1 + b"PI") == []
    assert p.buffered == 2
    assert p.feed(b"NG\nPING") == [(PING, None, None)]
    assert p.feed(b"\n") == [(PING, None, None)]


def test_pipelined_commands_in_one_feed():
    res = identified(b"REGISTER t1\nREGISTER t2 c2\nUNREGISTER t2 c2\nUNREGISTER t1\nPING\n")
    assert res == [(REGISTER, "t1", ""), (REGISTER, "t2", "c2"), (UNREGISTER, "t2", "c2"),
                   (UNREGISTER, "t1", ""), (PING, None, None)]


def test_register_extra_params_ignored():
    assert identified(b"REGISTER t c extra\n") == [(REGISTER, "t", "c")]


def test_register_double_space_means_empty_channel():
    # "t  c" splits into ["t", "", "c"]: the channel parameter is "", i.e. a topic registration
    assert identified(b"REGISTER t  c\n") == [(REGISTER, "t", "")]


def test_ephemeral_names_are_valid():
    assert identified(b"REGISTER t#ephemeral c#ephemeral\n") == \
        [(REGISTER, "t#ephemeral", "c#ephemeral")]


@pytest.mark.parametrize("line,payload", [
    (b"\n", b"E_INVALID invalid command "),
    (b"   \n", b"E_INVALID invalid command "),
    (b"FOO\n", b"E_INVALID invalid command FOO"),
    (b"ping\n", b"E_INVALID invalid command ping"),
    (b"FOO\xff bar\n", b"E_INVALID invalid command FOO\xff"),
    (b" PING\x00\n", b"E_INVALID invalid command PING\x00"),
])
def test_invalid_commands(line, payload):
    err = error_of(parsed(MAGIC_V1 + line))
    assert err.payload == payload
    assert not err.silent


@pytest.mark.parametrize("cmd", [b"REGISTER", b"UNREGISTER"])
def test_register_requires_identify(cmd):
    err = error_of(parsed(MAGIC_V1 + cmd + b" t\n"))
    assert err.payload == b"E_INVALID client must IDENTIFY"


def test_must_identify_is_checked_before_names():
    err = error_of(parsed(MAGIC_V1 + b"REGISTER bad!name\n"))
    assert err.payload == b"E_INVALID client must IDENTIFY"


@pytest.mark.parametrize("line,payload", [
    (b"REGISTER\n", b"E_INVALID REGISTER insufficient number of params"),
    (b"REGISTER   \n", b"E_INVALID REGISTER insufficient number of params"),
    (b"UNREGISTER\n", b"E_INVALID UNREGISTER insufficient number of params"),
    (b"REGISTER  t\n", b"E_BAD_TOPIC REGISTER topic name '' is not valid"),
    (b"REGISTER bad!\n", b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"),
    (b"REGISTER " + b"a" * 65 + b"\n", b"E_BAD_TOPIC REGISTER topic name '" + b"a" * 65 + b"' is not valid"),
    (b"UNREGISTER t\xff\n", b"E_BAD_TOPIC UNREGISTER topic name 't\xff' is not valid"),
    (b"REGISTER t c!\n", b"E_BAD_CHANNEL REGISTER channel name 'c!' is not valid"),
    (b"UNREGISTER t c#eph\n", b"E_BAD_CHANNEL UNREGISTER channel name 'c#eph' is not valid"),
    (b"REGISTER t \xc3\xa9\n", b"E_BAD_CHANNEL REGISTER channel name '\xc3\xa9' is not valid"),
])
def test_register_param_errors(line, payload):
    err = error_of(identified(line))
    assert err.payload == payload


def test_commands_before_an_error_are_returned_and_nothing_after():
    p = LookupParser()
    res = p.feed(MAGIC_V1 + b"PING\nPING\nBAD\nPING\n")
    assert res[:2] == [(PING, None, None)] * 2
    assert error_of(res).payload == b"E_INVALID invalid command BAD"
    assert len(res) == 3
    assert p.feed(b"PING\n") == []


def test_line_of_max_length_is_accepted():
    line = b"PING" + b" " * (MAX_LINE_LENGTH - 4)
    assert parsed(MAGIC_V1 + line + b"\n") == [(PING, None, None)]


def test_line_too_long_with_newline_is_silent_fatal():
    err = error_of(parsed(MAGIC_V1 + b"PING" + b"x" * MAX_LINE_LENGTH + b"\n"))
    assert isinstance(err, LineTooLong)
    assert err.silent


def test_line_too_long_without_newline_detected_early():
    p = LookupParser()
    assert p.feed(MAGIC_V1 + b"x" * MAX_LINE_LENGTH) == []
    err = error_of(p.feed(b"x"))
    assert isinstance(err, LineTooLong)
    assert p.buffered == 0


# --- IDENTIFY -----------------------------------------------------------------------------------


def test_identify_returns_body():
    body = orjson.dumps(INFO)
    assert parsed(MAGIC_V1 + identify_bytes(body)) == [(IDENTIFY, body, None)]


def test_identify_params_on_line_ignored():
    body = orjson.dumps(INFO)
    res = parsed(MAGIC_V1 + b"IDENTIFY foo bar\n" + struct.pack(">i", len(body)) + body)
    assert res == [(IDENTIFY, body, None)]


def test_identify_byte_by_byte():
    data = MAGIC_V1 + identify_bytes() + b"REGISTER t\n"
    p = LookupParser()
    out = []
    for i in range(len(data)):
        out.extend(p.feed(data[i : i + 1]))
    assert out == [(IDENTIFY, orjson.dumps(INFO), None), (REGISTER, "t", "")]


def test_identify_zero_size_gives_empty_body():
    assert parsed(MAGIC_V1 + b"IDENTIFY\n\x00\x00\x00\x00") == [(IDENTIFY, b"", None)]


def test_identify_twice_fails_without_reading_a_body():
    res = parsed(MAGIC_V1 + identify_bytes() + b"IDENTIFY\n")
    assert res[0][0] == IDENTIFY
    assert error_of(res).payload == b"E_INVALID cannot IDENTIFY again"


def test_identify_negative_size():
    err = error_of(parsed(MAGIC_V1 + b"IDENTIFY\n" + struct.pack(">i", -1)))
    assert err.payload == b"E_BAD_BODY IDENTIFY invalid body size -1"


def test_identify_size_over_limit_rejected_before_buffering():
    p = LookupParser(max_body_size=100)
    err = error_of(p.feed(MAGIC_V1 + b"IDENTIFY\n" + struct.pack(">i", 101)))
    assert err.payload == b"E_BAD_BODY IDENTIFY body too big 101 > 100"
    assert p.buffered == 0


def test_identify_size_at_limit_accepted():
    body = b" " * 100
    assert parsed(MAGIC_V1 + identify_bytes(body), max_body_size=100) == [(IDENTIFY, body, None)]


def test_eof_states():
    p = LookupParser()
    p.feed(MAGIC_V1 + b"PIN")
    assert p.eof() == []  # a partial line is dropped silently, as Go's ReadString error
    p = LookupParser()
    p.feed(MAGIC_V1 + b"IDENTIFY\n")
    assert error_of(p.eof()).payload == b"E_BAD_BODY IDENTIFY failed to read body size"
    p = LookupParser()
    p.feed(MAGIC_V1 + b"IDENTIFY\n\x00\x00")
    assert error_of(p.eof()).payload == b"E_BAD_BODY IDENTIFY failed to read body size"
    p = LookupParser()
    p.feed(MAGIC_V1 + b"IDENTIFY\n\x00\x00\x00\x10{}")
    assert error_of(p.eof()).payload == b"E_BAD_BODY IDENTIFY failed to read body"
    assert p.feed(b"x" * 20) == []  # dead after eof
    assert LookupParser().eof() == []


# --- IDENTIFY body (Go json.Unmarshal into PeerInfo) -------------------------------------------


def test_parse_identify_ok():
    info = parse_identify(orjson.dumps({**INFO, "topology_zone": "z", "unknown": [1, {"x": 2}]}))
    assert info == {"remote_address": "", "hostname": "h", "broadcast_address": "host1",
                    "version": "1.3.0", "topology_zone": "z", "topology_region": "",
                    "tcp_port": 4150, "http_port": 4151}


def test_parse_identify_keys_are_case_insensitive_last_wins():
    info = parse_identify(b'{"VERSION":"1","Tcp_Port":1,"tcp_port":2,"HTTP_PORT":3,'
                          b'"Broadcast_Address":"b"}')
    assert (info["version"], info["tcp_port"], info["http_port"], info["broadcast_address"]) == \
        ("1", 2, 3, "b")


def test_parse_identify_null_values_leave_fields_empty():
    with pytest.raises(V1Error) as exc:
        parse_identify(b'{"version":null,"tcp_port":1,"http_port":2,"broadcast_address":"b"}')
    assert exc.value.payload == b"E_BAD_BODY IDENTIFY missing fields"


def test_parse_identify_negative_ports_pass_as_upstream():
    info = parse_identify(orjson.dumps({**INFO, "tcp_port": -1}))
    assert info["tcp_port"] == -1


@pytest.mark.parametrize("field,value", [
    ("broadcast_address", ""), ("tcp_port", 0), ("http_port", 0), ("version", ""),
])
def test_parse_identify_missing_fields(field, value):
    with pytest.raises(V1Error) as exc:
        parse_identify(orjson.dumps({**INFO, field: value}))
    assert exc.value.payload == b"E_BAD_BODY IDENTIFY missing fields"
    doc = dict(INFO)
    del doc[field]
    with pytest.raises(V1Error) as exc:
        parse_identify(orjson.dumps(doc))
    assert exc.value.payload == b"E_BAD_BODY IDENTIFY missing fields"


@pytest.mark.parametrize("body", [b"null", b"{}"])
def test_parse_identify_empty_documents_are_missing_fields(body):
    with pytest.raises(V1Error) as exc:
        parse_identify(body)
    assert exc.value.payload == b"E_BAD_BODY IDENTIFY missing fields"


@pytest.mark.parametrize("body", [
    b"", b"{", b"not json", b"[]", b"[1,2]", b'"str"', b"42", b"true",
    b'{"version":"1"} trailing',
    orjson.dumps({**INFO, "tcp_port": "4150"}),
    orjson.dumps({**INFO, "tcp_port": 1.5}),
    orjson.dumps({**INFO, "http_port": True}),
    orjson.dumps({**INFO, "version": 130}),
    orjson.dumps({**INFO, "hostname": ["h"]}),
    orjson.dumps({**INFO, "remote_address": {}}),
    b'{"version":"1","tcp_port":1e3,"http_port":2,"broadcast_address":"b"}',
    b'{"version":"1","tcp_port":99999999999999999999,"http_port":2,"broadcast_address":"b"}',
    b'{"version":"1","tcp_port":NaN,"http_port":2,"broadcast_address":"b"}',
])
def test_parse_identify_decode_errors(body):
    with pytest.raises(V1Error) as exc:
        parse_identify(body)
    assert exc.value.payload == b"E_BAD_BODY IDENTIFY failed to decode JSON body"


def test_parse_identify_invalid_utf8_is_replaced_like_go():
    body = b'{"version":"1.3.0","tcp_port":1,"http_port":2,"broadcast_address":"b","hostname":"h\xff"}'
    assert parse_identify(body)["hostname"] == "h\ufffd"


# --- responses and client-side encoders ---------------------------------------------------------


def test_encode_response():
    assert encode_response(b"OK") == b"\x00\x00\x00\x02OK" == OK_RESPONSE
    assert encode_response(b"") == b"\x00\x00\x00\x00"


def test_error_payloads():
    assert V1Error("E_INVALID", "x y").payload == b"E_INVALID x y"
    assert is_error_response(b"E_INVALID x")
    assert not is_error_response(b"OK")
    assert not is_error_response(b'{"tcp_port":1}')


def test_response_decoder_incremental():
    d = ResponseDecoder()
    data = encode_response(b"OK") + encode_response(b'{"a":1}') + encode_response(b"")
    out = []
    for i in range(len(data)):
        out.extend(d.feed(data[i : i + 1]))
    assert out == [b"OK", b'{"a":1}', b""]


def test_response_decoder_bounds():
    with pytest.raises(ResponseTooLarge):
        ResponseDecoder(10).feed(struct.pack(">i", 11))
    with pytest.raises(ResponseTooLarge):
        ResponseDecoder(10).feed(struct.pack(">i", -1))
    assert ResponseDecoder(10).feed(encode_response(b"x" * 10)) == [b"x" * 10]


def test_client_encoders_round_trip_through_parser():
    stream = (MAGIC_V1 + encode_identify(INFO) + encode_register("t") + encode_register("t", "c")
              + encode_unregister("t", "c") + encode_unregister("t") + PING_COMMAND)
    res = parsed(stream)
    assert res[0][0] == IDENTIFY and orjson.loads(res[0][1]) == INFO
    assert res[1:] == [(REGISTER, "t", ""), (REGISTER, "t", "c"), (UNREGISTER, "t", "c"),
                       (UNREGISTER, "t", ""), (PING, None, None)]
    assert encode_register("t", None) == b"REGISTER t\n"
    assert encode_register("t", "") == b"REGISTER t\n"
    assert encode_unregister("t", "c") == b"UNREGISTER t c\n"


# --- Go's TrimSpace -----------------------------------------------------------------------------


@pytest.mark.parametrize("raw,trimmed", [
    (b"  a b  ", b"a b"),
    (b"\t\n\v\f\r a \r\n", b"a"),
    (b"\xc2\x85a\xc2\xa0", b"a"),
    (b"\xe2\x80\x80\xe3\x80\x80a\xe2\x80\xa8 \xe2\x80\xa9", b"a"),
    (b"\x1ca\x1f", b"\x1ca\x1f"),  # Python's isspace, not Go's
    (b"\xffa\xff", b"\xffa\xff"),
    (b"", b""),
    (b" \xc2\xa0 ", b""),
])
def test_go_trim_space(raw, trimmed):
    assert go_trim_space(raw) == trimmed


# --- properties ---------------------------------------------------------------------------------

_COMMANDS = st.sampled_from([b"PING\n", b"REGISTER t\n", b"REGISTER t c\n", b"UNREGISTER t c\n",
                             b"UNREGISTER t\n", b" PING \r\n"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_COMMANDS, max_size=20), st.data())
def test_any_split_parses_the_same(commands, data):
    stream = MAGIC_V1 + identify_bytes() + b"".join(commands)
    whole = parsed(stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    chunks, prev = [], 0
    for c in cuts:
        chunks.append(stream[prev:c])
        prev = c
    chunks.append(stream[prev:])
    assert parsed(*chunks) == whole
    assert len(whole) == 1 + len(commands)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans())
def test_garbage_never_raises(blob, with_magic):
    p = LookupParser(max_body_size=64)
    res = p.feed((MAGIC_V1 if with_magic else b"") + blob) + p.eof()
    errors = [r for r in res if isinstance(r, V1Error)]
    assert len(errors) <= 1
    if errors:
        assert res[-1] is errors[0]
        assert isinstance(errors[0].payload, bytes)
    for r in res:
        if not isinstance(r, V1Error) and r[0] == IDENTIFY:
            try:
                parse_identify(r[1])
            except V1Error as err:
                assert err.payload.startswith(b"E_BAD_BODY IDENTIFY ")
