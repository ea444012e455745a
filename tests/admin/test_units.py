"""nsqadmin's pure helpers: body decoding, base path, e2e aggregation, semver, producers."""

from __future__ import annotations

import pytest

from nsqpy.admin.clusterinfo import qs_escape
from nsqpy.admin.stats import E2eAggregate, Producer, semver_key
from nsqpy.admin.body import decode_body
from nsqpy.admin.respond import warn_message
from nsqpy.admin.options import normalize_base_path, parse_options

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize("raw, expected", [
    (b'{"action":"pause"}', {"action": "pause"}),
    (b'  {"action":"empty"} trailing', {"action": "empty"}),  # Go's Decoder reads one value
    (b"null", {"action": ""}),
    (b'{"Action":"pause"}', {"action": "pause"}),  # struct tags match case-insensitively
    (b"{}", {"action": ""}),
])
def test_decode_body(raw, expected):
    assert decode_body(raw, ("action",)) == expected


@pytest.mark.parametrize("raw, message", [
    (b"", "EOF"),
    (b"   ", "EOF"),
    (b"x", "invalid character 'x' looking for beginning of value"),
    (b'{"action":', "unexpected EOF"),
    (b"[]", 'json: cannot unmarshal array into Go value of type struct { Action string '
            '"json:\\"action\\"" }'),
    (b"{junk", "invalid character 'j' looking for beginning of object key string"),
    (b"nope", "invalid character 'o' in literal null (expecting 'u')"),
    (b'{"a":1 2}', "invalid character '2' after object key:value pair"),
    (b"1x", 'json: cannot unmarshal number into Go value of type struct { Action string '
            '"json:\\"action\\"" }'),
    (b'{"action":1}', "json: cannot unmarshal number into Go struct field .action of type string"),
])
def test_decode_body_errors(raw, message):
    with pytest.raises(ValueError) as err:
        decode_body(raw, ("action",))
    assert str(err.value) == message


@pytest.mark.parametrize("given, expected", [
    ("", "/"), ("/", "/"), ("admin", "/admin"), ("/admin/", "/admin"), ("//a/./b/../c", "/a/c"),
])
def test_normalize_base_path(given, expected):
    assert normalize_base_path(given) == expected


def test_options_defaults_and_config_keys(tmp_path):
    opts = parse_options([])
    assert opts.http_address == "0.0.0.0:4171" and opts.log_prefix == "[nsqadmin] "
    assert opts.acl_http_header == "X-Forwarded-User"
    assert opts.allow_config_from_cidr == "127.0.0.1/8"
    assert (opts.http_client_connect_timeout, opts.http_client_request_timeout) == (2.0, 5.0)
    cfg = tmp_path / "nsqadmin.cfg"
    cfg.write_text('nsqlookupd_http_addresses = ["a:4161", "b:4161"]\nadmin_users = ["alice"]\n')
    opts = parse_options([f"--config={cfg}", "--lookupd-http-address=c:4161"])
    assert opts.lookupd_http_address == ["c:4161"]  # the command line wins
    assert opts.admin_user == ["alice"]


def test_e2e_aggregate_averages_by_count():
    a = E2eAggregate.from_nsqd({"count": 1, "percentiles": [{"quantile": 0.99, "value": 100.0}]})
    b = E2eAggregate.from_nsqd({"count": 3, "percentiles": [{"quantile": 0.99, "value": 200.0}]})
    total = E2eAggregate(topic="t", host="x")
    total.add(a)
    total.add(b)
    doc = total.to_json()
    assert doc["count"] == 4 and doc["host"] == "*" and doc["topic"] == "t"
    [p] = doc["percentiles"]
    # upstream's Add compares the maxima for "min" too: the node added last gives it (200)
    assert p == {"average": 175, "count": 4, "max": 200, "min": 200, "quantile": 0.99}
    assert E2eAggregate.from_nsqd({"count": 0, "percentiles": None}).to_json()["percentiles"] is None


def test_semver_and_producer_addresses():
    assert semver_key("1.3.0") > semver_key("1.2.1") > semver_key("1.2.1-alpha") > semver_key("junk")
    p = Producer.from_lookupd({"broadcast_address": "::1", "http_port": 4151, "tcp_port": 4150,
                               "topics": ["a", "b"], "tombstones": [False, True]})
    assert p.http_address == "[::1]:4151" and p.tcp_address == "[::1]:4150"
    assert p.topics == [{"topic": "a", "tombstoned": False}, {"topic": "b", "tombstoned": True}]
    assert qs_escape("a b&c/d") == "a+b%26c%2Fd"


def test_warn_message():
    assert warn_message([]) == ""
    assert warn_message(["x\ny", "z"]) == "WARNING: x\ny; z"


def test_graphite_render_query_is_upstreams():
    from nsqpy.admin.graphite import render_query

    # Go's url.Values.Encode: keys sorted, query-escaped
    assert render_query("sumSeries(a.b)", 60) == (
        "format=json&from=-120sec&target=sumSeries%28a.b%29&until=-60sec")


@pytest.mark.parametrize("doc, rate", [
    ([{"target": "x", "datapoints": [[120.0, 1], [60.0, 2]]}], "2.00"),
    ([{"target": "x", "datapoints": [[1, 1]]}], "0.02"),
    ([{"target": "x", "datapoints": [[-1.0, 1]]}], "N/A"),
])
def test_graphite_rate_per_second(doc, rate):
    from nsqpy.admin.graphite import rate_from_render

    assert rate_from_render(doc, 60) == rate


@pytest.mark.parametrize("doc", [[], [{"datapoints": []}], [{"datapoints": [[None, 1]]}], {}, None])
def test_graphite_rate_where_upstream_panics(doc):
    from nsqpy.admin.graphite import rate_from_render

    with pytest.raises(ValueError):
        rate_from_render(doc, 60)
