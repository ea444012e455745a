"""Fuzzing with hypothesis (fault matrix rows 8-9): the sans-I/O parsers, then live servers.

* nsqd's V2 command parser and nsqlookupd's V1 parser: any byte stream, split anywhere, gives
  the same result as in one piece, never raises, and never buffers beyond the limits.
* live nsqd TCP (a plain one, and one with TLS offered and AUTH enabled against an auth server
  that is down), live nsqd HTTP and live nsqlookupd TCP: sessions built from valid, mutated and
  random commands, sent in random pieces. Every answer must be well-formed frames / HTTP, a 500
  only where upstream answers 500 on purpose, and afterwards the servers must still be up,
  answer /ping and have logged no traceback.

CI runs a bounded number of inputs (about 30 s in all); ``NSQPY_FUZZ_SCALE=20`` multiplies the
counts for a longer run (docs/security.md). Each test prints how many inputs it tried.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import urllib.request

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.servers import Nsqd, Nsqlookupd, free_port
from nsqpy.protocol.commands import MAX_LINE_LENGTH, CommandParser, Limits
from nsqpy.protocol.errors import FatalError
from nsqpy.protocol.frames import FrameDecoder
from nsqpy.protocol.lookup import LookupParser
from security.support import OPENSSL, make_certs

SCALE = float(os.environ.get("NSQPY_FUZZ_SCALE", "1"))
pytestmark = pytest.mark.timeout(int(120 * max(1.0, SCALE)))
LIMITS = Limits(max_msg_size=2000, max_body_size=10_000, max_req_timeout_ms=5000,
                max_defer_timeout_ms=5000)
I32 = struct.Struct(">i")


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


def fuzz_settings(n: int) -> settings:
    return settings(max_examples=examples(n), deadline=None, database=None, derandomize=False,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture
def report(capsys):
    """``report(target, count, seconds)`` prints a line into the test run's output."""

    def emit(target: str, count: int, seconds: float) -> None:
        with capsys.disabled():
            print(f"\n[fuzz] {target}: {count} inputs in {seconds:.1f}s")

    return emit


# --- strategies -------------------------------------------------------------------------------------

_NAMES = [b"PUB", b"MPUB", b"DPUB", b"SUB", b"RDY", b"FIN", b"REQ", b"TOUCH", b"NOP", b"CLS",
          b"AUTH", b"IDENTIFY", b"", b"FOO", b"pub", b"PUB\r"]
_BODY_NAMES = (b"PUB", b"MPUB", b"DPUB", b"AUTH", b"IDENTIFY")
_PARAMS = [b"t", b"topic_x#ephemeral", b"ch", b"ch#ephemeral", b"0", b"1", b"-1", b"2500", b"2501",
           b"99999999999999999999", b"0123456789abcdef", b"bad!name", b"a" * 65, b"", b"+5", b"\xff\xfe"]
_IDENTIFY_KEYS = ["client_id", "hostname", "user_agent", "feature_negotiation", "heartbeat_interval",
                  "output_buffer_size", "output_buffer_timeout", "tls_v1", "snappy", "deflate",
                  "deflate_level", "sample_rate", "msg_timeout", "short_id", "long_id"]

json_value = st.one_of(st.none(), st.booleans(), st.integers(-2, 70_000),
                       st.integers(-(2 ** 63), 2 ** 63 - 1), st.text(max_size=10),
                       st.lists(st.integers(-1000, 1000), max_size=2))
identify_body = st.one_of(
    st.dictionaries(st.sampled_from(_IDENTIFY_KEYS), json_value, max_size=6).map(orjson.dumps),
    st.binary(max_size=40),
)
param = st.one_of(st.sampled_from(_PARAMS), st.binary(max_size=12).filter(lambda b: b"\n" not in b))


@st.composite
def mpub_body(draw) -> bytes:
    bodies = draw(st.lists(st.binary(min_size=0, max_size=30), min_size=0, max_size=4))
    count = draw(st.one_of(st.just(len(bodies)), st.integers(-3, 3000)))
    out = [I32.pack(count)]
    for b in bodies:
        out.append(I32.pack(draw(st.one_of(st.just(len(b)), st.integers(-2, 5000)))))
        out.append(b)
    return b"".join(out)


@st.composite
def command(draw) -> bytes:
    name = draw(st.sampled_from(_NAMES))
    params = draw(st.lists(param, max_size=3))
    sep = draw(st.sampled_from([b" ", b" ", b" ", b"  "]))
    line = sep.join([name, *params]) + draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
    if name.rstrip(b"\r") not in _BODY_NAMES or draw(st.integers(0, 19)) == 0:
        return line  # (now and then a body command without its body)
    if name == b"IDENTIFY":
        body = draw(identify_body)
    elif name == b"MPUB":
        body = draw(mpub_body())
    else:
        body = draw(st.binary(max_size=60))
    size = draw(st.one_of(st.just(len(body)), st.just(len(body)), st.integers(-5, 20_000),
                          st.sampled_from([0x7FFFFFFF, -(2 ** 31)])))
    return line + I32.pack(size) + body


stream_part = st.one_of(command(), command(), command(), st.binary(min_size=1, max_size=40))
session = st.lists(stream_part, min_size=1, max_size=12).map(b"".join)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    pieces, prev = [], 0
    for c in sorted(set(min(max(0, c), len(data)) for c in cuts)) + [len(data)]:
        pieces.append(data[prev:c])
        prev = c
    return [p for p in pieces if p]


# --- sans-I/O parsers ---------------------------------------------------------------------------------

def _drain(parser: CommandParser, data: bytes) -> list:
    out = parser.feed(data)
    while out and parser.stop_after_identify and not parser.dead and isinstance(out[-1], tuple) \
            and out[-1][0] == b"IDENTIFY" and parser.buffered:
        more = parser.feed(b"")
        out += more
        if not more:
            break
    return out


def test_fuzz_v2_parser(report):
    count = 0
    started = time.monotonic()

    @fuzz_settings(1500)
    @given(session, st.lists(st.integers(0, 2000), max_size=8), st.booleans())
    def run(data, cuts, stop_after_identify):
        nonlocal count
        count += 1
        whole_parser = CommandParser(LIMITS)
        whole_parser.stop_after_identify = stop_after_identify
        whole = _drain(whole_parser, data)
        parser = CommandParser(LIMITS)
        parser.stop_after_identify = stop_after_identify
        pieces: list = []
        for piece in split(data, cuts):
            pieces += _drain(parser, piece)
            assert parser.buffered <= MAX_LINE_LENGTH + 5 + LIMITS.max_body_size
        if stop_after_identify:
            pieces += _drain(parser, b"")
        for item in whole:
            assert isinstance(item, (tuple, FatalError)), item
        assert [repr(x) for x in pieces] == [repr(x) for x in whole]
        assert not any(isinstance(x, FatalError) for x in whole[:-1])

    run()
    report("nsqd V2 command parser (split-anywhere equivalence)", count, time.monotonic() - started)


def test_fuzz_lookup_parser(report):
    count = 0
    started = time.monotonic()
    lookup_cmd = st.one_of(
        st.sampled_from([b"PING\n", b"IDENTIFY\n", b"REGISTER t c\n", b"UNREGISTER t\n",
                         b"REGISTER bad!t\n", b"  PING  \n", b"FOO\n", b"REGISTER\n"]),
        st.builds(lambda body, size: b"IDENTIFY\n" + I32.pack(size) + body,
                  st.binary(max_size=40), st.integers(-3, 60)),
        st.binary(max_size=30))

    @fuzz_settings(1000)
    @given(st.one_of(st.just(b"  V1"), st.binary(min_size=4, max_size=4)),
           st.lists(lookup_cmd, max_size=10).map(b"".join), st.lists(st.integers(0, 500), max_size=6))
    def run(magic, body, cuts):
        nonlocal count
        count += 1
        data = magic + body
        whole = LookupParser(10_000).feed(data)
        parser = LookupParser(10_000)
        pieces: list = []
        for piece in split(data, cuts):
            pieces += parser.feed(piece)
            assert parser.buffered <= MAX_LINE_LENGTH + 10_004
        assert [repr(x) for x in pieces] == [repr(x) for x in whole]

    run()
    report("nsqlookupd V1 parser (split-anywhere equivalence)", count, time.monotonic() - started)


# --- live servers ----------------------------------------------------------------------------------------

def _assert_healthy(node, what: str) -> None:
    assert node.proc.poll() is None, f"{what} exited with {node.proc.returncode}"
    with urllib.request.urlopen(node.health_url, timeout=5) as r:
        assert r.read() == b"OK"
    log = node.log()
    for needle in ("Traceback", "Exception in callback", "exception was never retrieved",
                   "panic in HTTP handler", "Unhandled"):
        assert needle not in log, f"{what} logged {needle!r}:\n{log[-5000:]}"


def _talk(port: int, pieces: list[bytes], read_for: float, rst: bool) -> bytes:
    """Send the pieces, read what comes back for a moment, then close (FIN or RST)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    got = bytearray()
    try:
        for p in pieces:
            sock.sendall(p)
        sock.settimeout(read_for)
        while len(got) < 1 << 20:
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            got += chunk
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        if rst:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    return bytes(got)


@pytest.fixture(scope="module")
def fuzz_nodes(tmp_path_factory):
    """A plain nsqd with small limits, and one with TLS offered and AUTH against a dead server."""
    base = tmp_path_factory.mktemp("fuzz")
    nodes = [Nsqd(base / "plain", "--max-msg-size=2000", "--max-body-size=10000",
                  "--max-req-timeout=5s", "--mem-queue-size=100")]
    try:
        extra = [f"--auth-http-address=127.0.0.1:{free_port()}", "--http-client-connect-timeout=200ms"]
        if OPENSSL is not None:
            certs = make_certs(base / "certs")
            extra += [f"--tls-cert={certs.server_cert}", f"--tls-key={certs.server_key}",
                      f"--https-address=127.0.0.1:{free_port()}"]
        nodes.append(Nsqd(base / "secure", *extra))
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def test_fuzz_live_nsqd_tcp(fuzz_nodes, report):
    count = 0
    started = time.monotonic()
    magic = st.one_of(st.just(b"  V2"), st.just(b"  V2"), st.just(b"  V2"), st.binary(max_size=5))

    @fuzz_settings(1200)
    @given(st.sampled_from([0, 1]), magic, session, st.lists(st.integers(0, 400), max_size=5),
           st.booleans())
    def run(which, head, data, cuts, rst):
        nonlocal count
        count += 1
        node = fuzz_nodes[which]
        got = _talk(node.tcp_port, split(head + data, cuts), 0.03, rst)
        for frame in FrameDecoder().feed(got):  # whatever came back is well-formed frames
            assert frame.frame_type in (0, 1, 2), frame

    run()
    for i, node in enumerate(fuzz_nodes):
        _assert_healthy(node, f"nsqd #{i}")
    report("live nsqd TCP (plain + TLS/AUTH-enabled)", count, time.monotonic() - started)


_ROUTES = ["/ping", "/info", "/pub", "/mpub", "/stats", "/topic/create", "/topic/delete",
           "/topic/empty", "/topic/pause", "/topic/unpause", "/channel/create", "/channel/delete",
           "/channel/empty", "/channel/pause", "/channel/unpause", "/config/log_level",
           "/config/nsqlookupd_tcp_addresses", "/config/max_msg_size", "/debug/pprof", "/", "//pub",
           "/PUB", "/pub/", "/../stats", "/config/", "/topic//create"]
_DELIBERATE_500 = ("/debug/setblockrate", "/debug/freememory")
_LOOKUPD_LIST = orjson.dumps([f"127.0.0.1:{free_port()}"])  # nothing listens there


@st.composite
def http_request(draw) -> bytes:
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "FOO"]))
    path = draw(st.one_of(st.sampled_from(_ROUTES), st.text(
        alphabet="/abcxyz%._-~", max_size=20).map(lambda t: "/" + t)))
    pairs = draw(st.lists(st.tuples(
        st.sampled_from(["topic", "channel", "defer", "binary", "format", "include_clients", "x",
                         "rate", ""]),
        st.one_of(st.sampled_from(["t", "ch", "json", "true", "1", "-1", "%zz", "a;b", "99999999999",
                                   "bad!name", ""]), st.text(alphabet="abc%+&=;1", max_size=6))),
        max_size=4))
    query = "&".join(f"{k}={v}" for k, v in pairs)
    target = path + ("?" + query if query or draw(st.booleans()) else "")
    body = draw(st.one_of(st.just(b""), st.binary(max_size=300), mpub_body(),
                          st.just(_LOOKUPD_LIST)))
    headers = ["Host: fuzz"]
    style = draw(st.sampled_from(["length", "length", "chunked", "none", "lie", "expect"]))
    if style == "length":
        headers.append(f"Content-Length: {len(body)}")
    elif style == "lie":
        headers.append(f"Content-Length: {draw(st.sampled_from([0, 1, len(body) + 5, 10**12]))}")
        body = body[:50]
    elif style == "expect":
        headers += [f"Content-Length: {len(body)}", "Expect: 100-continue"]
    elif style == "chunked":
        headers.append("Transfer-Encoding: chunked")
        body = (b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n") if body else b"0\r\n\r\n"
    headers.append("Connection: close")
    raw = f"{method} {target} HTTP/1.1\r\n" + "\r\n".join(headers) + "\r\n\r\n"
    if draw(st.integers(0, 9)) == 0:
        raw = draw(st.binary(max_size=80)).decode("latin-1") + raw  # garbage in front
    return raw.encode("latin-1", "replace") + body


def test_fuzz_live_nsqd_http(fuzz_nodes, report):
    count = 0
    started = time.monotonic()
    node = fuzz_nodes[0]

    @fuzz_settings(800)
    @given(http_request(), st.lists(st.integers(0, 200), max_size=3))
    def run(request, cuts):
        nonlocal count
        count += 1
        got = _talk(node.http_port, split(request, cuts), 0.2, False)
        if not got:
            return  # aiohttp may just close on garbage
        assert got.startswith(b"HTTP/1."), got[:80]
        status = int(got.split(b" ", 2)[1])
        if status >= 500:
            target = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b""
            assert status == 500 and any(p.encode() in target for p in _DELIBERATE_500), got[:300]

    run()
    _assert_healthy(node, "nsqd (HTTP)")
    report("live nsqd HTTP", count, time.monotonic() - started)


def test_fuzz_live_nsqlookupd_tcp(tmp_path, report):
    count = 0
    started = time.monotonic()
    node = Nsqlookupd(tmp_path / "lookupd")
    identify = orjson.dumps({"broadcast_address": "127.0.0.1", "tcp_port": 4150, "http_port": 4151,
                             "version": "1.3.0", "hostname": "fuzz"})
    lookup_cmd = st.one_of(
        st.sampled_from([b"PING\n", b"REGISTER t c\n", b"REGISTER t\n", b"UNREGISTER t c\n",
                         b"UNREGISTER t\n", b"REGISTER bad!t\n", b"FOO\n", b"IDENTIFY\n"]),
        st.just(b"IDENTIFY\n" + I32.pack(len(identify)) + identify),
        st.builds(lambda body, size: b"IDENTIFY\n" + I32.pack(size) + body,
                  st.one_of(st.binary(max_size=40), st.dictionaries(
                      st.sampled_from(["broadcast_address", "tcp_port", "http_port", "version",
                                       "hostname", "x"]), json_value, max_size=5).map(orjson.dumps)),
                  st.integers(-3, 100)),
        st.binary(max_size=30))
    try:
        @fuzz_settings(600)
        @given(st.one_of(st.just(b"  V1"), st.just(b"  V1"), st.binary(max_size=5)),
               st.lists(lookup_cmd, max_size=10).map(b"".join), st.lists(st.integers(0, 300), max_size=4),
               st.booleans())
        def run(magic, body, cuts, rst):
            nonlocal count
            count += 1
            got = _talk(node.tcp_port, split(magic + body, cuts), 0.03, rst)
            pos = 0
            while len(got) - pos >= 4:  # V1 answers: [int32 size][data]
                (size,) = I32.unpack_from(got, pos)
                assert 0 <= size <= 1 << 20, size
                pos += 4 + size

        run()
        _assert_healthy(node, "nsqlookupd")
    finally:
        node.stop()
    report("live nsqlookupd TCP", count, time.monotonic() - started)
