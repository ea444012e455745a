"""nsqpy.protocol.gojson against Go's encoding/json: the cases upstream's daemons showed (issue 37),
then thousands of generated inputs compared byte for byte with Go 1.19 itself (tests/gooracle,
built when ``go`` is installed, as ``make test`` sees to; skipped otherwise)."""

from __future__ import annotations

import re
import struct
import sys

import pytest
from hypothesis import given, strategies as st

from nsqpy.protocol import gojson
from nsqpy.protocol.gojson import GoJSONError, decode_struct, decode_strings, dumps, loads
from nsqpy.nsqd.v2.client import decode_identify

from helpers.gooracle import differential

pytestmark = pytest.mark.timeout(300)


# --- known cases -------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("bs\bff\f", b'"bs\\u0008ff\\u000c"'),
    ("\n\r\t\"\\/", b'"\\n\\r\\t\\"\\\\/"'),
    ("<a>&\u2028\u2029\x7f", b'"\\u003ca\\u003e\\u0026\\u2028\\u2029\x7f"'),
    ("\x00\x1f", b'"\\u0000\\u001f"'),
    (b"trunc\xe2\x82x", b'"trunc\\ufffd\\ufffdx"'),  # one \ufffd per bad byte, as Go writes it
    ("\udce2\udc82x", b'"\\ufffd\\ufffdx"'),  # surrogateescape'd bytes are those bytes
    ("\ud800", b'"\\ufffd\\ufffd\\ufffd"'),  # a lone surrogate: its three invalid bytes
    ("\ufffd", b'"\xef\xbf\xbd"'),  # a real U+FFFD is written as it is
    ([1.0, -0.0, 1e16, 1e21, 1e-6, 1.5e-7, 0.1, 123456789.0], b'[1,-0,10000000000000000,1e+21,'
                                                               b'0.000001,1.5e-7,0.1,123456789]'),
    ({"b": 1, "a": [True, None]}, b'{"b":1,"a":[true,null]}'),
    (1 << 70, b"1180591620717411303424"),
    ({"page-1": "e-1", "v": "1.0,", "x": 2.5}, b'{"page-1":"e-1","v":"1.0,","x":2.5}'),
    ([1.0], b"[1]"), (2.0, b"2"), ([1e-7, {"a": 5e+300}], b'[1e-7,{"a":5e+300}]'),
])
def test_dumps_as_go(value, expected):
    assert dumps(value) == expected


def test_dumps_sorted_keys_and_errors():
    assert dumps({"b": 1, "a": {"d": 1, "c": 2}}, sort_keys=True) == b'{"a":{"c":2,"d":1},"b":1}'
    with pytest.raises(ValueError):  # Go's UnsupportedValueError (dumps' fast path: null)
        gojson.go_float(float("nan"))
    with pytest.raises(TypeError):
        dumps(object())


@pytest.mark.parametrize("raw, expected", [
    (b'"\\ud800"', "\ufffd"),
    (b'"\\ud800\\u0041"', "\ufffdA"),  # the second escape is read on its own
    (b'"\\ud83d\\ude00"', "\U0001F600"),
    (b'"\\udc00\\ud800\\udc00"', "\ufffd\U00010000"),
    (b'"trunc\xe2\x82x"', "trunc\ufffd\ufffdx"),
    (b'"\xed\xa0\x80"', "\ufffd\ufffd\ufffd"),
    (b' [1, 2.5, -0, 1e2, 18446744073709551616] ', [1, 2.5, 0, 100.0, 18446744073709551616.0]),
    (b"[" * 10000 + b"]" * 10000, None),
])
def test_loads_as_go(raw, expected):
    value = loads(raw)
    if expected is not None:
        assert value == expected


@pytest.mark.parametrize("raw", [
    b"", b"1e400", b'{"a":1e400}', b"[" * 10001 + b"]" * 10001, b'"\\x"', b'"a\x01"', b"[1,]",
    b"01", b"\xef\xbb\xbf{}", b"{} {}", b"NaN", b"'a'", b"-", b"1.", b".5", b'{"a" 1}',
])
def test_loads_refuses_as_go(raw):
    with pytest.raises(GoJSONError):
        loads(raw)


def test_identify_as_upstream_reads_it():
    # unknown keys are skipped unread: a huge number, nesting near Go's limit
    body = (b'{"client_id":"c","x":1e400,"y":' + b"[" * 9000 + b"]" * 9000
            + b',"topology_zone":5,"HOSTNAME":"h"}')
    assert decode_identify(body) == {"client_id": "c", "hostname": "h"}
    # Go's folding: U+017F is s, U+212A is k; nothing else (no Unicode case folding)
    assert decode_identify('{"ho\u017ftname":"x"}'.encode()) == {"hostname": "x"}
    assert decode_identify('{"HO\u017fTNAME":"x","snappy":true}'.encode()) == {
        "hostname": "x", "snappy": True}
    assert decode_struct('{"broadcast_addre\u00df":"x"}'.encode(),
                         {"broadcast_address": gojson.STRING}) == {}
    assert decode_struct('{"\u212aey":"x"}'.encode(), {"key": gojson.STRING}) == {"key": "x"}
    # null leaves a field as it was; the last key wins
    assert decode_identify(b'{"hostname":"a","Hostname":null}') == {"hostname": "a"}
    assert decode_identify(b"null") == {}
    assert decode_identify(b'{"msg_timeout":-0}') == {"msg_timeout": 0}
    # topology labels: carried as strings when the operator set one, ignored otherwise
    assert decode_identify(b'{"topology_zone":5}', topology=True) == {}
    assert decode_identify(b'{"topology_zone":"z"}', topology=True) == {"topology_zone": "z"}


@pytest.mark.parametrize("raw", [
    b'{"heartbeat_interval":1.0}', b'{"heartbeat_interval":1e400}', b'{"hostname":5}',
    b'{"sample_rate":2147483648}', b'{"snappy":"true"}', b'{"tls_v1":1}', b"[]", b'"x"', b"",
    b'{"hostname":"a","x":[}', b'{"deflate_level":{}}', b'{"hostname":"a","msg_timeout":"1"}',
])
def test_identify_refused_as_upstream_refuses(raw):
    with pytest.raises(GoJSONError):
        decode_identify(raw)


def test_nested_structs_as_auth_state_and_nsqd_dat():
    from nsqpy.protocol.gojson import ANY, BOOL, STRING, ListOf
    channel = {"name": STRING, "paused": BOOL, "config": ANY}  # upstream's nsqd.dat structs
    _METADATA = {"topics": ListOf({**channel, "channels": ListOf(channel)}), "version": STRING}
    from nsqpy.nsqd.auth.client import parse_state
    state = parse_state(b'{"ttl":60,"identity":"i","authorizations":[{"topic":".*","channels":'
                        b'[".*",null],"permissions":["publish"]},null],"Expires":null,"x":1e400}')
    assert (state.ttl, state.identity, len(state.authorizations)) == (60, "i", 2)
    for bad in (b'{"ttl":60,"authorizations":[{"topic":5}]}', b'{"ttl":60,"authorizations":{}}',
                b'{"ttl":60,"expires":"tomorrow"}', b'{"ttl":"60"}'):
        with pytest.raises(ValueError):
            parse_state(bad)
    doc = decode_struct(b'{"topics":[{"name":"t","paused":true,"channels":[{"name":"c"}]},'
                        b'{"name":"u","channels":null}],"version":"1.3.0"}', _METADATA)
    assert doc["topics"] == [{"name": "t", "paused": True, "channels": [{"name": "c"}]},
                             {"name": "u", "channels": None}]
    # a repeated nested object adds to the first, as Go decodes into the same struct
    assert decode_struct(b'{"a":{"x":"1"},"a":{"y":"2"}}',
                         {"a": {"x": gojson.STRING, "y": gojson.STRING}}) == {"a": {"x": "1", "y": "2"}}


def test_strings_slice():
    assert decode_strings(b"null") is None
    assert decode_strings(b'["a",null]') == ["a", ""]
    for raw in (b'"a"', b"[1]", b"{}", b"[[]]"):
        with pytest.raises(GoJSONError):
            decode_strings(raw)


def test_fast_path_is_taken_for_plain_documents():
    """/stats is plain ASCII: orjson's bytes are used (no slower exact rewrite)."""
    doc = {"version": "1.3.0", "topics": [{"topic_name": f"t{i}", "depth": i, "paused": False,
                                            "e2e": {"count": 0, "percentiles": None}}
                                           for i in range(100)]}
    import orjson
    assert dumps(doc) == orjson.dumps(doc)
    assert gojson._is_go(orjson.dumps(doc))


# --- against Go itself: each example a batch of cases for the oracle (helpers/gooracle.py) ------

_SPECIAL = st.sampled_from(["<", ">", "&", "\u2028", "\u2029", "\x7f", "\b", "\f", "\\", '"',
                            "\n", "\t", "\x00", "\ufffd", "\U0001F600", "\u212a", "\u017f"])
_TEXT = st.lists(st.one_of(st.characters(), _SPECIAL), max_size=20).map("".join)
_BATCH = {"min_size": 40, "max_size": 80}  # cases per batch (fewer for whole documents)
_SMALL_BATCH = {"min_size": 20, "max_size": 40}


@differential()
@given(raws=st.lists(st.one_of(st.binary(max_size=24),
                               _TEXT.map(lambda t: t.encode("utf-8", "surrogatepass"))), **_BATCH))
def test_strings_written_as_go_writes_them(go_oracle, raws):
    for raw, reply in zip(raws, go_oracle.ask(("s", [raw]) for raw in raws)):
        assert dumps(raw) == reply.data, raw
        assert dumps(raw.decode("utf-8", "surrogateescape")) == reply.data, raw


@differential()
@given(values=st.lists(st.floats(allow_nan=False, allow_infinity=False), **_BATCH))
def test_floats_written_as_go_writes_them(go_oracle, values):
    replies = go_oracle.ask(("f", [struct.pack(">d", value)]) for value in values)
    for value, reply in zip(values, replies):
        assert dumps(value) == reply.data, value


def _float64(value):
    """A value read into Go's interface{}: every number a float64."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return {k: _float64(v) for k, v in value.items()}
    return [_float64(v) for v in value]


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70),
              st.floats(allow_nan=False, allow_infinity=False), _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_TEXT, inner, max_size=4)), max_leaves=12)
# what a client may send that encoders do not write (not ``-0``: loads reads it as the int 0): escapes, bad bytes, lone halves, big numbers
_FRAGMENTS = st.sampled_from([b'"\\ud800"', b'"\\udc00\\ud800"', b'"a\xe2\x82x"', b'"\xff"',
                              b"1e400", b"-1e400", b"1e-400", b"123456789012345678901234567890",
                              b'"\\u00e9\\/"', b"[" * 1100 + b"]" * 1100, b'"\\u0041"', b" ",
                              b"{", b"]", b",", b"-0.0", b"0.0e+0", b"tru", b'"\x01"', b"\xef\xbb\xbf"])


@st.composite
def _document(draw) -> bytes:
    """A JSON document, often with odd pieces put in: some still JSON, most not."""
    raw = dumps(draw(_JSON))
    splice = draw(st.lists(_FRAGMENTS, max_size=3))
    if splice:
        piece, at = b"".join(splice), draw(st.integers(0, 40))
        raw = b"[" + piece + b"]" if at % 2 else raw[:at] + piece + raw[at:]
    return raw


def _read_as_go(raw: bytes) -> bytes | None:
    try:
        return dumps(_float64(loads(raw)), sort_keys=True)
    except GoJSONError:
        return None


@differential()
@given(raws=st.lists(_document().filter(lambda raw: re.search(rb"-0(?![.0-9eE])", raw) is None),
                     **_SMALL_BATCH))  # loads reads -0 as the int 0
def test_documents_read_as_go_reads_them(go_oracle, raws):
    replies = go_oracle.ask(("d", [raw]) for raw in raws)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # this test's own helpers recurse through the 1100 levels
    try:
        for raw, reply in zip(raws, replies):
            assert _read_as_go(raw) == reply.data, raw
    finally:
        sys.setrecursionlimit(limit)


_IDENTIFY_KEYS = st.sampled_from(["client_id", "hostname", "heartbeat_interval", "snappy",
                                  "sample_rate", "user_agent", "msg_timeout", "deflate_level",
                                  "CLIENT_ID", "Hostname", "ho\u017ftname", "\u212a", "tls_v1",
                                  "tl\u017f_v1", "SNAPPY", "unknown", "topology_zone"])
_IDENTIFY_VALUES = st.one_of(_JSON, st.sampled_from([1e400, 2147483648, -1, 1 << 63, 1.0]))


def _raw_value(value) -> bytes:
    return b"1e400" if value == 1e400 else dumps(value)


_IDENTIFY = st.lists(st.tuples(_IDENTIFY_KEYS, _IDENTIFY_VALUES), max_size=6).map(
    lambda pairs: b"{" + b",".join(dumps(k) + b":" + _raw_value(v) for k, v in pairs) + b"}")


def _identify_as_go(raw: bytes) -> bytes | None:
    """IDENTIFY read by nsqd, written back as Go marshals the struct (its zero values filled)."""
    try:
        data = decode_identify(raw)
    except GoJSONError:
        return None
    zero = {name: "" if kind == gojson.STRING else False if kind == gojson.BOOL else 0
            for name, kind in _identify_fields().items()}
    return dumps({**zero, **data})


@differential()
@given(raws=st.lists(_IDENTIFY, **_SMALL_BATCH))
def test_identify_read_as_upstream_reads_it(go_oracle, raws):
    for raw, reply in zip(raws, go_oracle.ask(("i", [raw]) for raw in raws)):
        assert _identify_as_go(raw) == reply.data, raw


def _identify_fields():
    from nsqpy.nsqd.v2 import client
    return client._IDENTIFY_FIELDS


def test_oracle_sees_the_known_cases(go_oracle):
    """The hand-written cases above are Go's too (they run without go; this checks them)."""
    replies = go_oracle.ask([
        ("s", [b"bs\bff\f"]), ("d", [b'"\\ud800"']), ("d", [b"1e400"]), ("i", [b'{"x":1e400}']),
        ("i", ['{"broadcast_addre\u00df":1}'.encode()]), ("d", [b"[" * 10001 + b"]" * 10001]),
        ("d", [b"[" * 10000 + b"]" * 10000])])
    assert [reply.data for reply in replies[:2]] == [dumps("bs\bff\f"), dumps("\ufffd")]
    assert [reply.error is None for reply in replies[2:]] == [False, True, True, False, True]
