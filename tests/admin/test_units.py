"""nsqadmin's pure helpers: body decoding, base path, e2e aggregation, semver, producers."""

from __future__ import annotations

import pytest

from nsqpy.admin.clusterinfo import qs_escape
from nsqpy.admin.stats import E2eAggregate, Producer, TopicStats, semver_key
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


TOPIC_KEYS = ["node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth",
              "message_count", "nodes", "channels", "paused", "e2e_processing_latency"]
CHANNEL_KEYS = ["node", "hostname", "topic_name", "channel_name", "depth", "memory_depth",
                "backend_depth", "in_flight_count", "deferred_count", "requeue_count",
                "timeout_count", "message_count", "client_count", "nodes", "clients", "paused",
                "e2e_processing_latency"]


def _node_topic(port: int, depth: int) -> TopicStats:
    producer = Producer(hostname="host", broadcast_address="127.0.0.1", http_port=port)
    raw = {"topic_name": "t", "depth": depth, "backend_depth": 0, "message_count": depth,
           "channels": [{"channel_name": "c", "depth": depth, "backend_depth": 0,
                         "message_count": depth, "clients": [],
                         "e2e_processing_latency": {"count": 0, "percentiles": None}}],
           "e2e_processing_latency": {"count": 0, "percentiles": None}}
    return TopicStats.from_nsqd(raw, producer.http_address, producer, 0.0)


def test_topic_total_is_shaped_as_upstreams():
    """Upstream's TopicStats.Add: keys in its struct order, no delivery_msg_count, and the first
    node's channel object becomes the channel total, listing the other nodes under "nodes"."""
    total = TopicStats("", "", "t")
    total.add(_node_topic(1, 3))
    total.add(_node_topic(2, 5))
    doc = total.to_json()
    assert list(doc) == TOPIC_KEYS
    [channel] = doc["channels"]
    assert list(channel) == CHANNEL_KEYS
    first, second = doc["nodes"]
    assert list(first) == TOPIC_KEYS and first["nodes"] is None
    assert (doc["node"], doc["hostname"], doc["depth"]) == ("*", "", 8)
    assert first["channels"] == [channel]
    assert (channel["node"], channel["hostname"], channel["depth"]) == ("*", "host", 8)
    assert channel["nodes"] == second["channels"]
    assert second["channels"][0]["node"] == "127.0.0.1:2" and second["channels"][0]["depth"] == 5
    assert channel["e2e_processing_latency"] == {"count": 0, "percentiles": None, "topic": "",
                                                 "channel": "", "host": "*"}
    assert doc["e2e_processing_latency"]["topic"] == "t"


def test_one_node_topic_total_keeps_the_nodes_channel():
    total = TopicStats("", "", "t")
    total.add(_node_topic(1, 3))
    [channel] = total.to_json()["channels"]
    assert (channel["node"], channel["nodes"]) == ("127.0.0.1:1", None)


def test_rewind_summary_counts_what_a_rewind_replays():
    """The channel page's rewind confirmation (issue #43): the nsqd /history/segments answers
    summed; a segment that straddles a time point makes the count an upper bound."""
    from nsqpy.admin.rewind import parse_rewind_point, summary

    def seg(first: int, last: int, count: int) -> dict:
        return {"first_timestamp": first, "last_timestamp": last, "count": count}

    answers = [{"segments": [seg(10**18, 10**18 + 50, 3)]}, {"segments": [seg(10**18 + 5, 10**18 + 9, 5)]}]
    assert summary("earliest", answers) == {"messages": 8, "exact": True, "from": "2001-09-09T01:46:40Z", "nodes": 2}
    assert summary(10**18 + 7, answers) == {"messages": 8, "exact": False, "from": "2001-09-09T01:46:40.000000007Z",
                                            "nodes": 2}
    assert summary("latest", answers)["messages"] == 0
    assert summary(10**18 + 100, [{"segments": []}, {"segments": []}]) == {
        "messages": 0, "exact": True, "from": None, "nodes": 2}
    assert parse_rewind_point("1795927286000") == 1795927286000 * 10**6
    with pytest.raises(ValueError, match="not seconds"):
        parse_rewind_point("1795927286")
