"""Side by side with upstream nsqd v1.3.0: the same bytes on the TCP protocol get the same answers
and the same per-connection log lines (issue #10 items 1, 2 and 7).

Upstream's side runs live when ``NSQ_UPSTREAM_BIN`` names the directory holding its ``nsqd``
(built from source; never committed; found through ``helpers.upstream`` as the other side-by-side
tests); without it, its answers come from ``tests/recordings/transcripts/test_upstream_v2.json``.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import time
import urllib.request
import zlib

import pytest

from helpers.recording import live, recording
from helpers.servers import Nsqd, ServerProcess, free_port
from helpers.upstream import upstream_binary
from helpers.wire import read_until_quiet

pytestmark = pytest.mark.timeout(120)
I32 = struct.Struct(">i").pack
RECORDED = recording("transcripts", "test_upstream_v2")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(upstream, ours): both as processes on free loopback ports, stopped by PID; upstream's
    None without its binaries (its answers are recorded)."""
    upstream = None
    if live():
        up_dir = tmp_path_factory.mktemp("upstream")
        tcp, http = free_port(), free_port()
        upstream = ServerProcess([upstream_binary("nsqd"), f"--tcp-address=127.0.0.1:{tcp}",
                                  f"--http-address=127.0.0.1:{http}", f"--data-path={up_dir}"],
                                 f"http://127.0.0.1:{http}/ping", up_dir / "nsqd.log")
        upstream.tcp_address = f"127.0.0.1:{tcp}"  # type: ignore[attr-defined]
        upstream.http_address = f"127.0.0.1:{http}"  # type: ignore[attr-defined]
    ours = Nsqd(tmp_path_factory.mktemp("ours"))
    yield upstream, ours
    if upstream is not None:
        upstream.stop()
    ours.stop()


def _connect(address: str, magic: bytes = b"  V2") -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=2)
    sock.sendall(magic)
    return sock


def _answer(address: str, data: bytes, wait: float = 0.5) -> bytes:
    """All the server sent back, and whether it closed, for ``data`` sent after the magic."""
    sock = _connect(address)
    sock.sendall(data)
    try:
        return read_until_quiet(sock, wait)
    finally:
        sock.close()


CASES = [
    b"MPUB t\n" + I32(1000) + I32(0),
    b"MPUB t\n" + I32(1000) + I32(3) + I32(2) + b"ok" + I32(-1),
    b"MPUB t\n" + I32(1000) + I32(3) + I32(2000000),
    b"MPUB t\n" + I32(4) + I32(3) + b"PUB t\n",
    b"DPUB t -5\n",
    b"DPUB t +5\n",
    b"DPUB t \n" + I32(3) + b"abc",
    b"DPUB t 18446744073709551616\n" + I32(3) + b"abc",
    b"DPUB t 18446744073709551615\n",
    b"DPUB t 3600001\n",
    b"RDY 1\n",
    b"SUB t c\nRDY 18446744073709551615\n",
    b"SUB t c\nRDY \xff\n",
    b"SUB t c\nRDY -1\n",
    b"SUB t c\nRDY \n",
    b"SUB t c\nREQ 0123456789abcdef -5\n",
    b"SUB t c\nREQ 0123456789abcdef \n",
    b"SUB t c\nIDENTIFY\n" + I32(0x7FFFFFFF),
    b"SUB t c\nAUTH x\n",
    b"SUB t c\nCLS\nCLS\n",
    b"IDENTIFY\n" + I32(17) + b'{"sample_rate":1}',
    b'IDENTIFY\n' + I32(26) + b'{"sample_rate":2147483648}',
    b'IDENTIFY\n' + I32(28) + b'{"heartbeat_interval":10.5}',
    # fields v1.3.0's identifyDataV2 does not have: not type-checked (short_id and long_id were
    # dropped before 1.0; the topology labels come after 1.3.0)
    b'IDENTIFY\n' + I32(30) + b'{"short_id":5.5,"long_id":[1]}',
    b'IDENTIFY\n' + I32(40) + b'{"topology_zone":5,"topology_region":{}}',
]


def _identified_as(server, identify: dict) -> tuple[str, str]:
    """The client_id and hostname /stats shows for a producer that sent this IDENTIFY."""
    body = json.dumps(identify).encode()
    sock = _connect(server.tcp_address)
    try:
        sock.sendall(b"IDENTIFY\n" + I32(len(body)) + body + b"PUB ident\n" + I32(1) + b"x")
        time.sleep(0.3)
        with urllib.request.urlopen(f"http://{server.http_address}/stats?format=json&include_clients=true",
                                    timeout=5) as answer:
            stats = json.load(answer)
        me = "%s:%d" % sock.getsockname()
        [client] = [c for c in stats["producers"] if c["remote_address"] == me]
        return client["client_id"], client["hostname"]
    finally:
        sock.close()


def test_client_names_ignore_fields_upstream_does_not_have(servers):
    upstream, ours = servers
    identify = {"short_id": "sid", "long_id": "lid"}
    theirs = RECORDED.answer(None, lambda: _identified_as(upstream, identify))
    assert _identified_as(ours, identify) == theirs == ("", "")


@pytest.mark.parametrize("data", CASES, ids=[repr(c[:40]) for c in CASES])
def test_same_answer(servers, data):
    upstream, ours = servers
    theirs = RECORDED.answer(None, lambda: _answer(upstream.tcp_address, data))
    assert _answer(ours.tcp_address, data) == theirs


def _client_lines(server, me: str, until: str) -> list[str]:
    """The log lines naming this client, timestamps cut, its address replaced by ADDR: once
    ``until`` is there and the log has been quiet a moment (a line of another goroutine may
    still come after it)."""
    deadline = time.monotonic() + 30
    while until.replace("ADDR", me) not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = server.log()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if server.log() == seen:
            break
        seen = server.log()
    lines = []
    for line in server.log().splitlines():
        if me in line:
            line = re.sub(r"^\[nsqd\] \S+ \S+ ", "", line)
            lines.append(line.replace(me, "ADDR"))
    return lines


def _deflate_leaves(sock: socket.socket) -> None:
    body = json.dumps({"feature_negotiation": True, "deflate": True}).encode()
    sock.sendall(b"IDENTIFY\n" + I32(len(body)) + body)
    time.sleep(0.3)
    sock.recv(65536)  # the JSON answer and the compressed OK: read all, so our close is a FIN
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    sock.sendall(comp.compress(b"NOP\n") + comp.flush(zlib.Z_SYNC_FLUSH))


SCENARIOS = {
    "mid-line": lambda s: s.sendall(b"PUB t"),
    "mid-body": lambda s: s.sendall(b"PUB t\n" + I32(100) + b"few"),
    "mid-size": lambda s: s.sendall(b"PUB t\n\x00"),
    "mid-mpub": lambda s: s.sendall(b"MPUB t\n" + I32(100) + I32(2) + I32(1) + b"a"),
    "fatal": lambda s: s.sendall(b"FOO\n"),
    "parse": lambda s: s.sendall(b"DPUB t x\n"),
    "deflate": _deflate_leaves,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_same_log_lines(servers, name):
    def lines(server) -> list[str]:
        sock = _connect(server.tcp_address)
        host, port = sock.getsockname()[:2]
        me = f"{host}:{port}"
        SCENARIOS[name](sock)
        time.sleep(0.2)
        sock.close()
        return _after_ioloop_unordered(
            _client_lines(server, me, "PROTOCOL(V2): [ADDR] exiting messagePump"))

    upstream, ours = servers
    upstream_lines = RECORDED.answer(None, lambda: lines(upstream))
    assert lines(ours) == upstream_lines


def _after_ioloop_unordered(lines: list[str]) -> list[str]:
    """Upstream's lines after "exiting ioloop" come from two goroutines at once (the connection's
    handler logs the read error, the message pump its exit), in either order: sorted there."""
    end = next((i + 1 for i, line in enumerate(lines) if line.endswith("exiting ioloop")), len(lines))
    return lines[:end] + sorted(lines[end:])
