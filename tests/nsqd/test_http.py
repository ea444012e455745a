"""nsqd's HTTP API against a real nsqd process: routes, status codes, messages, /stats, /config."""

from __future__ import annotations

import http.client
import os
import socket
import struct
import subprocess
import time

import orjson
import pytest

from helpers.servers import VENV_BIN, free_port, unique_name
from helpers.wire import Wire
from nsqpy.common.goweb import parse_query
from nsqpy.common.router import Router, clean_path
from nsqpy.nsqd.http_mpub import BinaryMpub, TextMpub
from nsqpy.protocol.message import IdFactory, text_run_lines, text_run_messages

pytestmark = pytest.mark.timeout(30)

NSQ_HEADER = "nsq; version=1.0"


class Resp:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    @property
    def json(self):
        return orjson.loads(self.body)

    @property
    def message(self) -> str:
        return orjson.loads(self.body)["message"]


def call(node, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None, chunked: bool = False) -> Resp:
    """One request, no redirect following, errors returned rather than raised."""
    conn = http.client.HTTPConnection("127.0.0.1", node.http_port, timeout=10)
    try:
        if chunked:
            conn.putrequest(method, path)
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            for i in range(0, len(body or b""), 300):
                piece = body[i:i + 300]
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        else:
            conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        expected = NSQ_HEADER if _is_v1(method, path, resp.status) else None
        assert hdrs.get("x-nsq-content-type") == expected, (method, path, hdrs)
        return Resp(resp.status, hdrs, data)
    finally:
        conn.close()


def _is_v1(method: str, path: str, status: int) -> bool:
    """Whether upstream answers with its V1 envelope (X-NSQ-Content-Type): not the plain-text
    routes (/ping, a refused /debug/setblockrate), httprouter's OPTIONS answers or redirects."""
    route = path.split("?", 1)[0]
    if status in (301, 307) or (method == "OPTIONS" and status == 200):
        return False
    if route == "/ping" and method == "GET":
        return False
    return not (route == "/debug/setblockrate" and method == "PUT" and status == 400)


def stats(node, **params) -> dict:
    query = "&".join(f"{k}={v}" for k, v in {"format": "json", **params}.items())
    r = call(node, "GET", f"/stats?{query}")
    assert r.status == 200, r.body
    return r.json


def topic_stats(node, topic: str) -> dict:
    (t,) = stats(node, topic=topic)["topics"]
    return t


def binary_mpub(bodies: list[bytes]) -> bytes:
    return struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


def wait_for(pred, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


@pytest.fixture
def node(shared_nsqd):
    return shared_nsqd


# --- pure helpers ------------------------------------------------------------------------------

def test_parse_query_follows_go():
    assert parse_query("topic=a&topic=b&x&y=1+2&z=%41") == {
        "topic": ["a", "b"], "x": [""], "y": ["1 2"], "z": ["A"]}
    assert parse_query("") == {}
    assert parse_query("&&a=1&") == {"a": ["1"]}
    for bad in ("a=%zz", "a=1;b=2", "a=%4"):
        with pytest.raises(ValueError):
            parse_query(bad)


def test_clean_path_and_router_lookup():
    assert clean_path("//ping") == "/ping"
    assert clean_path("/a/../b/./c/") == "/b/c/"
    assert clean_path("/..") == "/"

    r: Router[str] = Router()
    for method, path in (("GET", "/ping"), ("GET", "/config/:opt"), ("PUT", "/config/:opt")):
        r.add(method, path, path)
    assert r.match("GET", "/config/x")[1] == {"opt": "x"}
    assert r.match("GET", "/config/") is None and r.match("GET", "/config/a/b") is None
    assert r.unrouted("GET", "/ping/").location == "/ping"
    assert r.unrouted("GET", "/config/x/").location == "/config/x"
    assert r.unrouted("GET", "/CONFIG/Log_Level").location == "/config/Log_Level"
    assert r.unrouted("GET", "//Ping/").location == "/ping"
    assert r.allowed("/config/x", "POST") == "GET, OPTIONS, PUT"
    assert r.allowed("/nope", "POST") == ""


def _mpub(reader_class, pieces: list[bytes], max_body: int, max_msg: int, whole: bool = False):
    """A /mpub body fed to its reader in ``pieces``: the published bodies, or the error text.
    ``whole``: the text reader may hand the body over unsplit, which nsqd then publishes as a
    run (``NsqdHTTP._publish_text``) when ``text_run_lines`` can count it, or split."""
    published = []

    def publish(topic, bodies):
        published.append(bodies)
        return "published"

    def publish_whole(topic, body):
        n = text_run_lines(body)
        if not n:
            return publish(topic, list(filter(None, body.split(b"\n"))))
        msgs = text_run_messages(IdFactory(1).next_id_block(n), body, 0)
        return publish(topic, [m[1] for m in msgs])

    reader = (reader_class(publish, None, max_msg, max_body, publish_whole) if whole
              else reader_class(publish, None, max_msg, max_body))
    for piece in pieces:
        answer = reader.feed(piece)
        if answer is not None:
            break
    else:
        answer = reader.end()
    if answer == "published":
        return published[0]
    return orjson.loads(answer[1])["message"]


def _split(body: bytes, size: int) -> list[bytes]:
    return [body[i:i + size] for i in range(0, len(body), size)] or [b""]


@pytest.mark.parametrize("whole", [False, True])
@pytest.mark.parametrize("piece", [1, 2, 3, 7, 1000])
def test_text_mpub_matches_upstream_line_loop(piece, whole):
    def text(body: bytes, max_body: int, max_msg: int):
        return _mpub(TextMpub, _split(body, piece), max_body, max_msg, whole)

    assert text(b"a\n\nb\nc", 100, 10) == [b"a", b"b", b"c"]
    assert text(b"a\r\n", 100, 10) == [b"a\r"]
    assert text(b"", 100, 10) == []
    assert text(b"x" * 11 + b"\n", 100, 10) == "MSG_TOO_BIG"
    assert text(b"x" * 11, 100, 10) == "MSG_TOO_BIG"
    assert text(b"x" * 10, 100, 10) == [b"x" * 10]
    # the body holds more than max_body bytes: BODY_TOO_BIG
    assert text(b"ab\n" * 3 + b"a", 9, 10) == "BODY_TOO_BIG"
    assert text(b"ab\n" * 3, 9, 10) == [b"ab"] * 3
    assert text(b"ab\n" * 3 + b"\n", 9, 10) == "BODY_TOO_BIG"  # the newline is the 10th byte
    # an earlier long line wins over the body size, the line reaching the limit does not
    assert text(b"x" * 20 + b"\n" + b"y" * 10, 30, 10) == "MSG_TOO_BIG"
    assert text(b"x" * 5 + b"\n" + b"y" * 30, 30, 10) == "BODY_TOO_BIG"
    # bodies a run can hold (no empty line) and bodies it cannot, whole or in pieces
    assert text(b"ab\ncd\nef", 100, 10) == [b"ab", b"cd", b"ef"]
    assert text(b"ab\ncd\ne\n", 100, 10) == [b"ab", b"cd", b"e"]
    assert text(b"ab\ncd\n\n", 100, 10) == [b"ab", b"cd"]
    assert text(b"\nab\ncd", 100, 10) == [b"ab", b"cd"]
    assert text(b"ab\nc\nde", 100, 10) == [b"ab", b"c", b"de"]
    assert text(b"abc\nd\nefg\n", 100, 10) == [b"abc", b"d", b"efg"]


@pytest.mark.parametrize("piece", [1, 3, 5, 64, 100000])
def test_binary_mpub_read_as_it_streams(piece):
    def binary(body: bytes, max_body: int = 1000, max_msg: int = 100):
        return _mpub(BinaryMpub, _split(body, piece), max_body, max_msg)

    same = [b"m%02d" % i for i in range(40)]  # one size: the block path
    assert binary(binary_mpub(same)) == same
    mixed = [b"a", b"bb" * 30, b"ccc", b"d" * 100]
    assert binary(binary_mpub(mixed)) == mixed
    assert binary(binary_mpub([b"a", b"b"]) + b"trailing bytes are not read") == [b"a", b"b"]
    assert binary(b"") == "BAD_BODY"
    assert binary(b"\x00\x00") == "BAD_BODY"
    assert binary(struct.pack(">i", 0)) == "BAD_BODY"
    assert binary(struct.pack(">i", 199) + b"\x00") == "BAD_MESSAGE"
    assert binary(struct.pack(">i", 200)) == "BAD_BODY"  # over (1000 - 4) / 5
    assert binary(binary_mpub([b"x" * 101])) == "BAD_MESSAGE"
    assert binary(struct.pack(">ii", 1, 5) + b"abc") == "BAD_MESSAGE"
    assert binary(struct.pack(">ii", 2, 1) + b"a" + struct.pack(">i", -1)) == "BAD_MESSAGE"


# --- ping, info, routing -------------------------------------------------------------------------

def test_ping(node):
    r = call(node, "GET", "/ping")
    assert (r.status, r.body) == (200, b"OK")
    assert r.headers["content-type"].startswith("text/plain")


def test_info(node):
    r = call(node, "GET", "/info")
    assert r.status == 200 and r.headers["content-type"] == "application/json; charset=utf-8"
    info = r.json
    assert list(info) == ["version", "broadcast_address", "hostname", "http_port", "tcp_port",
                          "start_time", "max_heartbeat_interval", "max_output_buffer_size",
                          "max_output_buffer_timeout", "max_deflate_level"]
    assert info["version"] == "1.3.0"
    assert info["broadcast_address"] == "127.0.0.1"
    assert info["hostname"] == socket.gethostname()
    assert (info["http_port"], info["tcp_port"]) == (node.http_port, node.tcp_port)
    assert abs(info["start_time"] - time.time()) < 600
    assert info["max_heartbeat_interval"] == 60_000_000_000
    assert info["max_output_buffer_size"] == 65536
    assert info["max_output_buffer_timeout"] == 30_000_000_000
    assert info["max_deflate_level"] == 6


def test_unknown_path_wrong_method_options_head(node):
    r = call(node, "GET", "/nope")
    assert (r.status, r.message) == (404, "NOT_FOUND")
    r = call(node, "GET", "/pub")
    assert (r.status, r.message, r.headers["allow"]) == (405, "METHOD_NOT_ALLOWED", "OPTIONS, POST")
    r = call(node, "POST", "/ping")
    assert (r.status, r.headers["allow"]) == (405, "GET, OPTIONS")
    r = call(node, "DELETE", "/topic/delete?topic=x")
    assert (r.status, r.headers["allow"]) == (405, "OPTIONS, POST")
    r = call(node, "POST", "/config/log_level")
    assert (r.status, r.headers["allow"]) == (405, "GET, OPTIONS, PUT")
    r = call(node, "HEAD", "/ping")  # no implicit HEAD in httprouter
    assert (r.status, r.headers["allow"]) == (405, "GET, OPTIONS")
    r = call(node, "OPTIONS", "/stats")
    assert (r.status, r.body, r.headers["allow"]) == (200, b"", "GET, OPTIONS")
    assert call(node, "OPTIONS", "/nope").status == 404
    assert call(node, "GET", "/config/a/b").status == 404
    assert call(node, "GET", "/debug/pprof/").status == 404  # Go runtime profiling: not offered
    assert call(node, "GET", "/").status == 404


def test_redirects_like_httprouter(node):
    r = call(node, "GET", "/ping/")
    assert (r.status, r.headers["location"]) == (301, "/ping")
    assert r.body == b'<a href="/ping">Moved Permanently</a>.\n\n'
    r = call(node, "POST", "/pub/?topic=x&defer=1")
    assert (r.status, r.headers["location"], r.body) == (307, "/pub?topic=x&defer=1", b"")
    r = call(node, "GET", "/STATS?format=json")
    assert (r.status, r.headers["location"]) == (301, "/stats?format=json")
    assert b"&amp;" not in r.body
    r = call(node, "GET", "//stats?a=1&b=2")
    assert r.status == 301 and r.headers["location"].startswith("/stats?")
    assert b"&amp;" in r.body  # Go escapes the href
    r = call(node, "GET", "/Config/Max_Msg_Size")  # the parameter keeps its case
    assert (r.status, r.headers["location"]) == (301, "/config/Max_Msg_Size")
    r = call(node, "PUT", "/config/log_level/", body=b"info")
    assert (r.status, r.headers["location"]) == (307, "/config/log_level")
    assert call(node, "GET", "/pub/").status == 404  # no GET route to fix it to


# --- publishing --------------------------------------------------------------------------------

def test_http_pub_then_tcp_consume(node):
    topic = unique_name()
    r = call(node, "POST", f"/pub?topic={topic}", body=b"hello http")
    assert (r.status, r.body) == (200, b"OK")
    assert r.headers["content-type"].startswith("text/plain")
    sub = Wire(node.tcp_address)
    sub.sub(topic, "ch", rdy=5)
    m = sub.read_message()
    assert (m.body, m.attempts) == (b"hello http", 1)
    assert abs(m.timestamp - time.time_ns()) < 10 * 10**9
    sub.cmd(b"FIN", m.id)
    t = topic_stats(node, topic)
    assert (t["message_count"], t["message_bytes"]) == (1, len(b"hello http"))


def test_http_pub_with_defer(node):
    topic = unique_name()
    sub = Wire(node.tcp_address)
    sub.sub(topic, "ch", rdy=5)
    t0 = time.monotonic()
    assert call(node, "POST", f"/pub?topic={topic}&defer=600", body=b"later").status == 200
    assert call(node, "POST", f"/pub?topic={topic}&defer=0", body=b"now").status == 200
    assert sub.read_message().body == b"now"
    assert topic_stats(node, topic)["channels"][0]["deferred_count"] == 1
    assert sub.read_message().body == b"later"
    assert time.monotonic() - t0 >= 0.55


def test_pub_errors(node):
    topic = unique_name()
    cases = [
        (f"/pub?topic={topic}", b"", 400, "MSG_EMPTY"),
        ("/pub", b"", 400, "MSG_EMPTY"),  # the body is checked before the query
        ("/pub", b"x", 400, "MISSING_ARG_TOPIC"),
        ("/pub?topic=bad!name", b"x", 400, "INVALID_TOPIC"),
        ("/pub?topic=" + "a" * 65, b"x", 400, "INVALID_TOPIC"),
        ("/pub?topic=a%zz", b"x", 400, "INVALID_REQUEST"),
        (f"/pub?topic={topic}&defer=abc", b"x", 400, "INVALID_DEFER"),
        (f"/pub?topic={topic}&defer=-1", b"x", 400, "INVALID_DEFER"),
        (f"/pub?topic={topic}&defer=3600001", b"x", 400, "INVALID_DEFER"),
        (f"/pub?topic={topic}&defer=1.5", b"x", 400, "INVALID_DEFER"),
        # Go's time.Duration(ms) * time.Millisecond wraps around 64 bits: out of range...
        (f"/pub?topic={topic}&defer=9223372036854775", b"x", 400, "INVALID_DEFER"),
        (f"/pub?topic={topic}&defer=18446744073709551617", b"x", 400, "INVALID_DEFER"),
    ]
    for path, body, status, message in cases:
        r = call(node, "POST", path, body=body)
        assert (r.status, r.message) == (status, message), path
    # upstream creates the topic before it looks at defer
    t = topic_stats(node, topic)
    assert t["message_count"] == 0
    assert call(node, "POST", f"/pub?topic={topic}&defer=3600000", body=b"x").status == 200
    # ... and these wrap to a delay in range, which upstream accepts
    for wrapped in ("9223372036854776", "18446744073709552", "-9223372036854775808"):
        assert call(node, "POST", f"/pub?topic={topic}&defer={wrapped}", body=b"x").status == 200


def test_mpub_text_then_tcp_consume(node):
    topic = unique_name()
    r = call(node, "POST", f"/mpub?topic={topic}", body=b"one\ntwo\n\nthree\n")
    assert (r.status, r.body) == (200, b"OK")
    sub = Wire(node.tcp_address)
    sub.sub(topic, "ch", rdy=10)
    assert [sub.read_message().body for _ in range(3)] == [b"one", b"two", b"three"]
    r = call(node, "POST", f"/mpub?topic={topic}&binary=false", body=b"four")
    assert r.status == 200 and sub.read_message().body == b"four"
    assert call(node, "POST", f"/mpub?topic={topic}", body=b"").status == 200  # nothing to publish
    t = topic_stats(node, topic)
    assert (t["message_count"], t["message_bytes"]) == (4, 15)


@pytest.mark.parametrize("channels", [0, 1, 2])
def test_mpub_held_then_consumed_in_order(node, channels):
    """What nobody consumes yet waits, at the topic (no channel) or in each channel; text
    /mpub bodies without an empty line wait unsplit (as runs) beside other publishes. Depth
    and counters count their messages at once, and every channel, made before or after, gets
    every message in publish order, each with its own increasing id."""
    topic = unique_name()
    names = [f"ch{i}" for i in range(max(channels, 1))]
    assert call(node, "POST", f"/topic/create?topic={topic}").status == 200
    for name in names[:channels]:
        assert call(node, "POST", f"/channel/create?topic={topic}&channel={name}").status == 200
    bodies = [
        b"\n".join(b"a%03d" % i for i in range(100)),  # one width: a run
        b"\n".join(b"b%03d" % i for i in range(50)) + b"\n",  # the same, last newline
        b"c1\nc22\n\nc333",  # an empty line: split at once
        b"d-only",  # one line: a run
        b"e1\ne22\ne333\n",  # widths differ: a run
    ]
    want: list[bytes] = []
    for i, body in enumerate(bodies):
        assert call(node, "POST", f"/mpub?topic={topic}", body=body).status == 200
        want += filter(None, body.split(b"\n"))
        assert call(node, "POST", f"/pub?topic={topic}", body=b"p%d" % i).status == 200
        want.append(b"p%d" % i)
    t = topic_stats(node, topic)
    assert t["message_count"] == len(want) and t["message_bytes"] == sum(map(len, want))
    assert t["depth"] == (len(want) if not channels else 0)
    assert [c["depth"] for c in t["channels"]] == [len(want)] * channels
    for name in names:
        sub = Wire(node.tcp_address)
        sub.sub(topic, name, rdy=len(want))
        got = [sub.read_message() for _ in want]
        assert [m.body for m in got] == want
        ids = [m.id for m in got]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        assert all(m.attempts == 1 for m in got)
        sub.close()


@pytest.mark.parametrize("channel", [False, True])
def test_mpub_held_survives_a_clean_restart(nsqd_factory, channel):
    """What waits unsplit is written to the disk queue at shutdown, as any message."""
    node = nsqd_factory()
    topic = unique_name()
    if channel:
        assert call(node, "POST", f"/topic/create?topic={topic}").status == 200
        assert call(node, "POST", f"/channel/create?topic={topic}&channel=ch").status == 200
    body = b"\n".join(b"m%04d" % i for i in range(300))
    for _ in range(3):
        assert call(node, "POST", f"/mpub?topic={topic}", body=body).status == 200
    assert node.stop() == 0
    node = node.restart()
    t = topic_stats(node, topic)
    assert (t["channels"][0]["depth"] if channel else t["depth"]) == 900
    sub = Wire(node.tcp_address)
    sub.sub(topic, "ch", rdy=900)
    assert [sub.read_message().body for _ in range(900)] == body.split(b"\n") * 3


def test_mpub_binary_then_tcp_consume(node):
    topic = unique_name()
    bodies = [b"a\nb", b"\x00\xff" * 10, b"c"]
    for flag in ("true", "1", "yes"):  # any value but false/0 means binary
        r = call(node, "POST", f"/mpub?topic={topic}&binary={flag}", body=binary_mpub(bodies))
        assert (r.status, r.body) == (200, b"OK"), r.body
    r = call(node, "POST", f"/mpub?topic={topic}&binary=true", body=binary_mpub([b"chunked"] * 50),
             chunked=True)
    assert r.status == 200
    sub = Wire(node.tcp_address)
    sub.sub(topic, "ch", rdy=100)
    got = [sub.read_message().body for _ in range(59)]
    assert got[:3] == bodies and got[-1] == b"chunked"


def test_mpub_binary_errors(node):
    topic = unique_name()
    cases = [
        (b"", "BAD_BODY"),
        (b"\x00\x00", "BAD_BODY"),
        (struct.pack(">i", 0), "BAD_BODY"),
        (struct.pack(">i", -1), "BAD_BODY"),
        (struct.pack(">i", 2) + struct.pack(">i", 1) + b"a", "BAD_MESSAGE"),  # second size missing
        (struct.pack(">i", 1) + struct.pack(">i", 0), "BAD_MESSAGE"),
        (struct.pack(">i", 1) + struct.pack(">i", 5) + b"abc", "BAD_MESSAGE"),  # short body
        (struct.pack(">i", 1) + struct.pack(">i", 2_000_000) + b"abc", "BAD_MESSAGE"),  # > max-msg-size
    ]
    for body, message in cases:
        r = call(node, "POST", f"/mpub?topic={topic}&binary=true", body=body)
        assert (r.status, r.message) == (413, message), body
    assert topic_stats(node, topic)["message_count"] == 0  # all or nothing
    for path, status, message in [("/mpub", 400, "MISSING_ARG_TOPIC"),
                                  ("/mpub?topic=b@d", 400, "INVALID_TOPIC"),
                                  ("/mpub?topic=x;y", 400, "INVALID_REQUEST")]:
        r = call(node, "POST", path, body=b"x")
        assert (r.status, r.message) == (status, message)


def test_size_limits(nsqd_factory):
    node = nsqd_factory("--max-msg-size=100", "--max-body-size=1000")
    topic = unique_name()
    assert call(node, "POST", f"/pub?topic={topic}", body=b"x" * 100).status == 200
    r = call(node, "POST", f"/pub?topic={topic}", body=b"x" * 101)
    assert (r.status, r.message) == (413, "MSG_TOO_BIG")
    r = call(node, "POST", f"/pub?topic={topic}", body=b"x" * 101, chunked=True)  # no Content-Length
    assert (r.status, r.message) == (413, "MSG_TOO_BIG")
    r = call(node, "POST", f"/pub?topic={topic}", body=b"x" * 100, chunked=True)
    assert r.status == 200

    # text /mpub: whole body bounded by max-body-size, each line by max-msg-size
    ok = (b"y" * 99 + b"\n") * 10  # exactly 1000 bytes
    assert call(node, "POST", f"/mpub?topic={topic}", body=ok).status == 200
    r = call(node, "POST", f"/mpub?topic={topic}", body=ok + b"z")
    assert (r.status, r.message) == (413, "BODY_TOO_BIG")
    r = call(node, "POST", f"/mpub?topic={topic}", body=ok + b"z", chunked=True)
    assert (r.status, r.message) == (413, "BODY_TOO_BIG")
    r = call(node, "POST", f"/mpub?topic={topic}", body=b"a\n" + b"y" * 101 + b"\n")
    assert (r.status, r.message) == (413, "MSG_TOO_BIG")

    # binary /mpub: count bound (max-body-size - 4) / 5, message bound max-msg-size
    r = call(node, "POST", f"/mpub?topic={topic}&binary=true", body=binary_mpub([b"m"] * 199))
    assert r.status == 200
    r = call(node, "POST", f"/mpub?topic={topic}&binary=true",
             body=struct.pack(">i", 200) + b"\x00\x00\x00\x01m" * 199, chunked=True)
    assert (r.status, r.message) == (413, "BAD_BODY")
    r = call(node, "POST", f"/mpub?topic={topic}&binary=true", body=binary_mpub([b"x" * 101]))
    assert (r.status, r.message) == (413, "BAD_MESSAGE")
    r = call(node, "POST", f"/mpub?topic={topic}&binary=true", body=binary_mpub([b"x"] * 10) + b"\0" * 1000)
    assert (r.status, r.message) == (413, "BODY_TOO_BIG")  # Content-Length checked first

    # /config PUT bodies are bounded by max-msg-size too
    r = call(node, "PUT", "/config/log_level", body=b"x" * 101)
    assert (r.status, r.message) == (413, "INVALID_VALUE")
    assert topic_stats(node, topic)["message_count"] == 2 + 10 + 199


def _raw_exchange(port: int, request: bytes, then: bytes = b"", wait: float = 0.5) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        time.sleep(wait)
        s.settimeout(wait)
        first = b""
        try:
            first = s.recv(65536)
        except socket.timeout:
            pass
        if then:
            s.sendall(then)
            s.settimeout(5)
            while b"\r\n\r\n" not in first.split(b"100 Continue\r\n\r\n")[-1]:
                chunk = s.recv(65536)
                if not chunk:
                    break
                first += chunk
        return first


def test_expect_100_continue(nsqd_factory):
    node = nsqd_factory("--max-msg-size=100")
    topic = unique_name()
    head = (f"POST /pub?topic={topic} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            "Content-Length: {n}\r\n\r\n")
    # too big by Content-Length: answered at once, the body is never invited
    got = _raw_exchange(node.http_port, head.format(n=5000).encode())
    assert got.startswith(b"HTTP/1.1 413 ") and b"MSG_TOO_BIG" in got and b"100 Continue" not in got
    # acceptable: 100 Continue, then the real answer
    got = _raw_exchange(node.http_port, head.format(n=5).encode(), then=b"hello")
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK"), got


# --- topics and channels -----------------------------------------------------------------------

def test_topic_create_delete_errors(node):
    topic = unique_name()
    for method_path, status, message in [
        ("/topic/create", 400, "MISSING_ARG_TOPIC"),
        ("/topic/create?topic=b!d", 400, "INVALID_TOPIC"),
        ("/topic/create?topic=%", 400, "INVALID_REQUEST"),
        ("/topic/delete", 400, "MISSING_ARG_TOPIC"),
        (f"/topic/delete?topic={topic}", 404, "TOPIC_NOT_FOUND"),
        ("/topic/empty", 400, "MISSING_ARG_TOPIC"),
        ("/topic/empty?topic=b!d", 400, "INVALID_TOPIC"),
        (f"/topic/empty?topic={topic}", 404, "TOPIC_NOT_FOUND"),
        ("/topic/pause", 400, "MISSING_ARG_TOPIC"),
        (f"/topic/pause?topic={topic}", 404, "TOPIC_NOT_FOUND"),
        (f"/topic/unpause?topic={topic}", 404, "TOPIC_NOT_FOUND"),
        ("/topic/pause?topic=b!d", 404, "TOPIC_NOT_FOUND"),  # pause does not validate the name
    ]:
        r = call(node, "POST", method_path)
        assert (r.status, r.message) == (status, message), method_path
    r = call(node, "POST", f"/topic/create?topic={topic}")
    assert (r.status, r.body) == (200, b"") and "content-type" not in r.headers
    assert call(node, "POST", f"/topic/create?topic={topic}").status == 200  # idempotent
    assert topic_stats(node, topic)["topic_name"] == topic
    assert call(node, "POST", f"/topic/delete?topic={topic}").status == 200
    assert stats(node, topic=topic)["topics"] is None
    assert call(node, "POST", f"/topic/delete?topic={topic}").status == 404


def test_topic_empty_pause_unpause(node):
    topic = unique_name()
    call(node, "POST", f"/mpub?topic={topic}", body=b"1\n2\n3")
    assert topic_stats(node, topic)["depth"] == 3
    assert call(node, "POST", f"/topic/empty?topic={topic}").status == 200
    t = topic_stats(node, topic)
    assert (t["depth"], t["message_count"]) == (0, 3)

    assert call(node, "POST", f"/topic/pause?topic={topic}").status == 200
    assert topic_stats(node, topic)["paused"] is True
    sub = Wire(node.tcp_address)
    sub.sub(topic, "ch", rdy=5)
    call(node, "POST", f"/pub?topic={topic}", body=b"held")
    assert not sub.is_closed(0.3) and not sub.pending  # queued at the paused topic
    assert topic_stats(node, topic)["depth"] == 1
    text = call(node, "GET", f"/stats?topic={topic}").body.decode()
    assert f"*P [{topic:<15}]" in text
    assert call(node, "POST", f"/topic/unpause?topic={topic}").status == 200
    assert sub.read_message().body == b"held"
    assert topic_stats(node, topic)["paused"] is False


def test_channel_endpoint_errors(node):
    topic = unique_name()
    call(node, "POST", f"/topic/create?topic={topic}")
    for action in ("create", "delete", "empty", "pause", "unpause"):
        for query, status, message in [
            ("", 400, "MISSING_ARG_TOPIC"),
            ("?topic=b!d&channel=c", 400, "INVALID_ARG_TOPIC"),
            (f"?topic={topic}", 400, "MISSING_ARG_CHANNEL"),
            (f"?topic={topic}&channel=b!d", 400, "INVALID_ARG_CHANNEL"),
            ("?topic=nope_never_made&channel=c", 404, "TOPIC_NOT_FOUND"),
            ("?topic=a&channel=%zz", 400, "INVALID_REQUEST"),
        ]:
            r = call(node, "POST", f"/channel/{action}{query}")
            assert (r.status, r.message) == (status, message), (action, query)
        if action != "create":
            r = call(node, "POST", f"/channel/{action}?topic={topic}&channel=missing")
            assert (r.status, r.message) == (404, "CHANNEL_NOT_FOUND"), action


def test_channel_create_empty_pause_delete(node):
    topic = unique_name()
    call(node, "POST", f"/topic/create?topic={topic}")
    r = call(node, "POST", f"/channel/create?topic={topic}&channel=ch")
    assert (r.status, r.body) == (200, b"")
    call(node, "POST", f"/mpub?topic={topic}", body=b"a\nb")
    (ch,) = topic_stats(node, topic)["channels"]
    assert (ch["channel_name"], ch["depth"]) == ("ch", 2)  # the pre-created channel got them
    assert call(node, "POST", f"/channel/empty?topic={topic}&channel=ch").status == 200
    assert topic_stats(node, topic)["channels"][0]["depth"] == 0

    assert call(node, "POST", f"/channel/pause?topic={topic}&channel=ch").status == 200
    assert topic_stats(node, topic)["channels"][0]["paused"] is True
    sub = Wire(node.tcp_address)
    sub.sub(topic, "ch", rdy=5)
    call(node, "POST", f"/pub?topic={topic}", body=b"wait")
    assert not sub.is_closed(0.3) and not sub.pending
    assert call(node, "POST", f"/channel/unpause?topic={topic}&channel=ch").status == 200
    assert sub.read_message().body == b"wait"

    assert call(node, "POST", f"/channel/delete?topic={topic}&channel=ch").status == 200
    assert sub.is_closed(3.0)  # deleting a channel drops its consumers
    assert topic_stats(node, topic)["channels"] == []
    r = call(node, "POST", f"/channel/delete?topic={topic}&channel=ch")
    assert (r.status, r.message) == (404, "CHANNEL_NOT_FOUND")


# --- /stats --------------------------------------------------------------------------------------

TOPIC_KEYS = ["topic_name", "channels", "depth", "backend_depth", "message_count", "message_bytes",
              "paused", "e2e_processing_latency"]
CHANNEL_KEYS = ["channel_name", "depth", "backend_depth", "in_flight_count", "deferred_count",
                "message_count", "requeue_count", "timeout_count", "client_count", "clients",
                "paused", "e2e_processing_latency"]
CLIENT_KEYS = ["client_id", "hostname", "version", "remote_address", "state", "ready_count",
               "in_flight_count", "message_count", "finish_count", "requeue_count", "connect_ts",
               "sample_rate", "deflate", "snappy", "user_agent",
               "tls", "tls_cipher_suite", "tls_version", "tls_negotiated_protocol",
               "tls_negotiated_protocol_is_mutual"]
MEMORY_KEYS = ["heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
               "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes",
               "gc_total_runs"]


def test_stats_json_every_level(nsqd):
    topic = unique_name("s")
    other = unique_name("a")
    pub = Wire(nsqd.tcp_address)
    pub.identify(client_id="the-producer", hostname="prod.host", user_agent="pub/1.0")
    pub.pub(topic, b"first")
    pub.pub(other, b"other")
    sub = Wire(nsqd.tcp_address)
    sub.identify(client_id="the-consumer", hostname="cons.host", user_agent="sub/2.0")
    sub.sub(topic, "zz", rdy=3)
    m = sub.read_message()
    idle = Wire(nsqd.tcp_address)
    idle.sub(topic, "aa", rdy=0)

    doc = stats(nsqd)
    assert list(doc) == ["version", "health", "start_time", "topics", "memory", "producers"]
    assert (doc["version"], doc["health"]) == ("1.3.0", "OK")
    assert list(doc["memory"]) == MEMORY_KEYS
    assert all(isinstance(v, int) for v in doc["memory"].values())
    assert [t["topic_name"] for t in doc["topics"]] == [other, topic]  # sorted by name

    t = doc["topics"][1]
    assert list(t) == TOPIC_KEYS
    assert (t["depth"], t["backend_depth"], t["message_count"], t["message_bytes"], t["paused"]) == (
        0, 0, 1, 5, False)
    assert t["e2e_processing_latency"] == {"count": 0, "percentiles": None}
    assert [c["channel_name"] for c in t["channels"]] == ["aa", "zz"]  # sorted by name
    ch = t["channels"][1]
    assert list(ch) == CHANNEL_KEYS
    assert (ch["depth"], ch["in_flight_count"], ch["deferred_count"], ch["message_count"],
            ch["client_count"], ch["paused"]) == (0, 1, 0, 1, 1, False)
    (c,) = ch["clients"]
    assert list(c) == CLIENT_KEYS  # a consumer has no pub_counts
    assert (c["client_id"], c["hostname"], c["user_agent"], c["version"]) == (
        "the-consumer", "cons.host", "sub/2.0", "V2")
    assert (c["state"], c["ready_count"], c["in_flight_count"], c["message_count"]) == (3, 3, 1, 1)
    assert c["remote_address"] == "127.0.0.1:%d" % sub.sock.getsockname()[1]
    assert abs(c["connect_ts"] - time.time()) < 60
    assert c["tls"] is False and c["deflate"] is False and c["snappy"] is False

    (p,) = doc["producers"]
    assert list(p) == CLIENT_KEYS[:15] + ["pub_counts"] + CLIENT_KEYS[15:]
    assert (p["client_id"], p["hostname"]) == ("the-producer", "prod.host")
    assert len(p["pub_counts"]) == 1  # upstream stops after the first topic
    assert p["pub_counts"][0] in ({"topic": topic, "count": 1}, {"topic": other, "count": 1})

    sub.cmd(b"FIN", m.id)
    assert wait_for(lambda: stats(nsqd, topic=topic)["topics"][0]["channels"][1]["clients"][0]
                    ["finish_count"] == 1)

    # filters
    only = stats(nsqd, topic=other)
    assert [t["topic_name"] for t in only["topics"]] == [other]
    assert only["producers"][0]["pub_counts"] == [{"topic": other, "count": 1}]
    chan = stats(nsqd, topic=topic, channel="aa")
    assert [c["channel_name"] for c in chan["topics"][0]["channels"]] == ["aa"]
    assert stats(nsqd, channel="aa")["topics"] == chan["topics"]  # topics without "aa" skipped
    assert stats(nsqd, channel="nowhere")["topics"] == []
    missing = stats(nsqd, topic="never_created")
    assert (missing["topics"], missing["producers"]) == (None, None)

    lean = stats(nsqd, include_clients="false", include_mem="0")
    assert "memory" not in lean and lean["producers"] is None
    assert all(c["clients"] is None for t in lean["topics"] for c in t["channels"])
    assert all(c["client_count"] >= 1 for t in lean["topics"] for c in t["channels"])
    assert "memory" in stats(nsqd, include_mem="bogus")  # unknown booleans mean the default

    r = call(nsqd, "GET", "/stats?format=json&topic=%zz")
    assert (r.status, r.message) == (400, "INVALID_REQUEST")


def test_stats_no_producers_is_null(nsqd):
    sub = Wire(nsqd.tcp_address)
    sub.sub(unique_name(), "c")
    doc = stats(nsqd)
    assert doc["producers"] is None
    call(nsqd, "POST", f"/pub?topic={unique_name()}", body=b"x")  # HTTP publishers are not clients
    assert stats(nsqd)["producers"] is None


def test_stats_text_format(nsqd):
    topic = unique_name("t")
    pub = Wire(nsqd.tcp_address)
    pub.identify(hostname="ph", user_agent="ua")
    pub.pub(topic, b"abc")
    sub = Wire(nsqd.tcp_address)
    sub.identify(hostname="sh", user_agent="su")
    sub.sub(topic, "chan", rdy=1)
    sub.read_message()
    r = call(nsqd, "GET", "/stats")
    assert r.status == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.body.decode()
    lines = text.split("\n")
    assert lines[0].startswith("nsqd v1.3.0 (built w/")
    assert lines[1].startswith("start_time 20")
    assert lines[2].startswith("uptime ")
    assert lines[3:5] == ["", "Health: OK"]
    assert "\nMemory:\n   heap_objects             \t" in text
    assert f"\nTopics:\n   [{topic:<15}] depth: 0     be-depth: 0     msgs: 1        e2e%: \n" in text
    assert (f"      [{'chan':<25}] depth: 0     be-depth: 0     inflt: 1    def: 0    "
            f"re-q: 0     timeout: 0     msgs: 1        e2e%: \n") in text
    sport = sub.sock.getsockname()[1]
    assert f"        [V2 {f'sh:{sport} su':<21}] state: 3 inflt: 1    rdy: 1    fin: 0        " in text
    pport = pub.sock.getsockname()[1]
    assert f"\nProducers:\n   [V2 {f'ph:{pport} ua':<21}] msgs: 1        topics: {topic}=1 connected: " in text
    no_mem = call(nsqd, "GET", "/stats?include_mem=false&topic=nothing").body.decode()
    assert "Memory:" not in no_mem
    assert no_mem.endswith("\nTopics: None\n\nProducers: None\n")


def test_stats_e2e_latency(nsqd_factory):
    node = nsqd_factory("--e2e-processing-latency-percentile=1.0,0.5")
    topic = unique_name()
    call(node, "POST", f"/topic/create?topic={topic}")
    no_stream = {"count": 0, "percentiles": None}
    assert topic_stats(node, topic)["e2e_processing_latency"] == no_stream  # no channel yet
    sub = Wire(node.tcp_address)
    sub.sub(topic, "ch", rdy=10)
    empty = {"count": 0, "percentiles": [{"quantile": 1, "value": 0}, {"quantile": 0.5, "value": 0}]}
    t = topic_stats(node, topic)
    assert t["e2e_processing_latency"] == t["channels"][0]["e2e_processing_latency"] == empty
    call(node, "POST", f"/mpub?topic={topic}", body=b"1\n2\n3")
    for _ in range(3):
        sub.cmd(b"FIN", sub.read_message().id)
    t = wait_for(lambda: (x := topic_stats(node, topic))["channels"][0]["e2e_processing_latency"]
                 ["count"] == 3 and x)
    e2e = t["channels"][0]["e2e_processing_latency"]
    assert [p["quantile"] for p in e2e["percentiles"]] == [1, 0.5]
    assert all(p["value"] > 0 for p in e2e["percentiles"])
    assert t["e2e_processing_latency"]["count"] == 3
    assert b'"quantile":1,' in call(node, "GET", f"/stats?format=json&topic={topic}").body
    text = call(node, "GET", f"/stats?topic={topic}").body.decode()
    assert any(line.strip().startswith("[ch") and ("us, " in line or "ms, " in line)
               for line in text.splitlines())
    r = call(node, "GET", "/config/e2e_processing_latency_percentiles")
    assert r.body == b"[1,0.5]"


# --- /config -------------------------------------------------------------------------------------

def test_config_get(node):
    expected = {
        "max_msg_size": 1048576,
        "max_body_size": 5242880,
        "msg_timeout": 60_000_000_000,
        "max_req_timeout": 3_600_000_000_000,
        "output_buffer_timeout": 250_000_000,
        "sync_timeout": 2_000_000_000,
        "log_level": 2,
        "tls_min_version": 769,
        "tls_required": 0,
        "nsqlookupd_tcp_addresses": [],
        "auth_http_addresses": [],
        "e2e_processing_latency_percentiles": [],
        "broadcast_address": "127.0.0.1",
        "tcp_address": node.tcp_address,
        "log_prefix": "[nsqd] ",
        "deflate": True,
        "statsd_prefix": f"nsq.127_0_0_1_{node.http_port}.",  # resolved at start, as upstream
        "data_path": str(node.data_path),
    }
    for key, value in expected.items():
        r = call(node, "GET", f"/config/{key}")
        if isinstance(value, str):  # upstream answers a string option as the bare text
            assert (r.status, r.body.decode()) == (200, value), key
            assert r.headers["content-type"] == "text/plain; charset=utf-8"
            continue
        assert (r.status, r.json) == (200, value), key
        assert r.headers["content-type"] == "application/json; charset=utf-8"
    for key in ("statsd_address", "tls_cert"):  # an unset text option: no body, no type
        r = call(node, "GET", f"/config/{key}")
        assert (r.status, r.body, r.headers.get("content-type")) == (200, b"", None), key
    assert isinstance(call(node, "GET", "/config/id").json, int)
    for key in ("nope", "node_id", "verbose", "worker_id", "config", "version", "lookupd_tcp_address",
                "topology_zone", "topology_region", "auth_http_request_method", "enable_experiment"):
        r = call(node, "GET", f"/config/{key}")
        assert (r.status, r.message) == (400, "INVALID_OPTION"), key


def test_config_put(nsqd):
    r = call(nsqd, "PUT", "/config/log_level", body=b"DEBUG")
    assert (r.status, r.json) == (200, 1)
    assert call(nsqd, "GET", "/config/log_level").json == 1
    # the level applies at once: request lines are INFO
    assert call(nsqd, "PUT", "/config/log_level", body=b"error").json == 4
    call(nsqd, "GET", "/ping?quiet_marker")
    assert call(nsqd, "PUT", "/config/log_level", body=b"Info").json == 2
    call(nsqd, "GET", "/ping?loud_marker")
    assert wait_for(lambda: "200 GET /ping?loud_marker" in nsqd.log())
    assert "quiet_marker" not in nsqd.log()
    for body in (b"warning", b"debug\n", b"loud"):
        r = call(nsqd, "PUT", "/config/log_level", body=body)
        assert (r.status, r.message) == (400, "INVALID_VALUE"), body
    r = call(nsqd, "PUT", "/config/log_level", body=b"")
    assert (r.status, r.message) == (413, "INVALID_VALUE")

    # a closed port, not 4160: nsqd dials what it is given, and a make run there is a user's
    peers = [f"127.0.0.1:{free_port()}", "h:1"]
    r = call(nsqd, "PUT", "/config/nsqlookupd_tcp_addresses", body=orjson.dumps(peers))
    assert (r.status, r.json) == (200, peers)
    assert call(nsqd, "GET", "/config/nsqlookupd_tcp_addresses").json == peers
    for body in (b"not json", b'"a:1"', b"[1]", b'{"a": 1}'):
        r = call(nsqd, "PUT", "/config/nsqlookupd_tcp_addresses", body=body)
        assert (r.status, r.message) == (400, "INVALID_VALUE"), body
    assert call(nsqd, "PUT", "/config/nsqlookupd_tcp_addresses", body=b"[]").json == []
    # Go decodes null into a nil slice: stored and answered as null, as upstream does
    assert call(nsqd, "PUT", "/config/nsqlookupd_tcp_addresses", body=b"null").body == b"null"
    assert call(nsqd, "GET", "/config/nsqlookupd_tcp_addresses").body == b"null"

    for key in ("max_msg_size", "nope"):
        r = call(nsqd, "PUT", f"/config/{key}", body=b"1")
        assert (r.status, r.message) == (400, "INVALID_OPTION"), key


# --- Go runtime debug endpoints, health, unix socket ----------------------------------------------

def test_debug_endpoints_answer_like_upstream(node):
    r = call(node, "PUT", "/debug/setblockrate?rate=abc")
    assert (r.status, r.body) == (400, b'invalid block rate : strconv.Atoi: parsing "abc": invalid syntax')
    # upstream's plain-text decorator panics on these handlers' nil result: 500
    assert call(node, "PUT", "/debug/setblockrate?rate=1").status == 500
    r = call(node, "POST", "/debug/freememory")
    assert (r.status, r.message) == (500, "INTERNAL_ERROR")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_unhealthy_after_disk_failure(nsqd_factory, tmp_path):
    data = tmp_path / "sick"
    node = nsqd_factory("--mem-queue-size=0", data_path=data)
    topic = unique_name()
    assert call(node, "POST", f"/topic/create?topic={topic}").status == 200
    # a "disk" that is always full: every write of the first segment fails with ENOSPC
    os.symlink("/dev/full", data / f"{topic}.diskqueue.000000.dat")
    r = call(node, "POST", f"/pub?topic={topic}", body=b"x")
    assert (r.status, r.message) == (503, "EXITING")  # upstream maps every put error to this
    r = call(node, "GET", "/ping")
    assert r.status == 500 and r.body.startswith(b"NOK - ")
    assert stats(node)["health"].startswith("NOK - ")
    r = call(node, "POST", f"/mpub?topic={topic}", body=b"a\nb")
    assert (r.status, r.message) == (503, "EXITING")


def test_http_on_unix_socket(tmp_path):
    sock_path = tmp_path / "nsqd-http.sock"
    tcp_port = free_port()
    log = open(tmp_path / "log", "wb")
    proc = subprocess.Popen([str(VENV_BIN / "nsqd"), f"--tcp-address=127.0.0.1:{tcp_port}",
                             f"--http-address={sock_path}", f"--data-path={tmp_path}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        assert wait_for(lambda: sock_path.exists() or proc.poll() is not None, 10) and proc.poll() is None

        def unix_get(path: str) -> tuple[int, bytes]:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(5)
                s.connect(str(sock_path))
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            return int(head.split()[1]), body

        assert wait_for(lambda: unix_get("/ping") == (200, b"OK"), 5)
        status, body = unix_get("/info")
        info = orjson.loads(body)
        assert (status, info["http_port"], info["tcp_port"]) == (200, -1, tcp_port)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


# --- in-process: states a live server is hard to put in ---------------------------------------

def _in_process(tmp_path, scenario):
    """Run ``scenario(nsqd, base_url)`` against an NSQD whose HTTP API listens on a free port."""
    import asyncio
    import logging

    import aiohttp

    from nsqpy.nsqd.http import start_http
    from nsqpy.nsqd.main import parse_options
    from nsqpy.nsqd.nsqd import NSQD

    async def main():
        nsqd = NSQD(parse_options([f"--data-path={tmp_path}"]), logging.getLogger("test_http"))
        server, port = await start_http(nsqd, "127.0.0.1:0")
        try:
            async with aiohttp.ClientSession() as session:
                await scenario(nsqd, session, f"http://127.0.0.1:{port}")
        finally:
            await server.close()
            for topic in list(nsqd.topics.values()):
                topic.close(flush=False)

    asyncio.run(main())


def test_exiting_answers_503(tmp_path):
    async def scenario(nsqd, session, base):
        nsqd.exiting = True
        for path, body in (("/pub?topic=t", b"x"), ("/mpub?topic=t", b"a\nb")):
            async with session.post(base + path, data=body) as r:
                assert (r.status, await r.json()) == (503, {"message": "EXITING"})
        async with session.post(base + "/pub?topic=t&defer=-5", data=b"x") as r:
            assert r.status == 400  # argument errors are reported first, as upstream does

    _in_process(tmp_path, scenario)


def test_handler_exception_is_500_internal_error(tmp_path):
    async def scenario(nsqd, session, base):
        def broken(name):
            raise RuntimeError("boom")

        nsqd.get_topic = broken
        async with session.post(base + "/topic/create?topic=t") as r:
            assert (r.status, await r.json()) == (500, {"message": "INTERNAL_ERROR"})
            assert r.headers["X-NSQ-Content-Type"] == NSQ_HEADER
        async with session.get(base + "/ping") as r:  # the server carries on
            assert r.status == 200

    _in_process(tmp_path, scenario)


def test_put_lookupd_addresses_calls_the_nsqd_hook(tmp_path):
    async def scenario(nsqd, session, base):
        seen = []

        async def set_lookupd_addresses(addrs):
            seen.append(addrs)

        nsqd.set_lookupd_addresses = set_lookupd_addresses
        async with session.put(base + "/config/nsqlookupd_tcp_addresses", data=b'["a:1","b:2"]') as r:
            assert (r.status, await r.json()) == (200, ["a:1", "b:2"])
        assert seen == [["a:1", "b:2"]]
        assert nsqd.options.lookupd_tcp_address == ["a:1", "b:2"]

    _in_process(tmp_path, scenario)
