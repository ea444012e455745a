"""nsqlookupd's HTTP answers byte for byte against upstream v1.3.0's binary, over raw sockets:
status lines, header order and case, bodies, keep-alive or close, for ordinary requests and
for the malformed, odd and pipelined ones Go's ``net/http`` has its own answers to.

Upstream's side runs live with its binaries (``NSQ_UPSTREAM_BIN``), else comes from
``tests/recordings/http/test_http_bytes_upstream.json``.
``Date`` values are compared by shape only. Not listed, as they differ: a request line with two
spaces (``GET  /ping``, which llhttp reads and Go refuses) and an obs-folded header line (Go
joins it to the previous value, llhttp refuses it); an ignored 100-continue is the last test.
"""

from __future__ import annotations

import json
import re
import socket
import struct
from pathlib import Path

import pytest

from helpers.recording import live, recording
from helpers.servers import VENV_BIN, ServerProcess, free_port
from helpers.upstream import upstream_binary

RECORDED = recording("http", "test_http_bytes_upstream")
pytestmark = pytest.mark.timeout(180)

H = b"Host: x\r\n"
CASES = [
    b"GET /ping HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /info HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /lookup?topic=t1 HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /lookup?topic=nope HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /lookup HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /lookup?topic=a;b HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /lookup?x=%zz HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /channels?topic=t1 HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /debug HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /nodes HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /ping HTTP/1.0\r\n\r\n",
    b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /info HTTP/1.0\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n" + b"GET /ping HTTP/1.1\r\n" + H
    + b"\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"\r\nGET /info HTTP/1.1\r\n" + H
    + b"\r\nGET /nope HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /nope HTTP/1.1\r\n" + H + b"\r\n",
    b"HEAD /ping HTTP/1.1\r\n" + H + b"\r\n",
    b"DELETE /ping HTTP/1.1\r\n" + H + b"\r\n",
    b"get /ping HTTP/1.1\r\n" + H + b"\r\n",
    b"FOO /ping HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /ping/ HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /PING?x=1 HTTP/1.1\r\n" + H + b"\r\n",
    b"POST /Topic/Create/?topic=x HTTP/1.1\r\n" + H + b"\r\n",
    b"OPTIONS /ping HTTP/1.1\r\n" + H + b"\r\n",
    b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n",
    b"GET * HTTP/1.1\r\n" + H + b"\r\n",
    b"GET http://foo/ping HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /pi%6eg HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /pi%zzg HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /ping#frag HTTP/1.1\r\n" + H + b"\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"POST /topic/create?topic=t2 HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n\r\nhello",
    b"POST /topic/create?topic=t2 HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n0\r\n\r\n",
    b"POST /topic/create?topic=t2 HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /topic/create?topic=t2 HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n\r\nhel",
    b"POST /topic/create?topic=t2 HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\n"
    b"Content-Length: 3\r\n\r\n",
    b"POST /topic/create?topic=t2 HTTP/1.1\r\n" + H + b"Expect: teapot\r\nContent-Length: 3"
    b"\r\n\r\nabc",
    b"GET /lookup?topic=t1 HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    b"POST /ping HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n\r\nhello",
    b"GET /ping HTTP/1.1\r\n" + H + b"Content-Length: 300000\r\n\r\nhello",
    b"GET /ping HTTP/1.1\r\n" + H + b"Content-Length: 3000\r\n\r\nhello",
    b"GET /ping HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
    b"0\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"Connection: upgrade\r\nUpgrade: foo\r\n\r\nGET /info "
    b"HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /ping HTTP/1.1\nHost: x\n\n",
    b"GET /ping HTTP/1.2\r\n" + H + b"\r\n",
    b"\r\n\r\nGET /ping HTTP/1.1\r\n" + H + b"\r\n",
    # what Go's server refuses before any handler
    b"garbage\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n\r\n",
    b"GET /ping HTTP/2.0\r\n" + H + b"\r\n",
    b"GET /ping HTTP/0.9\r\n" + H + b"\r\n",
    b"GET /ping\r\n" + H + b"\r\n",  # no version: llhttp says 0.9, Go a plain 400
    b"! *\n\nGET /ping HTTP/1.1\r\n" + H + b"\r\n",  # (found by tests/security/test_fuzz.py)
    b"GET /ping HTTP/1.1\r\n" + H + b"\r\nGET /ping\r\n" + H + b"\r\n",  # (one read)
    b"GET /ping HTTP/1.1\r\nHost: a b\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"Host: y\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"Bad Header: y\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"Foo\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"Foo: a\x01b\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    b"POST /ping HTTP/1.1\r\n" + H + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabc",
    b"POST /ping HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip\r\n\r\n",
    b"POST /ping HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + H + b"X: " + b"a" * ((1 << 20) + 8192) + b"\r\n\r\n",
]


def start(bin_dir: Path, tmp: Path) -> tuple[ServerProcess, int, socket.socket]:
    """nsqlookupd from ``bin_dir`` with a producer of t1/c1 registered over TCP."""
    http, tcp = free_port(), free_port()
    proc = ServerProcess([str(bin_dir / "nsqlookupd"), f"--http-address=127.0.0.1:{http}",
                          f"--tcp-address=127.0.0.1:{tcp}", "--broadcast-address=127.0.0.1"],
                         f"http://127.0.0.1:{http}/ping", tmp / f"{bin_dir.name}.log")
    peer = socket.create_connection(("127.0.0.1", tcp), timeout=5)
    info = json.dumps({"version": "1.3.0", "tcp_port": 4150, "http_port": 4151,
                       "broadcast_address": "10.0.0.1", "hostname": "node"}).encode()
    peer.sendall(b"  V1IDENTIFY\n" + struct.pack(">i", len(info)) + info + b"REGISTER t1 c1\n")
    got = b""
    while got.count(b"OK") < 1 or not got.endswith(b"OK"):
        got += peer.recv(4096)
    return proc, http, peer


def exchange(port: int, data: bytes) -> bytes:
    """Everything the server sends back until it closes or goes quiet (0.4 s after the first
    bytes, which may take up to 5 s on a busy machine), and how it ended."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        s.settimeout(5)
        while True:
            if out:
                s.settimeout(0.4)
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                return out + b"<open>"
            except ConnectionResetError:
                return out + b"<closed>"
            if not chunk:
                return out + b"<closed>"
            out += chunk
    finally:
        s.close()


def normalized(answer: bytes) -> bytes:
    answer = re.sub(rb"Date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", b"Date: <date>", answer)
    return re.sub(rb'"(id|remote_address|last_update)":("[^"]*"|\d+)', rb'"\1":<varies>', answer)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(upstream's port, ours); upstream's None without its binaries (its answers are
    recorded)."""
    tmp = tmp_path_factory.mktemp("bytes")
    theirs = start(Path(upstream_binary("nsqlookupd")).parent, tmp) if live() else None
    ours = start(VENV_BIN, tmp)
    yield (theirs[1] if theirs else None), ours[1]
    for proc, _, peer in filter(None, (theirs, ours)):
        peer.close()
        proc.stop()


@pytest.mark.parametrize("data", CASES, ids=[c[:40].decode("latin-1") for c in CASES])
def test_same_bytes_as_upstream(pair, data):
    theirs, ours = pair
    upstream = RECORDED.answer(None, lambda: normalized(exchange(theirs, data)))
    assert normalized(exchange(ours, data)) == upstream


def test_ignored_100_continue_closes_where_go_hangs(pair):
    """Go answers ``Connection: close`` and then waits for a body that never comes (the
    client waits for 100); we close after the answer."""
    theirs, ours = pair
    data = b"GET /ping HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"
    go = RECORDED.answer(None, lambda: normalized(exchange(theirs, data)))
    assert normalized(exchange(ours, data)) == go.replace(b"<open>", b"<closed>")
