"""TLS on nsqd (reference §1.1, §1.3.1, §1.4): the in-band upgrade after IDENTIFY, compression
stacked on TLS, --tls-required (true / tcp-https) on TCP and HTTP, the HTTPS listener, client
certificate policies, /stats fields, start-up errors, and hostile handshakes."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers.polling import wait_for
from helpers.proc import mapped
from helpers.servers import Nsqd, free_port, unique_name
from helpers.wire import Wire, pack_i32
from nsqpy.protocol.compression import DeflateCodec, SnappyCodec
from nsqpy.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, FrameDecoder
from security.support import tls_wire

pytestmark = pytest.mark.timeout(60)
NSQD = str(Path(sys.executable).parent / "nsqd")


def stats(base: str, ctx: ssl.SSLContext | None = None) -> dict:
    with urllib.request.urlopen(f"{base}/stats?format=json", timeout=5, context=ctx) as resp:
        return json.loads(resp.read())


def all_clients(doc: dict) -> list[dict]:
    out = list(doc.get("producers") or [])
    for t in doc["topics"] or []:
        for ch in t["channels"]:
            out.extend(ch["clients"] or [])
    return out


# --- the upgrade ------------------------------------------------------------------------------------

def test_tls_upgrade_then_pub_sub_and_stats(secure_nsqd, certs):
    node = secure_nsqd(certs=certs)
    # an nsqd without TLS flags loads no OpenSSL (tests/nsqd/test_footprint.py); this one does
    assert "libssl" in mapped(node.proc.pid)
    topic = unique_name("tls")
    wire, answer = tls_wire(node.tcp_address, certs.client_context(), client_id="tls-client")
    assert answer["tls_v1"] is True and answer["auth_required"] is False
    wire.pub(topic, b"secret payload")
    wire.sub(topic, "ch", rdy=1)
    assert wire.read_message().body == b"secret payload"
    version = wire.sock.version()
    cipher_id = next(c["id"] & 0xFFFF for c in ssl.create_default_context().get_ciphers()
                     if c["name"] == wire.sock.cipher()[0])
    doc = stats(f"http://{node.http_address}")
    [client] = [c for c in all_clients(doc) if c["client_id"] == "tls-client"][:1]
    assert client["tls"] is True
    assert client["tls_version"] == {"TLSv1.3": "TLS1.3", "TLSv1.2": "TLS1.2"}[version]
    # upstream only names 13 (pre-TLS 1.3) suites; the others are "Unknown <id>"
    assert client["tls_cipher_suite"] == f"Unknown {cipher_id}"
    assert client["tls_negotiated_protocol"] == ""
    assert client["tls_negotiated_protocol_is_mutual"] is True
    keys = list(client)
    assert keys[-5:] == ["tls", "tls_cipher_suite", "tls_version", "tls_negotiated_protocol",
                         "tls_negotiated_protocol_is_mutual"]
    wire.close()


def test_tls12_client_and_go_cipher_names(secure_nsqd, certs):
    node = secure_nsqd(certs=certs)
    ctx = certs.client_context()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
    wire, _ = tls_wire(node.tcp_address, ctx, client_id="tls12")
    wire.pub(unique_name("tls12"), b"x")
    [client] = [c for c in stats(f"http://{node.http_address}")["producers"]
                if c["client_id"] == "tls12"]
    assert client["tls_version"] == "TLS1.2"
    assert client["tls_cipher_suite"] == "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    wire.close()


@pytest.mark.parametrize("codec_name", ["snappy", "deflate"])
def test_compression_stacked_on_tls(secure_nsqd, certs, codec_name):
    """JSON in clear, handshake, OK over TLS, then OK compressed over TLS (upstream's order)."""
    node = secure_nsqd(certs=certs)
    topic = unique_name(f"tls{codec_name}")
    raw = socket.create_connection(("127.0.0.1", node.tcp_port), timeout=5)
    body = json.dumps({"feature_negotiation": True, "tls_v1": True, codec_name: True}).encode()
    raw.sendall(b"  V2IDENTIFY\n" + pack_i32(len(body)) + body)
    decoder = FrameDecoder()
    frames: list = []
    while not frames:
        frames = decoder.feed(raw.recv(4096))
    answer = json.loads(frames[0].data)
    assert answer["tls_v1"] is True and answer[codec_name] is True
    sock = certs.client_context().wrap_socket(raw, server_hostname="127.0.0.1")
    codec = SnappyCodec() if codec_name == "snappy" else DeflateCodec(6)
    got: list = []
    plain_done = False
    buf = b""
    while len(got) < 2:
        chunk = sock.recv(4096)
        assert chunk, "closed"
        if not plain_done:
            buf += chunk
            if len(buf) >= 10:  # the first OK frame comes over TLS, uncompressed
                assert buf[:10] == struct.pack(">ii", 6, FRAME_TYPE_RESPONSE) + b"OK"
                got.append("OK")
                plain_done = True
                chunk, buf = buf[10:], b""
            else:
                continue
        if chunk:
            got.extend(decoder.feed(codec.decompress(chunk)))
    assert got[1].data == b"OK"
    msg = b"PUB " + topic.encode() + b"\n" + pack_i32(5) + b"hello"
    sock.sendall(codec.compress(msg))
    frames = []
    while not frames:
        frames = decoder.feed(codec.decompress(sock.recv(4096)))
    assert frames[0].data == b"OK"
    sock.close()
    doc = stats(f"http://{node.http_address}")
    assert doc["topics"][0]["message_count"] == 1


def test_plain_clients_still_work_when_tls_is_optional(secure_nsqd, certs):
    node = secure_nsqd(certs=certs)
    wire = Wire(node.tcp_address)
    answer = wire.identify(feature_negotiation=True)  # tls_v1 not asked
    assert answer["tls_v1"] is False
    wire.pub(unique_name("plain"), b"x")
    wire.close()


def test_no_tls_without_cert(nsqd):
    wire = Wire(nsqd.tcp_address)
    assert wire.identify(feature_negotiation=True, tls_v1=True)["tls_v1"] is False
    wire.pub(unique_name("nocert"), b"x")  # the stream stays plain
    wire.close()


# --- TLS required -----------------------------------------------------------------------------------

def test_tls_required_refuses_commands_before_tls(secure_nsqd, certs):
    node = secure_nsqd("--tls-required", certs=certs)
    cases = [
        (b"PUB t\n" + pack_i32(5), b"E_INVALID cannot PUB in current state (TLS required)"),
        (b"PUB bad!topic\n", b"E_INVALID cannot PUB in current state (TLS required)"),
        (b"MPUB t\n" + pack_i32(99999999), b"E_INVALID cannot MPUB in current state (TLS required)"),
        (b"SUB t c\n", b"E_INVALID cannot SUB in current state (TLS required)"),
        (b"NOP\n", b"E_INVALID cannot NOP in current state (TLS required)"),
        (b"AUTH\n" + pack_i32(3), b"E_INVALID cannot AUTH in current state (TLS required)"),
        (b"FOO\n", b"E_INVALID cannot FOO in current state (TLS required)"),
    ]
    for data, error in cases:
        wire = Wire(node.tcp_address)
        assert wire.identify(feature_negotiation=True)["tls_v1"] is False  # not asked for
        wire.send(data)  # the body never follows: the error must come before it
        wire.expect_error(error)
        assert wire.is_closed()
        wire.close()
    # IDENTIFY itself is allowed, and over TLS everything works
    wire, _ = tls_wire(node.tcp_address, certs.client_context())
    wire.pub(unique_name("req"), b"ok over tls")
    wire.cmd(b"NOP")
    wire.close()


def test_tls_required_true_refuses_plain_http(secure_nsqd, certs):
    node = secure_nsqd("--tls-required=true", certs=certs)
    for path in ("/ping", "/stats", "/no/such/path"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://{node.http_address}{path}", timeout=5)
        err = info.value
        assert err.code == 403
        assert err.read() == b'{"message": "TLS_REQUIRED", "https_port": %d}' % node.https_port
        assert err.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
        assert err.headers["Content-Type"] == "application/json; charset=utf-8"
    ctx = certs.client_context()
    with urllib.request.urlopen(f"https://{node.https_address}/ping", context=ctx, timeout=5) as r:
        assert r.read() == b"OK"
    req = urllib.request.Request(f"https://{node.https_address}/pub?topic={unique_name('h')}",
                                 data=b"over https", method="POST")
    with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
        assert r.read() == b"OK"
    with urllib.request.urlopen(f"https://{node.https_address}/config/tls_required",
                                context=ctx, timeout=5) as r:
        assert json.loads(r.read()) == 2


def test_tls_required_tcp_https_leaves_http_open(secure_nsqd, certs):
    node = secure_nsqd("--tls-required=tcp-https", certs=certs)
    with urllib.request.urlopen(f"http://{node.http_address}/ping", timeout=5) as r:
        assert r.read() == b"OK"
    with urllib.request.urlopen(f"http://{node.http_address}/config/tls_required", timeout=5) as r:
        assert json.loads(r.read()) == 1
    wire = Wire(node.tcp_address)
    wire.identify()
    wire.send(b"NOP\n")
    wire.expect_error(b"E_INVALID cannot NOP in current state (TLS required)")
    wire.close()


def test_https_listener_needs_cert_and_key(tmp_path):
    https_port = free_port()
    node = Nsqd(tmp_path / "d", f"--https-address=127.0.0.1:{https_port}")
    try:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", https_port), timeout=1).close()
    finally:
        node.stop()


@pytest.mark.parametrize("args,needle", [
    (["--tls-required=true"], "cannot require TLS client connections without TLS key and cert"),
    (["--tls-client-auth-policy=require-verify"], "cannot require TLS client connections"),
    (["--tls-cert=/nonexistent/cert.pem", "--tls-key=/nonexistent/key.pem"], "failed to build TLS config"),
    (["--tls-min-version=ssl3.0"], "tls-min-version"),
    (["--tls-required=maybe"], "tls-required"),
])
def test_tls_start_up_errors(tmp_path, args, needle):
    out = subprocess.run([NSQD, f"--data-path={tmp_path}", f"--tcp-address=127.0.0.1:{free_port()}",
                          f"--http-address=127.0.0.1:{free_port()}", *args],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert needle in out.stderr + out.stdout


def test_tls_min_version_refuses_older_clients(secure_nsqd, certs):
    node = secure_nsqd("--tls-min-version=tls1.3", certs=certs)
    ctx = certs.client_context()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_wire(node.tcp_address, ctx)
    wire, _ = tls_wire(node.tcp_address, certs.client_context())  # TLS 1.3 is fine
    assert wire.sock.version() == "TLSv1.3"
    wire.pub(unique_name("v13"), b"x")
    wire.close()


# --- client certificates ------------------------------------------------------------------------------

def test_client_certificate_required_and_verified(secure_nsqd, certs):
    node = secure_nsqd("--tls-client-auth-policy=require-verify", f"--tls-root-ca-file={certs.ca}",
                       certs=certs)
    wire, _ = tls_wire(node.tcp_address, certs.client_context("client"), client_id="with-cert")
    wire.pub(unique_name("mtls"), b"x")
    for who in (None, "rogue"):  # no certificate; a certificate the CA did not sign
        with pytest.raises((ssl.SSLError, ConnectionError)):
            w, _ = tls_wire(node.tcp_address, certs.client_context(who))
            w.pub("t", b"x")  # TLS 1.3: the server's refusal can surface on first use
    wire.pub(unique_name("mtls"), b"still fine")
    wire.close()
    # HTTPS shares the policy
    with urllib.request.urlopen(f"https://{node.https_address}/ping",
                                context=certs.client_context("client"), timeout=5) as r:
        assert r.read() == b"OK"
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"https://{node.https_address}/ping",
                               context=certs.client_context(), timeout=5).read()


def test_client_certificate_required_not_verified(secure_nsqd, certs):
    """``require``: any certificate will do (Go's RequireAnyClientCert), none will not."""
    node = secure_nsqd("--tls-client-auth-policy=require", certs=certs)
    wire, _ = tls_wire(node.tcp_address, certs.client_context("rogue"))
    wire.pub(unique_name("anycert"), b"x")
    wire.close()
    with pytest.raises((ssl.SSLError, ConnectionError)):
        w, _ = tls_wire(node.tcp_address, certs.client_context())
        w.pub("t", b"x")


# --- hostile handshakes --------------------------------------------------------------------------------

def test_stalled_handshake_times_out_without_blocking_others(secure_nsqd, certs):
    node = secure_nsqd(certs=certs)
    stalled = Wire(node.tcp_address)
    assert stalled.identify(feature_negotiation=True, tls_v1=True)["tls_v1"] is True
    started = time.monotonic()
    other = Wire(node.tcp_address)  # meanwhile others are served, before the deadline
    other.identify()
    other.pub(unique_name("other"), b"x")
    assert stalled.nothing_arrived(), "another client waited for the stalled handshake"
    assert stalled.is_closed(timeout=60)  # the 5 s handshake deadline; a busy machine is late
    assert time.monotonic() - started >= 4.0  # never before it
    other.pub(unique_name("other"), b"y")
    other.close()
    wait_for(lambda: "IDENTIFY failed" in node.log(), what="the handshake's failure logged")
    assert "E_IDENTIFY_FAILED IDENTIFY failed" in node.log()


def test_garbage_instead_of_client_hello(secure_nsqd, certs):
    node = secure_nsqd(certs=certs)
    wire = Wire(node.tcp_address)
    wire.identify(feature_negotiation=True, tls_v1=True)
    wire.send(b"PUB t\n" + pack_i32(1) + b"x" + b"\x00" * 200)
    assert wire.is_closed(timeout=7)
    check = Wire(node.tcp_address)
    check.identify()
    check.pub(unique_name("after"), b"x")
    check.close()


def test_pipelined_client_hello_is_refused(secure_nsqd, certs):
    """Bytes sent before our IDENTIFY answer cannot be a valid handshake: refused at once."""
    node = secure_nsqd(certs=certs)
    wire = Wire(node.tcp_address)
    body = json.dumps({"feature_negotiation": True, "tls_v1": True}).encode()
    wire.send(b"IDENTIFY\n" + pack_i32(len(body)) + body + b"\x16\x03\x01\x00\x05hello")
    frame = wire.read_frame()
    assert frame.frame_type == FRAME_TYPE_RESPONSE  # the JSON answer
    frame = wire.read_frame()
    assert frame.frame_type == FRAME_TYPE_ERROR
    assert frame.data.startswith(b"E_IDENTIFY_FAILED IDENTIFY failed")
    assert wire.is_closed()


def test_many_handshakes_at_once(secure_nsqd, certs):
    """50 TLS clients connect concurrently; every one gets through, /ping keeps answering."""
    import threading

    node = secure_nsqd(certs=certs)
    topic = unique_name("many")
    errors: list = []

    def one(i: int) -> None:
        try:
            wire, _ = tls_wire(node.tcp_address, certs.client_context())
            wire.pub(topic, b"%d" % i)
            wire.close()
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    with urllib.request.urlopen(f"http://{node.http_address}/ping", timeout=5) as r:
        assert r.read() == b"OK"
    assert stats(f"http://{node.http_address}")["topics"][0]["message_count"] == 50
