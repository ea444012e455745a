"""The history's HTTP surface against a real nsqd: what is kept, how it is read, its errors."""

from __future__ import annotations

import time

import orjson
import pytest

from helpers.nsqd_http import stats
from helpers.servers import unique_name
from helpers.wire import Wire
from nsqpy.protocol.history_block import BlockSplitter

from .history_util import call, error, read, segments

pytestmark = pytest.mark.timeout(60)


def test_every_kind_of_publish_is_kept_with_id_timestamp_body_and_delay(nsqd_factory):
    node = nsqd_factory("--retention=1h")
    topic = unique_name()
    w = Wire(node.tcp_address)
    w.pub(topic, b"pub")
    w.mpub(topic, [b"mpub1", b"mpub2"])
    w.cmd(b"DPUB", topic, "5000", body=b"dpub")
    w.expect_ok()
    assert call(node, "POST", f"/pub?topic={topic}", b"http")[0] == 200
    assert call(node, "POST", f"/mpub?topic={topic}", b"h1\nh2")[0] == 200
    w.sub(topic, "c", 10)
    live = {m.body: m for m in (w.read_message() for _ in range(6))}  # the DPUB waits
    kept = read(node, topic)
    assert [m.body for m in kept] == [b"pub", b"mpub1", b"mpub2", b"dpub", b"http", b"h1", b"h2"]
    for m in kept:
        assert m.attempts == 1
        if m.body in live:  # the very id and timestamp consumers got
            assert (m.id, m.timestamp) == (live[m.body].id, live[m.body].timestamp)
    doc = segments(node, topic)
    assert doc["messages"] == 7 and doc["retention_ns"] == 3600 * 10**9
    assert doc["oldest_timestamp"] == kept[0].timestamp
    assert doc["newest_timestamp"] == max(m.timestamp for m in kept)
    assert sum(s["count"] for s in doc["segments"]) == 7
    h = [t for t in stats(node)["topics"] if t["topic_name"] == topic][0]["history"]
    assert h["messages"] == 7 and h["segments"] >= 1 and h["oldest_timestamp"] == kept[0].timestamp
    assert (node.data_path / f"{topic}.history").is_dir()


def test_ranges_by_time_unix_ms_and_segment(nsqd_factory):
    node = nsqd_factory("--retention=1h", "--retention-bytes=100000")  # segments of 12.5 KB
    topic = unique_name()
    w = Wire(node.tcp_address)
    for i in range(60):
        w.mpub(topic, [b"%03d-%d" % (i, j) + b"x" * 100 for j in range(5)])
        time.sleep(0.002)
    everything = read(node, topic)
    assert len(everything) == 300
    mid = everything[150].timestamp
    later = read(node, topic, f"&from={mid // 1_000_000 + 1}")
    assert later and all(m.timestamp >= (mid // 1_000_000 + 1) * 1_000_000 for m in later)
    assert later == [m for m in everything if m.timestamp >= (mid // 1_000_000 + 1) * 1_000_000]
    secs, frac = divmod(mid, 10**9)
    rfc = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"
    before = read(node, topic, f"&to={rfc}")
    assert before == [m for m in everything if m.timestamp < mid]
    doc = segments(node, topic)
    assert len(doc["segments"]) > 3
    by_segment = []
    for seg in doc["segments"]:
        part = read(node, topic, f"&segment={seg['segment']}")
        assert len(part) == seg["count"]
        by_segment += part
    assert by_segment == everything
    windowed = segments(node, topic, f"&from={rfc}")["segments"]
    assert windowed and all(s["last_timestamp"] >= mid or s["count"] for s in windowed)
    assert len(windowed) < len(doc["segments"])


def test_errors(nsqd_factory):
    node = nsqd_factory("--retention=1h")
    topic = unique_name()
    Wire(node.tcp_address).pub(topic, b"x")
    assert error(node, "GET", "/history/segments") == (400, "MISSING_ARG_TOPIC")
    assert error(node, "GET", "/history/read?topic=nope") == (404, "TOPIC_NOT_FOUND")
    assert error(node, "GET", f"/history/read?topic={topic}&from=yesterday") == (400, "INVALID_FROM")
    assert error(node, "GET", f"/history/read?topic={topic}&to=2026-13-01T00:00:00Z") == (400, "INVALID_TO")
    assert error(node, "GET", f"/history/read?topic={topic}&segment=x") == (400, "INVALID_SEGMENT")
    assert error(node, "GET", f"/history/read?topic={topic}&segment=999") == (404, "SEGMENT_NOT_FOUND")
    # a point before the first message of a log that never dropped anything misses nothing
    assert [m.body for m in read(node, topic, "&from=100000000000")] == [b"x"]  # 1973, in ms
    # a number below 10^11 can only be unix seconds: refused naming both units (issue #43), not
    # read as January 1970 (which read everything)
    status, message = error(node, "GET", f"/history/read?topic={topic}&from=1795927286")
    assert status == 400 and message.startswith("INVALID_FROM: ") and "seconds" in message, message
    assert "1795927286000 ms" in message and "milliseconds" in message, message
    assert error(node, "GET", f"/history/segments?topic={topic}&to=0")[1].startswith("INVALID_TO: ")
    assert error(node, "POST", f"/channel/create?topic={topic}&channel=s&from=1795927286")[1].startswith(
        "INVALID_FROM: ")
    assert error(node, "POST", f"/channel/create?topic={topic}&channel=c%23ephemeral&from=earliest") == (400, "EPHEMERAL")
    Wire(node.tcp_address).pub(f"{topic}_e#ephemeral", b"x")
    assert error(node, "GET", f"/history/segments?topic={topic}_e%23ephemeral") == (400, "EPHEMERAL")
    assert error(node, "POST", f"/channel/rewind?topic={topic}&channel=none&to=earliest") == (404, "CHANNEL_NOT_FOUND")
    assert error(node, "POST", f"/channel/rewind?topic={topic}&channel=c") == (400, "MISSING_ARG_TO")
    assert error(node, "POST", f"/channel/create?topic=nope&channel=c&from=earliest") == (404, "TOPIC_NOT_FOUND")
    # a topic that turned retention off keeps none
    assert call(node, "POST", f"/topic/config?topic={topic}", b'{"retention": "0s"}')[0] == 200
    assert error(node, "GET", f"/history/segments?topic={topic}") == (400, "RETENTION_OFF")
    assert not (node.data_path / f"{topic}.history").exists()
    assert error(node, "POST", f"/channel/create?topic={topic}&channel=c&from=earliest") == (400, "RETENTION_OFF")
    # without from=, /channel/create is upstream's
    assert call(node, "POST", f"/channel/create?topic={topic}&channel=plain")[0] == 200


def test_a_topic_setting_turns_history_on_without_flags_and_survives_a_restart(nsqd_factory):
    node = nsqd_factory()
    topic = unique_name()
    Wire(node.tcp_address).pub(topic, b"before")
    assert call(node, "GET", f"/history/segments?topic={topic}") == (404, b'{"message":"NOT_FOUND"}')
    status, body = call(node, "POST", f"/topic/config?topic={topic}",
                        b'{"retention": "2h", "retention_bytes": 1000000}')
    assert status == 200 and orjson.loads(body)["retention"] == "2h0m0s"
    Wire(node.tcp_address).pub(topic, b"after")
    assert [m.body for m in read(node, topic)] == [b"after"]
    node = node.restart()
    assert segments(node, topic)["retention_bytes"] == 1000000
    assert [m.body for m in read(node, topic)] == [b"after"]


def test_metrics_only_for_topics_with_history(nsqd_factory):
    node = nsqd_factory("--retention-bytes=1000000")
    topic, other = unique_name(), unique_name("eph") + "#ephemeral"
    Wire(node.tcp_address).mpub(topic, [b"a", b"bb"])
    Wire(node.tcp_address).pub(other, b"x")
    text = call(node, "GET", "/metrics")[1].decode()
    lines = {ln.split(" ")[0]: float(ln.split(" ")[1]) for ln in text.splitlines()
             if ln.startswith("nsqd_history_")}
    assert lines[f'nsqd_history_messages{{topic="{topic}"}}'] == 2
    assert lines[f'nsqd_history_segments{{topic="{topic}"}}'] == 1
    assert lines[f'nsqd_history_bytes{{topic="{topic}"}}'] == segments(node, topic)["bytes"]
    assert abs(lines[f'nsqd_history_oldest_timestamp_seconds{{topic="{topic}"}}'] - time.time()) < 30
    assert not [k for k in lines if "eph" in k]  # an ephemeral topic keeps no history
    plain = nsqd_factory()
    Wire(plain.tcp_address).pub(topic, b"a")
    assert "nsqd_history_" not in call(plain, "GET", "/metrics")[1].decode()


def test_before_oldest_once_expiry_dropped_what_was_asked_for(nsqd_factory):
    node = nsqd_factory("--retention-bytes=20000")  # segments of 4 KiB
    topic = unique_name()
    w = Wire(node.tcp_address)
    start = time.time_ns()
    for i in range(60):
        w.pub(topic, b"%03d" % i + b"y" * 500)
    doc = segments(node, topic)
    assert doc["bytes"] <= 20000 and doc["oldest_timestamp"] > start
    for method, path in (("POST", f"/channel/rewind?topic={topic}&channel=c&to={start // 10**6}"),
                         ("POST", f"/channel/create?topic={topic}&channel=c&from={start // 10**6}"),
                         ("GET", f"/history/read?topic={topic}&from={start // 10**6}"),
                         ("GET", f"/history/segments?topic={topic}&from={start // 10**6}")):
        status, body = call(node, method, path)
        err = orjson.loads(body)
        assert status == 400, (path, status)
        assert err["message"] == f"BEFORE_OLDEST: the oldest retained message is from {err['oldest']}"
        assert err["oldest_timestamp"] == doc["oldest_timestamp"]
    # from the oldest on, or earliest, all is there
    kept = read(node, topic, "&from=earliest")
    assert read(node, topic, f"&from={err['oldest']}") == kept and len(kept) == doc["messages"]
    node = node.restart("--retention-bytes=20000")  # it still knows something was dropped
    assert call(node, "GET", f"/history/read?topic={topic}&from={start // 10**6}")[0] == 400


def test_a_large_read_is_streamed_not_held(nsqd_factory):
    from helpers.proc import rss_kib

    node = nsqd_factory("--retention=1h", "--mem-queue-size=0")
    topic = unique_name()
    w = Wire(node.tcp_address, timeout=30)
    body = b"z" * 1000
    for _ in range(200):
        w.mpub(topic, [body] * 500)  # 100,000 messages, ~100 MB of history
    call(node, "POST", f"/topic/empty?topic={topic}")
    before = rss_kib(node.pid)
    import urllib.request

    peak, n = before, 0
    splitter = BlockSplitter()
    with urllib.request.urlopen(f"http://{node.http_address}/history/read?topic={topic}",
                                timeout=60) as resp:
        while True:
            chunk = resp.read(1 << 20)
            if not chunk:
                break
            splitter.feed(chunk)
            n += sum(splitter.take()[2])
            peak = max(peak, rss_kib(node.pid))
            time.sleep(0.001)  # a reader a little slower than nsqd
    splitter.close()
    assert n == 100_000
    assert peak - before < 40 * 1024, f"RSS grew by {(peak - before) / 1024:.0f} MiB"
