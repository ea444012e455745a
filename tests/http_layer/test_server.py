"""The HTTP layer's edges on a real loopback server: pipelining, bodies split, chunked, streamed,
refused or skipped, ``100 Continue``, deadlines, HTTPS with client certificates, unix sockets,
10k idle keep-alive connections, and Go's answers to requests it cannot read."""

from __future__ import annotations

import re
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from security.support import OPENSSL, make_certs

pytestmark = pytest.mark.timeout(120)

GET_PING = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"


def post(path: str, body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            .encode() + body)


def chunked(path: str, *pieces: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + body


# --- keep-alive, pipelining, the shape of answers ----------------------------------------------

def test_answer_bytes_are_gos(layer, client):
    c = client(layer().port)
    c.send(GET_PING)
    status, headers, body, head = c.read_answer()
    assert re.fullmatch(rb"HTTP/1\.1 200 OK\r\nDate: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT\r\n"
                        rb"Content-Length: 2\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n",
                        head), head
    assert body == b"OK"
    c.send(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")  # over Go's 2048-byte buffer: chunked
    status, headers, body, head = c.read_answer()
    assert headers["transfer-encoding"] == "chunked" and "content-length" not in headers
    assert body == b"x" * 5000


def test_the_handler_sees_headers_as_sent(layer, client):
    c = client(layer().port)
    c.send(b"GET /echo HTTP/1.1\r\nHost: x\r\nX-ECHO: Mixed Case\r\n\r\nGET /echo HTTP/1.1\r\n"
           b"Host: x\r\n\r\n")
    assert [c.read_answer()[2] for _ in range(2)] == [b"Mixed Case", b"-"]


def test_pipelined_requests_are_answered_in_order(layer, client):
    server = layer()
    c = client(server.port)
    # an awaiting handler in the middle: the ones after it wait for it, and are answered after
    c.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n" + GET_PING + post("/buffer", b"abc")
           + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
    answers = [c.read_answer() for _ in range(4)]
    assert [(a[0], a[2]) for a in answers] == [(200, b"slow"), (200, b"OK"), (200, b"got 3"),
                                               (404, b"404 page not found\n")]
    calls = server.app.rec.calls
    assert calls[:3] == ["slow start", "slow end", "GET /ping"]  # one handler at a time


def test_many_pipelined_requests_in_one_read(layer, client):
    c = client(layer().port)
    c.send(GET_PING * 200)
    assert [c.read_answer()[2] for _ in range(200)] == [b"OK"] * 200


def test_http10_and_connection_close(layer, client):
    port = layer().port
    c = client(port)
    c.send(b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert c.read_answer()[1]["connection"] == "keep-alive"
    c.send(b"GET /ping HTTP/1.0\r\n\r\n")
    status, headers, body, head = c.read_answer()
    assert head.startswith(b"HTTP/1.0 200 OK\r\n") and "connection" not in headers
    assert c.closed_within(5)
    c = client(port)
    c.send(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + GET_PING)
    assert c.read_answer()[1]["connection"] == "close"
    assert c.closed_within(5) and c.buf == b""  # the second request is never read


# --- bodies ---------------------------------------------------------------------------------------

def test_body_split_across_reads(layer, client):
    server = layer()
    c = client(server.port)
    c.send(b"POST /buffer HTTP/1.1\r\nHost: x\r\nContent-Len")
    time.sleep(0.05)
    c.send(b"gth: 10\r\n\r\nhel")
    time.sleep(0.05)
    c.send(b"lo wo")
    time.sleep(0.05)
    c.send(b"rl" + GET_PING)
    assert c.read_answer()[2] == b"got 10"
    assert c.read_answer()[2] == b"OK"
    assert server.app.rec.bodies == [b"hello worl"]


def test_chunked_bodies(layer, client):
    server = layer()
    c = client(server.port)
    c.send(chunked("/buffer", b"hello", b" ", b"world"))
    assert c.read_answer()[2] == b"got 11"
    c.send(chunked("/drain", b"x" * 1000, b"y" * 1000))
    assert c.read_answer()[2] == b"drained"
    c.send(chunked("/stream", b"abc", b"defg"))
    assert c.read_answer()[2] == b"7"
    assert server.app.rec.bodies == [b"hello world", b""]
    assert b"".join(server.app.rec.chunks[0]) == b"abcdefg"


def test_malformed_chunked_body(layer, client):
    """A handler reading the body sees a read error; the connection closes after its answer."""
    server = layer()
    c = client(server.port)
    c.send(b"POST /drain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    status, headers, body, _ = c.read_answer()
    assert (status, body, headers["connection"]) == (400, b"bad body", "close")
    assert c.closed_within(5)
    assert server.app.rec.bodies == [None]


def test_streamed_body_reaches_the_handler_as_it_arrives(layer, client, wait):
    server = layer()
    c = client(server.port)
    c.send(b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nabc")
    assert wait(lambda: server.app.rec.chunks and server.app.rec.chunks[0] == [b"abc"])
    c.send(b"def")
    assert wait(lambda: server.app.rec.chunks[0] == [b"abc", b"def"])
    c.send(b"ghi")
    assert c.read_answer()[2] == b"9"


def test_stream_refused_mid_body_then_the_rest_is_skipped(layer, client):
    server = layer()
    c = client(server.port)
    c.send(b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nab!")
    c.send(b"cdefgh" + GET_PING)  # the rest of the body, then another request
    assert c.read_answer()[:3:2] == (400, b"refused mid-body")
    assert c.read_answer()[2] == b"OK"  # the connection is still good


def test_oversized_content_length_is_refused_before_the_body(layer, client):
    server = layer()
    c = client(server.port)
    c.send(b"POST /buffer HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n" + b"a" * 1000)
    status, headers, body, _ = c.read_answer()  # answered with 9.99 MB still unsent
    assert (status, body, headers["connection"]) == (413, b"too big", "close")
    assert c.closed_within(5)
    assert server.app.rec.calls == ["refused"] and server.app.rec.bodies == []


def test_oversized_chunked_body_is_not_buffered(layer, client):
    """No length to refuse by: the handler gets its limit's worth, the rest is skipped up to
    Go's 256 KiB and the connection closed."""
    server = layer()
    c = client(server.port)
    c.send(b"POST /buffer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b"%x\r\n%s\r\n" % (64 << 10, b"a" * (64 << 10))
    status = None
    try:
        for _ in range(64):  # up to 4 MiB offered
            c.send(piece)
            c.sock.settimeout(0.05)
            try:
                c._fill()
                status, headers, body, _ = c.read_answer()
                break
            except socket.timeout:
                continue
    except (BrokenPipeError, ConnectionResetError):
        pass
    c.sock.settimeout(5)
    if status is None:
        status, headers, body, _ = c.read_answer()
    assert (status, body) == (413, b"too big")
    assert server.app.rec.bodies == [b"a" * 101]  # what the handler was given: its limit


def test_unread_small_body_is_skipped_and_the_connection_kept(layer, client):
    c = client(layer().port)
    c.send(b"POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + GET_PING)
    assert c.read_answer()[1].get("connection") is None
    assert c.read_answer()[2] == b"OK"


def test_unread_large_body_closes_the_connection(layer, client):
    c = client(layer().port)
    c.send(b"POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\nhello")
    status, headers, body, _ = c.read_answer()
    assert (status, headers["connection"]) == (200, "close")
    assert c.closed_within(5)


# --- Expect: 100-continue -------------------------------------------------------------------------

def test_100_continue_when_the_handler_wants_the_body(layer, client):
    c = client(layer().port)
    c.send(b"POST /buffer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
    assert c.read_until(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    c.send(b"hello")
    assert c.read_answer()[2] == b"got 5"


def test_no_100_continue_for_a_refused_body(layer, client):
    c = client(layer().port)
    c.send(b"POST /buffer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
           b"Content-Length: 1000\r\n\r\n")
    status, headers, body, head = c.read_answer()
    assert head.startswith(b"HTTP/1.1 413 ") and headers["connection"] == "close"
    assert c.closed_within(5)


def test_no_100_continue_for_a_handler_that_ignores_the_body(layer, client):
    c = client(layer().port)
    c.send(b"POST /ping HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
    status, headers, body, head = c.read_answer()
    assert head.startswith(b"HTTP/1.1 200 ") and headers["connection"] == "close"


def test_unknown_expectation_is_417(layer, client):
    c = client(layer().port)
    c.send(post("/buffer", b"abc", "Expect: teapot"))
    status, headers, body, head = c.read_answer()
    assert re.fullmatch(rb"HTTP/1\.1 417 Expectation Failed\r\nConnection: close\r\nDate: [^\r]+"
                        rb"\r\nContent-Length: 0\r\n\r\n", head)


# --- deadlines ------------------------------------------------------------------------------------

def test_half_a_request_is_closed_on_the_header_deadline(layer, client):
    server = layer(header_timeout=1.0, idle_timeout=30.0)
    c = client(server.port)
    c.send(b"GET /ping HTTP/1.1\r\nHost: x\r\n")  # and nothing more
    start = time.monotonic()
    assert c.closed_within(60)  # the event is due at 1 s; a busy machine may be late
    assert time.monotonic() - start > 0.5  # never before the deadline
    assert c.buf == b""  # closed without an answer, as Go's read deadline does


def test_a_stalled_body_is_closed_on_the_body_deadline(layer, client):
    server = layer(body_timeout=1.0, idle_timeout=30.0)
    c = client(server.port)
    c.send(b"POST /buffer HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nonly part")
    assert c.closed_within(6)


def test_idle_keep_alive_connections_are_closed_after_the_idle_timeout(layer, client):
    # deadlines are stamped with the one-second tick's clock, so they may fall up to a second
    # early: 2 s keeps a client asking every 0.3 s well inside its deadline
    server = layer(idle_timeout=2.0)
    c = client(server.port)
    c.send(GET_PING)
    assert c.read_answer()[2] == b"OK"
    assert c.closed_within(8)
    busy = client(server.port)  # one that keeps asking stays open
    for _ in range(6):
        busy.send(GET_PING)
        assert busy.read_answer()[2] == b"OK"
        time.sleep(0.3)


# --- HTTPS, unix sockets --------------------------------------------------------------------------

@pytest.mark.skipif(OPENSSL is None, reason="openssl CLI not installed")
def test_https_with_client_certificates(layer, tmp_path):
    certs = make_certs(tmp_path / "certs")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs.server_cert, certs.server_key)
    ctx.load_verify_locations(certs.ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    server = layer(ssl_context=ctx)

    def ask(with_cert: str | None) -> bytes:
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        tls = certs.client_context(with_cert).wrap_socket(raw, server_hostname="127.0.0.1")
        try:
            tls.sendall(b"GET /peer HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while not data.endswith((b"client-one", b"-")):
                chunk = tls.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data
        finally:
            tls.close()

    assert ask("client").endswith(b"\r\n\r\nclient-one")  # the handler sees the certificate
    assert ask(None).endswith(b"\r\n\r\n-")


def test_unix_socket_listener(layer, tmp_path):
    path = str(tmp_path / "http.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(16)
    layer(sock=sock)
    from http_layer.conftest import RawClient

    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.connect(path)
    c = RawClient(unix)
    try:
        c.send(GET_PING)
        assert c.read_answer()[2] == b"OK"
    finally:
        c.close()


# --- many idle connections ------------------------------------------------------------------------

def test_ten_thousand_idle_keep_alive_connections(tmp_path):
    """10k clients each asked once and stay connected, idle: the server holds them all (in its
    own process: one process may not be allowed the descriptors of both ends) and still
    answers at once, on new connections and idle ones."""
    want = 10_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = want + 500
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))  # the server inherits it
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "ping_server.py")],
                            stdout=subprocess.PIPE, text=True)
    socks: list[socket.socket] = []
    try:
        port = int(proc.stdout.readline())  # type: ignore[union-attr]
        for _ in range(want):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(GET_PING)
            got = b""
            while not got.endswith(b"OK"):
                got += s.recv(4096)
            socks.append(s)
        probe = socket.create_connection(("127.0.0.1", port), timeout=10)
        socks.append(probe)
        start = time.monotonic()
        probe.sendall(b"GET /connections HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while not got.endswith(b"%d" % (want + 1)):
            got += probe.recv(4096)
        for s in socks[::500]:  # idle ones still answer
            s.sendall(GET_PING)
            got = b""
            while not got.endswith(b"OK"):
                got += s.recv(4096)  # answered at all (how fast: not this test's business)
    finally:
        for s in socks:
            s.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --- requests Go cannot read: its exact answers ---------------------------------------------------

def go_error(status: str, text: str = "") -> bytes:
    public = status + (f": {text}" if text else "")
    return (f"HTTP/1.1 {public}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Connection: close\r\n\r\n{public}").encode()


BAD_REQUESTS = [
    (b"garbage\r\n\r\n", go_error("400 Bad Request")),
    (b"GET /ping HTTP/1.1\r\n\r\n", go_error("400 Bad Request", "missing required Host header")),
    (b"GET /ping HTTP/1.1\r\nHost: a b\r\n\r\n",
     go_error("400 Bad Request", "malformed Host header")),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", go_error("400 Bad Request")),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
     go_error("400 Bad Request", "invalid header name")),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nFoo\r\n\r\n", go_error("400 Bad Request")),
    (b"GET /ping HTTP/2.0\r\nHost: x\r\n\r\n",
     go_error("505 HTTP Version Not Supported", "unsupported protocol version")),
    (b"POST /ping HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
     b"HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain; charset=utf-8\r\n"
     b"Connection: close\r\n\r\nUnsupported transfer encoding"),
    (b"POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc",
     go_error("400 Bad Request")),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", go_error("400 Bad Request")),
    (b"GET /pi%zzg HTTP/1.1\r\nHost: x\r\n\r\n", go_error("400 Bad Request")),
    (b"\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n", go_error("400 Bad Request")),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nX: " + b"a" * ((1 << 20) + 8192) + b"\r\n\r\n",
     go_error("431 Request Header Fields Too Large")),
]


@pytest.mark.parametrize("request_bytes,answer", BAD_REQUESTS,
                         ids=[r[0][:24].decode("latin-1") for r in BAD_REQUESTS])
def test_bad_requests_are_answered_as_go_does(layer, client, request_bytes, answer):
    c = client(layer().port)
    try:
        c.send(request_bytes)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the 431 may come while the rest of the head is still being sent
    c.closed_within(5)
    assert c.buf == answer


def test_what_go_reads_and_llhttp_would_not(layer, client):
    """Any token is a method to Go (routed, so ``get`` is just an unknown method), HTTP/1.2 is
    1.x, bare LF ends lines, equal duplicate Content-Lengths are one."""
    server = layer()
    c = client(server.port)
    c.send(b"get /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert c.read_answer()[2] == b"OK" and server.app.rec.calls[-1] == "get /ping"
    for raw in (b"GET /ping HTTP/1.2\r\nHost: x\r\n\r\n", b"GET /ping HTTP/1.1\nHost: x\n\n",
                b"POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2"
                b"\r\n\r\nab"):
        c = client(server.port)
        c.send(raw)
        assert c.read_answer()[:3:2] == (200, b"OK"), raw
    # read again with a stand-in method, then refused: Go's answer, no failure of ours
    c = client(server.port)
    c.send(b"get /ping HTTP/1.1\r\n\r\n")
    c.closed_within(5)
    assert c.buf == go_error("400 Bad Request", "missing required Host header")
    assert server.errors == []


# --- garbage --------------------------------------------------------------------------------------

def test_mangled_requests_never_break_the_server(layer):
    """Random cuts, flips and splices of real requests: every connection gets an answer or a
    close, the server logs no failure of its own, and goes on answering."""
    import random

    from http_layer.conftest import RawClient

    rnd = random.Random(26)
    seeds = [GET_PING, post("/buffer", b"hello"), chunked("/stream", b"ab", b"cd"),
             chunked("/drain", b"x" * 50), post("/ping", b"abc", "Expect: 100-continue"),
             b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + GET_PING,
             b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"]
    server = layer(header_timeout=1.0, body_timeout=1.0)
    for _ in range(250):
        data = bytearray(b"".join(rnd.choice(seeds) for _ in range(rnd.randint(1, 3))))
        for _ in range(rnd.randint(1, 4)):
            op = rnd.random()
            pos = rnd.randrange(len(data))
            if op < 0.4:
                data[pos] = rnd.randrange(256)
            elif op < 0.7:
                del data[pos:pos + rnd.randint(1, 8)]
            else:
                data[pos:pos] = rnd.choice([b"\r\n", b":", b" ", b"%", b"\x00", b"0\r\n\r\n"])
        c = RawClient.tcp(server.port, timeout=3)
        try:
            c.send(bytes(data))
            c.closed_within(0.2)
        except OSError:
            pass
        finally:
            c.close()
    c = RawClient.tcp(server.port)
    c.send(GET_PING)
    assert c.read_answer()[2] == b"OK"
    c.close()
    assert server.errors == []


def test_a_client_that_does_not_read_its_answers_is_not_read_either(layer):
    """Pipelined requests whose answers pile up: once the transport's buffer is full the
    server stops reading, so what the client can push in is bounded by socket buffers."""
    server = layer(idle_timeout=30.0)
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    s.setblocking(False)
    request = b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n"  # 5000-byte answers
    sent = 0
    stalled_since = None
    try:
        while sent < 200 << 20:
            try:
                sent += s.send(request * 64)
                stalled_since = None
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 1.0:
                    break
                time.sleep(0.01)
        # ~each 30-byte request owes 5 KB; unbounded reading would accept all 200 MiB
        assert sent < 20 << 20, sent
        # and what the server holds for it is bounded too: answers handed to the transport,
        # and requests read but not yet handled (at most one read's worth)
        held = server.call(lambda: [(c.transport.get_write_buffer_size(), len(c.queue))
                                    for c in server.server.connections])
        assert len(held) == 1 and held[0][0] < 2 << 20 and held[0][1] < 10_000, held
    finally:
        s.close()


def test_request_log_is_flushed_before_the_answers_leave(layer, client):
    """Answers of the connections read in one loop iteration go out together, after one call
    of ``before_write`` (the daemons flush their request log there): a client never holds an
    answer whose request was not flushed to the log yet."""
    flushes: list[int] = []
    server = layer(before_write=lambda: flushes.append(len(server.app.rec.calls)))
    clients = [client(server.port) for _ in range(5)]
    for c in clients:
        c.send(GET_PING)
    for done, c in enumerate(clients, 1):
        assert c.read_answer()[2] == b"OK"
        handled = server.call(lambda: (len(server.app.rec.calls), list(flushes)))
        assert handled[1] and handled[1][-1] >= done, handled  # our request was logged first
    assert 1 <= len(flushes) <= 5 and flushes[-1] == 5
