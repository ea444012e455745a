"""Hostile clients against resource limits (fault matrix rows 5-8, 11 of
python-broker-performance.md §3): partial commands that stall, floods that never read their
answers, slow consumers, thousands of idle connections, oversized sizes and lines, compression
bombs. The server must keep its memory bounded, cut such clients off (read/write deadlines as
upstream) and keep serving everyone else promptly."""

from __future__ import annotations

import json
import resource
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
import zlib

import pytest

from helpers.polling import wait_for
from helpers.proc import rss_kib
from helpers.servers import unique_name
from helpers.wire import Wire, pack_i32
from nsqpy.protocol.frames import FrameDecoder

pytestmark = pytest.mark.timeout(90)

MB = 1024 * 1024


def rss(pid: int) -> int:
    return rss_kib(pid) * 1024


def pub_latencies(address: str, n: int, topic: str | None = None) -> list[float]:
    wire = Wire(address, timeout=30)
    wire.identify()
    topic = topic or unique_name("probe")
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        wire.pub(topic, b"probe")
        out.append(time.perf_counter() - t0)
    wire.close()
    return out


def serves_others(address: str, n: int = 20) -> None:
    """Another producer's PUBs are answered meanwhile (Wire's read timeout, far beyond the
    milliseconds they take, fails the test if not). How fast is bench/hostile_bench.py's."""
    pub_latencies(address, n)


def p99(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


def flood(sock: socket.socket, chunk: bytes, seconds: float) -> tuple[int, bool]:
    """Send ``chunk`` repeatedly for ``seconds`` without reading; (bytes sent, was cut off)."""
    sock.settimeout(0.2)
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            sent += sock.send(chunk)
        except socket.timeout:
            continue
        except OSError:
            return sent, True
    return sent, False


# --- stalls and floods ------------------------------------------------------------------------------

def test_partial_command_then_stall_is_dropped_by_the_read_deadline(nsqd):
    wire = Wire(nsqd.tcp_address)
    wire.identify(heartbeat_interval=1000)
    wire.send(b"PUB " + unique_name("stall").encode() + b"\n" + pack_i32(100) + b"only part")
    t0 = time.monotonic()
    assert wire.is_closed(timeout=60)
    assert time.monotonic() - t0 >= 1.5  # 2 x heartbeat interval, as upstream: never sooner
    serves_others(nsqd.tcp_address)


@pytest.mark.timeout(240)  # the flood lasts until nsqd cuts it off (a few seconds when quiet)
def test_publisher_flooding_without_reading_is_bounded_and_cut_off(nsqd, capsys):
    base = rss(nsqd.pid)
    sock = socket.create_connection(("127.0.0.1", nsqd.tcp_port))
    sock.sendall(b"  V2")
    body = json.dumps({"heartbeat_interval": 1000}).encode()
    sock.sendall(b"IDENTIFY\n" + pack_i32(len(body)) + body)
    topic = unique_name("flood").encode()
    chunk = (b"PUB " + topic + b"\n" + pack_i32(8) + b"payload!") * 2000
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(zip(("sent", "cut"), flood(sock, chunk, 90))))
    t.start()
    time.sleep(1.0)  # the flood under way (how far it got does not matter)
    lat = pub_latencies(nsqd.tcp_address, 200)  # another producer meanwhile
    peak = rss(nsqd.pid)
    t.join(100)
    with capsys.disabled():
        print(f"\n[flood] producer sent {result['sent'] / MB:.1f} MiB before being cut off; "
              f"nsqd RSS +{(peak - base) / MB:.1f} MiB; others' PUB p99 {p99(lat) * 1e3:.2f} ms")
    assert result["cut"], result  # the write deadline aborted the flooder
    assert result["sent"] < 64 * MB, result  # our reads stopped: the kernel pushed back
    assert peak - base < 40 * MB, (peak - base) / MB
    assert "write timeout" in nsqd.log() or "read timeout" in nsqd.log()
    sock.close()


@pytest.mark.timeout(240)  # the flood lasts until nsqd cuts it off (a few seconds when quiet)
def test_consumer_flooding_without_reading_is_bounded_and_cut_off(nsqd, capsys):
    """A subscribed connection keeps being read (FIN must flow) only up to a bound."""
    base = rss(nsqd.pid)
    wire = Wire(nsqd.tcp_address)
    wire.identify(heartbeat_interval=1000)
    wire.sub(unique_name("cflood"), "ch")
    chunk = b"FIN 0123456789abcdef\n" * 5000  # each one answers E_FIN_FAILED (non-fatal)
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(zip(("sent", "cut"), flood(wire.sock, chunk, 90))))
    t.start()
    time.sleep(1.0)  # the flood under way (how far it got does not matter)
    lat = pub_latencies(nsqd.tcp_address, 200)
    peak = rss(nsqd.pid)
    t.join(100)
    with capsys.disabled():
        print(f"\n[flood] consumer sent {result['sent'] / MB:.1f} MiB before being cut off; "
              f"nsqd RSS +{(peak - base) / MB:.1f} MiB; others' PUB p99 {p99(lat) * 1e3:.2f} ms")
    assert result["cut"], result
    assert peak - base < 40 * MB, (peak - base) / MB
    wire.close()


def test_slow_consumer_is_cut_off_and_its_messages_go_to_others(nsqd_factory):
    """Rows 5 and 11: a consumer stops reading; its buffer fills (messages, then heartbeats
    cannot go out), the write deadline cuts it off and its in-flight messages are requeued."""
    node = nsqd_factory("--msg-timeout=3s")
    topic = unique_name("slow")
    pub = Wire(node.tcp_address)
    pub.identify()
    body = b"x" * 50_000
    for _ in range(4):
        pub.mpub(topic, [body] * 50)  # 200 messages, 10 MB
    slow = Wire(node.tcp_address)
    slow.identify(heartbeat_interval=1000)
    slow.sub(topic, "ch", rdy=2500)  # takes everything and never reads
    wait_for(lambda: "write timeout" in node.log(), timeout=60, what="the write deadline")
    assert "write timeout: slow consumer" in node.log()
    good = Wire(node.tcp_address, timeout=60)  # redelivery comes after --msg-timeout
    good.identify()
    good.sub(topic, "ch", rdy=200)
    got = [good.read_message() for _ in range(200)]  # redelivered after --msg-timeout
    assert all(m.attempts == 2 for m in got)
    for m in got:
        good.cmd(b"FIN", m.id)
    serves_others(node.tcp_address)
    for w in (pub, slow, good):
        w.close()


# --- many idle connections --------------------------------------------------------------------------

def test_thousands_of_idle_connections(nsqd_factory, capsys):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2000
    if hard < 2 * want + 200:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # nsqd inherits it
    try:
        node = nsqd_factory()
        before_lat = pub_latencies(node.tcp_address, 100)
        base = rss(node.pid)
        socks = []
        for i in range(want):
            s = socket.create_connection(("127.0.0.1", node.tcp_port))
            if i % 2:
                s.sendall(b"  V2")  # half got as far as the magic, half said nothing at all
            socks.append(s)
        time.sleep(1.0)
        grown = rss(node.pid) - base
        lat = pub_latencies(node.tcp_address, 300)
        with urllib.request.urlopen(f"http://{node.http_address}/ping", timeout=5) as r:
            assert r.read() == b"OK"
        with capsys.disabled():
            print(f"\n[idle] {want} idle connections: nsqd RSS +{grown / MB:.1f} MiB "
                  f"({grown / want:.0f} B/conn); PUB p50 {statistics.median(lat) * 1e3:.2f} ms "
                  f"(before {statistics.median(before_lat) * 1e3:.2f} ms), p99 {p99(lat) * 1e3:.2f} ms")
        assert grown / want < 16 * 1024, grown / want
        for s in socks:
            s.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --- limits enforced before anything is buffered -----------------------------------------------------

@pytest.mark.parametrize("data,error", [
    (b"PUB t\n" + pack_i32(1001), b"E_BAD_MESSAGE PUB message too big 1001 > 1000"),
    (b"DPUB t 10\n" + pack_i32(1001), b"E_BAD_MESSAGE DPUB message too big 1001 > 1000"),
    (b"MPUB t\n" + pack_i32(0x7FFFFFFF), b"E_BAD_BODY MPUB body too big 2147483647 > 5000"),
    (b"IDENTIFY\n" + pack_i32(5001), b"E_BAD_BODY IDENTIFY body too big 5001 > 5000"),
    (b"PUB t\n" + pack_i32(-1), b"E_BAD_MESSAGE PUB invalid message body size -1"),
])
def test_advertised_sizes_are_refused_before_the_body(nsqd_factory, data, error):
    node = nsqd_factory("--max-msg-size=1000", "--max-body-size=5000")
    # no body follows: the answer must not wait for it (nsqd's read deadline, 2 x the 30 s
    # heartbeat, is beyond this read's timeout)
    wire = Wire(node.tcp_address, timeout=45)
    wire.send(data)
    wire.expect_error(error)
    assert wire.is_closed()


def test_rdy_and_output_buffer_limits(nsqd_factory):
    node = nsqd_factory("--max-rdy-count=50", "--max-output-buffer-size=1000")
    wire = Wire(node.tcp_address)
    wire.sub(unique_name("rdy"), "ch")
    wire.cmd(b"RDY", "51")
    wire.expect_error(b"E_INVALID RDY count 51 out of range 0-50")
    wire = Wire(node.tcp_address)
    wire.cmd(b"IDENTIFY", body=json.dumps({"output_buffer_size": 1001}).encode())
    wire.expect_error(b"E_BAD_BODY IDENTIFY output buffer size (1001) is invalid")


def test_command_line_length_is_capped(nsqd):
    base = rss(nsqd.pid)
    wire = Wire(nsqd.tcp_address)
    wire.send(b"NOP" + b"x" * 20_000)  # no newline: nsqd's 16 KiB line buffer overflows
    assert wire.is_closed()
    assert rss(nsqd.pid) - base < 8 * MB


def test_http_bodies_refused_from_content_length(nsqd_factory):
    node = nsqd_factory("--max-msg-size=1000")
    sock = socket.create_connection(("127.0.0.1", node.http_port), timeout=5)
    sock.sendall(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
    head = sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"MSG_TOO_BIG" in head
    sock.close()


# --- compression bombs --------------------------------------------------------------------------------

def _negotiate(address: str, codec: str) -> tuple[socket.socket, bytes]:
    """Connect and negotiate ``codec``; returns once the (plain) JSON answer is read, with the
    bytes that came after it (already compressed)."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    body = json.dumps({"feature_negotiation": True, codec: True}).encode()
    sock.sendall(b"  V2IDENTIFY\n" + pack_i32(len(body)) + body)
    got = b""
    while len(got) < 4 or len(got) < 4 + int.from_bytes(got[:4], "big"):
        got += sock.recv(4096)
    return sock, got[4 + int.from_bytes(got[:4], "big"):]


@pytest.mark.timeout(300)  # 20 MiB of NOPs: 2 s on a quiet machine, 40 s seen on a busy one
def test_deflate_bomb_is_inflated_step_by_step(nsqd):
    base = rss(nsqd.pid)
    sock, after_json = _negotiate(nsqd.tcp_address, "deflate")
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    topic = unique_name("bomb").encode()
    plain = b"NOP\n" * (5 * MB)  # 20 MiB of commands in ~20 KiB on the wire
    bomb = comp.compress(plain) + comp.compress(b"PUB " + topic + b"\n" + pack_i32(2) + b"ok")
    bomb += comp.flush(zlib.Z_SYNC_FLUSH)
    assert len(bomb) < 100_000
    probe = Wire(nsqd.tcp_address, timeout=60)
    probe.identify()
    decomp = zlib.decompressobj(-15)
    decoder = FrameDecoder()
    answers: list[bytes] = []  # the upgrade's OK, then the PUB's OK after all the NOPs

    def take(data: bytes) -> None:
        answers.extend(f.data for f in decoder.feed(decomp.decompress(data))
                       if f.data != b"_heartbeat_")  # the NOPs in the bomb answer them

    take(after_json)
    sock.sendall(bomb)
    # worked off in bounded steps (INFLATE_STEP per event-loop turn): another client's PUB is
    # answered between two steps, before the bomb's own PUB at its end. An order, not a
    # latency, so a busy machine cannot fail it (the latency figures: bench/hostile_bench.py).
    probe.pub(unique_name("probe"), b"probe")
    peak = rss(nsqd.pid)
    sock.setblocking(False)
    try:
        while chunk := sock.recv(65536):
            take(chunk)
    except BlockingIOError:
        pass
    assert len(answers) < 2, "the bomb was worked off before another client was answered"
    assert peak - base < 60 * MB, (peak - base) / MB
    sock.settimeout(240)
    while len(answers) < 2:
        chunk = sock.recv(4096)
        assert chunk, "closed"
        take(chunk)
    assert answers == [b"OK", b"OK"]
    sock.close()
    probe.close()


def test_snappy_chunk_claiming_too_much_is_refused(nsqd):
    sock, _ = _negotiate(nsqd.tcp_address, "snappy")
    # a compressed chunk whose block header claims a 100 MB decoded length
    block = b"\x80\xc2\xd7\x2f" + b"\x00" * 16
    chunk = b"\x00" + len(block + b"crc!").to_bytes(3, "little") + b"crc!" + block
    sock.sendall(b"\xff\x06\x00\x00sNaPpY" + chunk)
    sock.settimeout(5)
    data = b""
    while True:
        try:
            part = sock.recv(4096)
        except ConnectionResetError:
            break
        if not part:
            break
        data += part
    assert "snappy: corrupt chunk" in nsqd.log()
    # a chunk longer than the framing format allows is refused before it is buffered
    sock, _ = _negotiate(nsqd.tcp_address, "snappy")
    sock.sendall(b"\xff\x06\x00\x00sNaPpY" + b"\x00\xff\xff\xff" + b"\x00" * 1000)
    wait_for(lambda: "chunk too large" in nsqd.log(), timeout=60, what="chunk too large")
    serves_others(nsqd.tcp_address, 10)
