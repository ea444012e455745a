"""JSON side by side with upstream v1.3.0 (issue 37): IDENTIFY bodies with control characters,
invalid UTF-8, lone surrogates, huge numbers, deep nesting and folded keys get the same answer
from our nsqd and nsqlookupd as from upstream's, and what they show afterwards (nsqd's
``/stats``, nsqlookupd's ``/nodes``, ``/lookup``, ``/debug``) is the same bytes.

Each case runs alone (one client, one peer), so the answers hold one entry and Go's map order
does not matter; only what differs by nature is masked: ports, timestamps, memory figures.
Upstream's side runs live with its binaries (``NSQ_UPSTREAM_BIN``), else comes from
``tests/recordings/transcripts/test_upstream_json.json``.
"""

from __future__ import annotations

import re
import socket
import struct
import time
import urllib.request

import pytest

from helpers.recording import live, recording
from helpers.servers import NsqServer, ServerProcess, free_port
from helpers.upstream import upstream_binary
from helpers.wire import read_until_quiet

pytestmark = pytest.mark.timeout(300)
I32 = struct.Struct(">i").pack
RECORDED = recording("transcripts", "test_upstream_json")


class _Side:
    """One implementation's nsqd and nsqlookupd (not joined: the test plays nsqd to lookupd)."""

    def __init__(self, nsqd: str, nsqlookupd: str, tmp) -> None:
        self.nsqd_tcp, self.nsqd_http = free_port(), free_port()
        self.lookupd_tcp, self.lookupd_http = free_port(), free_port()
        tmp.mkdir(parents=True, exist_ok=True)
        self.lookupd = ServerProcess(
            [nsqlookupd, f"--tcp-address=127.0.0.1:{self.lookupd_tcp}",
             f"--http-address=127.0.0.1:{self.lookupd_http}", "--broadcast-address=127.0.0.1"],
            f"http://127.0.0.1:{self.lookupd_http}/ping", tmp / "nsqlookupd.log")
        try:
            self.nsqd = ServerProcess(
                [nsqd, f"--tcp-address=127.0.0.1:{self.nsqd_tcp}",
                 f"--http-address=127.0.0.1:{self.nsqd_http}", "--broadcast-address=127.0.0.1",
                 f"--data-path={tmp}"],
                f"http://127.0.0.1:{self.nsqd_http}/ping", tmp / "nsqd.log")
        except BaseException:
            self.lookupd.stop()
            raise

    def stop(self) -> None:
        self.nsqd.stop()
        self.lookupd.stop()

    def mask_ports(self, data: bytes) -> bytes:
        for port, name in ((self.nsqd_tcp, b"NSQD_TCP"), (self.nsqd_http, b"NSQD_HTTP"),
                           (self.lookupd_tcp, b"LOOKUPD_TCP"), (self.lookupd_http, b"LOOKUPD_HTTP")):
            data = re.sub(rb"(?<![0-9])%d(?![0-9])" % port, name, data)
        return data


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """(upstream's, ours); upstream's None without its binaries (its answers are recorded)."""
    upstream = None
    if live():
        up_nsqd, up_lookupd = upstream_binary("nsqd"), upstream_binary("nsqlookupd")
        upstream = _Side(up_nsqd, up_lookupd, tmp_path_factory.mktemp("upstream"))
    try:
        bin_dir = NsqServer.bin_dir
        ours = _Side(str(bin_dir / "nsqd"), str(bin_dir / "nsqlookupd"),
                     tmp_path_factory.mktemp("ours"))
    except BaseException:
        if upstream is not None:
            upstream.stop()
        raise
    yield upstream, ours
    if upstream is not None:
        upstream.stop()
    ours.stop()


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
        return answer.read()


# values that differ by nature between two runs (or machines): client ports, times, Go's memory
# figures, the host's name
_VARYING = [
    (re.compile(rb'("(?:remote_address|id)":"127\.0\.0\.1:)[0-9]+"'), rb'\1PORT"'),
    (re.compile(rb'"(connect_ts|start_time|last_update|uptime_seconds)":[0-9.]+'), rb'"\1":N'),
    (re.compile(rb'"uptime":"[^"]*"'), rb'"uptime":"U"'),
    (re.compile(rb'"memory":\{[^}]*\}'), rb'"memory":{M}'),
    # the machine's name (nsqlookupd lists nsqd's), so that a recording made here holds elsewhere
    (re.compile(rb'"hostname":"%s"' % re.escape(socket.gethostname().encode())), rb'"hostname":"H"'),
]


def _mask(side: _Side, data: bytes) -> bytes:
    for pattern, replacement in _VARYING:
        data = pattern.sub(replacement, data)
    return side.mask_ports(data)


# --- nsqd: IDENTIFY, then the client as /stats shows it -----------------------------------------

_DEEP = b"[" * 1100 + b"]" * 1100
NSQD_BODIES = [
    b'{"client_id":"bs\\bff\\f","hostname":"ctl\\u0001\\u001f<>&\\u2028\\u2029\x7f"}',
    b'{"client_id":"trunc\xe2\x82x","hostname":"\xff\xfe\xed\xa0\x80","user_agent":"ua\xc3"}',
    b'{"client_id":"\\ud800","hostname":"\\udc00x\\ud83d\\ude00\\ud800\\u0041"}',
    b'{"client_id":"big","x":1e400,"y":-1e400,"z":123456789012345678901234567890}',
    b'{"client_id":"deep","x":' + _DEEP + b"}",
    b'{"client_id":"deepest","x":' + b"[" * 9999 + b"]" * 9999 + b"}",
    b'{"client_id":"too deep","x":' + b"[" * 10000 + b"]" * 10000 + b"}",
    b'{"client_id":"zone","topology_zone":5,"topology_region":{"a":[1e400]}}',
    b'{"CLIENT_ID":"folded","ho\\u017ftname":"long s","Feature_Negotiation":true}',
    '{"client_id":"raw long s","ho\u017ftname":"h","user_agent\u212a":"kelvin"}'.encode(),
    b'{"client_id":"dup","hostname":"first","Hostname":null}',
    b'{"client_id":"esc","hostname":"a\\"b\\\\c\\/d\\te\\nf\\rg","feature_negotiation":true}',
    b"null",
    b'{"client_id":5}',
    b'{"heartbeat_interval":1e400}',
    b'{"msg_timeout":1.0}',
    b'{"sample_rate":2147483648}',
    b'{"snappy":"true"}',
    b'{"client_id":"x","unknown":[}',
    b'["client_id"]',
    b'{"client_id":"bad escape \\x"}',
    b'{"client_id":"ctl \x01 raw"}',
]


@pytest.mark.parametrize("body", NSQD_BODIES, ids=[f"{i:02d}" for i in range(len(NSQD_BODIES))])
def test_nsqd_identify_and_stats(sides, body):
    def exchange(side: _Side) -> tuple[bytes, bytes]:
        channel = f"c{NSQD_BODIES.index(body):02d}"
        sock = socket.create_connection(("127.0.0.1", side.nsqd_tcp), timeout=5)
        try:
            sock.sendall(b"  V2IDENTIFY\n" + I32(len(body)) + body)
            answer = read_until_quiet(sock, 0.5, first=30)  # IDENTIFY always answers
            stats = b""
            if answer.endswith(b"<open>"):  # accepted: subscribe, then look at it in /stats
                sock.sendall(f"SUB json {channel}\n".encode())
                answer += read_until_quiet(sock, 1.0, first=30)  # (SUB/REGISTER answer too)
                stats = _get(side.nsqd_http, f"/stats?format=json&topic=json&channel={channel}"
                                             "&include_mem=false")
            return side.mask_ports(answer), _mask(side, stats)
        finally:
            sock.close()

    upstream = RECORDED.answer(None, lambda: exchange(sides[0]))
    ours = exchange(sides[1])
    assert ours[0] == upstream[0]  # IDENTIFY's answer (and SUB's)
    assert ours[1] == upstream[1]  # /stats with the client


# --- nsqlookupd: IDENTIFY from a peer, then /nodes, /lookup, /debug -----------------------------

_PEER = b'"broadcast_address":"10.0.0.1","tcp_port":4150,"http_port":4151,"version":"1.3.0"'
LOOKUPD_BODIES = [
    b'{' + _PEER + b',"hostname":"bs\\bff\\f ctl\\u0001\\u001f<>&\\u2028\x7f"}',
    b'{' + _PEER + b',"hostname":"trunc\xe2\x82x\xff\xed\xa0\x80"}',
    b'{' + _PEER + b',"hostname":"\\ud800 \\udc00x \\ud83d\\ude00"}',
    b'{' + _PEER + b',"hostname":"big","x":1e400,"y":123456789012345678901234567890}',
    b'{' + _PEER + b',"hostname":"deep","x":' + _DEEP + b"}",
    b'{' + _PEER + b',"hostname":"too deep","x":' + b"[" * 10000 + b"]" * 10000 + b"}",
    b'{' + _PEER + b',"hostname":"zone","topology_zone":5,"topology_region":[1]}',
    b'{"BROADCAST_ADDRESS":"10.0.0.2","tcp_port":4150,"HTTP_PORT":4151,"Version":"1.3.0",'
    b'"HO\\u017fTNAME":"folded"}',
    '{"broadcast_addre\u00df":"10.0.0.1","tcp_port":4150,"http_port":4151,"version":"1.3.0"}'
    .encode(),
    '{"broadca\u017ft_address":"10.0.0.3","tcp_port":4150,"http_port":4151,"version":"1.3.0"}'
    .encode(),
    b'{' + _PEER + b',"hostname":"esc \\"q\\" \\\\ \\/ \\t\\n\\r"}',
    b'{' + _PEER + b',"tcp_port":1e400}',
    b'{' + _PEER + b',"version":1}',
    b'{' + _PEER + b',"hostname":"dup","Hostname":null,"remote_address":"1.2.3.4:5"}',
    b"null",
    b'{' + _PEER + b',',
]


def _peer_gone(side: _Side) -> bool:
    return _get(side.lookupd_http, "/nodes") == b'{"producers":[]}'


@pytest.mark.parametrize("body", LOOKUPD_BODIES, ids=[f"{i:02d}" for i in range(len(LOOKUPD_BODIES))])
def test_lookupd_identify_nodes_lookup_debug(sides, body):
    topic = f"json{LOOKUPD_BODIES.index(body):02d}"

    def exchange(side: _Side) -> tuple[bytes, list[bytes]]:
        deadline = time.monotonic() + 30
        while not _peer_gone(side):  # the previous case's peer is unregistered
            assert time.monotonic() < deadline, "a previous peer stayed registered"
            time.sleep(0.05)
        sock = socket.create_connection(("127.0.0.1", side.lookupd_tcp), timeout=5)
        try:
            sock.sendall(b"  V1IDENTIFY\n" + I32(len(body)) + body)
            answer = read_until_quiet(sock, 0.5, first=30)  # IDENTIFY always answers
            pages = []
            if answer.endswith(b"<open>"):
                sock.sendall(f"REGISTER {topic} ch\n".encode())
                answer += read_until_quiet(sock, 1.0, first=30)  # (SUB/REGISTER answer too)
                for path in ("/nodes", f"/lookup?topic={topic}", "/debug"):
                    pages.append(_mask(side, _get(side.lookupd_http, path)))
            return _mask(side, answer), pages
        finally:
            sock.close()

    upstream = RECORDED.answer(None, lambda: exchange(sides[0]))
    ours = exchange(sides[1])
    assert ours[0] == upstream[0]  # IDENTIFY's answer (and REGISTER's)
    assert ours[1] == upstream[1]  # /nodes, /lookup, /debug
