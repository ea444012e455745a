"""Unit tests of nsqd's /stats building blocks on stand-in objects (no server)."""

from __future__ import annotations

import gc
import time
from types import SimpleNamespace

import orjson
import pytest

from nsqpy.common.goweb import go_json
from nsqpy.nsqd.hooks import Upstream
from nsqpy.nsqd.stats import snapshot as s

pytestmark = pytest.mark.timeout(30)


def _client(**kw):
    base = dict(client_id="cid", hostname="host", remote_address="10.0.0.1:4242", state=3,
                ready_count=5, in_flight={b"a": 1, b"b": 2}, message_count=7, finish_count=4,
                requeue_count=1, connect_ts=int(time.time()) - 65, sample_rate=0, deflate=False,
                snappy=True, user_agent="ua/1", pub_counts={}, auth_state=None, tls_info=None)
    base.update(kw)
    return SimpleNamespace(**base)


# the daemon as a topic or channel sees it in a snapshot: upstream's lifecycle (no extra counters)
_HOST = SimpleNamespace(lifecycle=Upstream())


def _channel(name, clients=(), **kw):
    base = dict(nsqd=_HOST, name=name, mem=[b"m", b"m"], backend=SimpleNamespace(depth=1), depth=3,
                orphans=[], deferred=[1], message_count=9, requeue_count=1, timeout_count=0,
                clients=list(clients), paused=False, e2e=None)
    base.update(kw)
    return SimpleNamespace(**base)


def _topic(name, channels):
    return SimpleNamespace(nsqd=_HOST, name=name, channels={c.name: c for c in channels}, depth=0,
                           backend=SimpleNamespace(depth=0), message_count=9, message_bytes=90,
                           paused=False, history=None,
                           e2e_result=lambda: {"count": 0, "percentiles": None})


def test_client_stats_pub_counts_quirk():
    c = _client(pub_counts={"t1": 2, "t2": 3})
    assert s.client_stats(c)["pub_counts"] == [{"topic": "t1", "count": 2}]  # only the first
    assert s.client_stats(c, "t2")["pub_counts"] == [{"topic": "t2", "count": 3}]
    assert "pub_counts" not in s.client_stats(c, "t3")  # omitempty
    assert s.client_stats(c)["in_flight_count"] == 2


def test_collect_sorts_filters_and_nulls():
    ca = _client(pub_counts={"x": 1})
    nsqd = SimpleNamespace(topics={"b": _topic("b", [_channel("z"), _channel("a", [ca])]),
                                   "a": _topic("a", [_channel("m")])},
                           clients={1: ca, 2: _client()}, lifecycle=Upstream())
    topics, producers = s.collect(nsqd)
    assert [t["topic_name"] for t in topics] == ["a", "b"]
    assert [c["channel_name"] for c in topics[1]["channels"]] == ["a", "z"]
    assert [p["client_id"] for p in producers] == ["cid"] and len(producers) == 1
    assert s.collect(nsqd, "nope") == (None, None)
    topics, producers = s.collect(nsqd, channel_filter="z", include_clients=False)
    assert [t["topic_name"] for t in topics] == ["b"] and producers is None
    assert topics[0]["channels"][0]["clients"] is None


def test_json_entries_are_the_bytes_of_the_dicts():
    """``format=json`` writes plain clients from their fixed fields encoded once (issue #42):
    the document's bytes are those of the dict path, for names Go escapes too, after an
    IDENTIFY changes a fixed field, and for a client listed twice (consumer and producer)."""
    odd = _client(hostname='h"<&>\u2028\x01é', user_agent="ua\\b", client_id="\x7f")
    both = _client(client_id="both", pub_counts={"b": 3})
    plain = _client(stats_json=None)
    nsqd = SimpleNamespace(topics={"b": _topic("b", [_channel("c", [odd, both, plain])])},
                           clients={1: odd, 2: both, 3: plain}, lifecycle=Upstream(),
                           replicator=None, replicas=None, health="OK", start_time=1)
    for c in (odd, plain):
        c.stats_json = None

    def both_ways():
        topics, producers = s.collect(nsqd)
        jtopics, jproducers, floats = s.collect_json(nsqd)
        assert not floats
        return (go_json(s.stats_document(nsqd, topics, producers, None)),
                go_json(s.stats_document(nsqd, jtopics, jproducers, None), floats=False))

    by_dicts, by_text = both_ways()
    assert by_text == by_dicts and b"\\u003c" in by_text and b"both" in by_text
    assert isinstance(s.collect_json(nsqd)[0][0]["channels"][0]["clients"][2], s.RawJSON)
    plain.hostname, plain.message_count = "renamed", 99  # IDENTIFY, and traffic
    by_dicts, by_text = both_ways()
    assert by_text == by_dicts and b'"hostname":"renamed"' in by_text
    jtopics, jproducers, _ = s.collect_json(nsqd)
    assert jproducers[0] is jtopics[0]["channels"][0]["clients"][1]  # built once


def test_json_floats_are_announced():
    """A document that may hold a float (latency percentiles) says so, so its JSON is
    checked for Go's float spelling."""
    quantiles = SimpleNamespace(result=lambda: {"count": 1, "percentiles": [
        {"quantile": 0.99, "value": 1.5e-7}]}, percentiles=[0.99])
    nsqd = SimpleNamespace(topics={"t": _topic("t", [_channel("c", e2e=quantiles)])},
                           clients={}, lifecycle=Upstream(), replicator=None, replicas=None)
    topics, _, floats = s.collect_json(nsqd)
    assert floats and b'"value":1.5e-7' in go_json(topics, floats=floats)
    topics, _, floats = s.collect_json(SimpleNamespace(
        topics={"t": _topic("t", [_channel("c")])}, clients={}, lifecycle=Upstream(),
        replicator=None, replicas=None))
    assert not floats


def test_latency_numbers_print_like_go():
    e2e = s._latency({"count": 3, "percentiles": [{"quantile": 1.0, "value": 1500},
                                                  {"quantile": 0.99, "value": 12.0}]})
    assert go_json(e2e) == b'{"count":3,"percentiles":[{"quantile":1,"value":1500},{"quantile":0.99,"value":12}]}'
    assert s._latency(None) == {"count": 0, "percentiles": None}
    assert s._latency({"count": 0, "percentiles": None}, [0.99, 1.0]) == {
        "count": 0, "percentiles": [{"quantile": 0.99, "value": 0}, {"quantile": 1, "value": 0}]}
    assert s._e2e_text(e2e) == "1.5us, 12.0ns"
    assert s._nanos_to_human(2.5e9) == "2.5s" and s._nanos_to_human(3.25e6) == "3.2ms"


def test_go_json_escapes_html():
    assert go_json({"a": "<b>&\u2028"}) == b'{"a":"\\u003cb\\u003e\\u0026\\u2028"}'
    assert orjson.loads(go_json({"a": "<&>"})) == {"a": "<&>"}


def test_client_lines():
    now = time.time()
    consumer = s.client_stats(_client())
    line = s.client_line(consumer, now)
    assert line.startswith("[V2 host:4242 ua/1       ] state: 3 inflt: 2    rdy: 5    "
                           "fin: 4        re-q: 1        msgs: 7        connected: 1m")
    producer = s.client_stats(_client(pub_counts={"t": 12}))
    assert s.client_line(producer, now).startswith(
        "[V2 host:4242 ua/1       ] msgs: 12       topics: t=12 connected: 1m")


def test_text_document_shape():
    nsqd = SimpleNamespace(topics={}, clients={}, start_time=int(time.time()) - 5, health="OK")
    text = s.stats_text("nsqd v1.3.0 (built w/x)", nsqd, None, None, None)
    lines = text.split("\n")
    assert lines[0] == "nsqd v1.3.0 (built w/x)"
    assert lines[1].startswith("start_time ") and (lines[1].endswith("Z") or lines[1][-6] in "+-")
    assert lines[2].startswith("uptime ") and lines[2].endswith("s")
    assert text.endswith("\nHealth: OK\n\nTopics: None\n\nProducers: None\n")


def test_memory_stats_keys_and_gc_pauses():
    s.install_gc_pause_tracker()
    s.install_gc_pause_tracker()  # idempotent
    gc.collect()
    mem = s.memory_stats()
    assert list(mem) == ["heap_objects", "heap_idle_bytes", "heap_in_use_bytes",
                         "heap_released_bytes", "gc_pause_usec_100", "gc_pause_usec_99",
                         "gc_pause_usec_95", "next_gc_bytes", "gc_total_runs"]
    assert mem["heap_objects"] > 0 and mem["heap_in_use_bytes"] > 0 and mem["gc_total_runs"] > 0
    assert mem["gc_pause_usec_100"] >= mem["gc_pause_usec_95"] >= 0
    assert gc.callbacks.count(s._gc_callback) == 1
    gc.callbacks.remove(s._gc_callback)
    assert s._percentile(99.0, []) == 0
    assert s._percentile(50.0, [1, 2, 3, 4]) == 3  # floor(0.5 * 4 + 0.5) = 2


def test_startup_collection_is_not_a_reported_pause():
    """nsqd's one full collection at start-up (before ``gc.freeze()``) is not among the
    pauses /stats reports; the collections after it are."""
    from nsqpy.nsqd.main import release_startup_memory

    s.install_gc_pause_tracker()
    gc.disable()  # no young pass of the collector's own between the two lines below
    try:
        s._GC_PAUSES.clear()
        release_startup_memory()
        assert not s._GC_PAUSES and gc.callbacks.count(s._gc_callback) == 1
        gc.collect()
        assert len(s._GC_PAUSES) == 1
    finally:
        gc.enable()
        gc.unfreeze()  # (this test process goes on collecting what start-up froze)
        gc.callbacks.remove(s._gc_callback)
