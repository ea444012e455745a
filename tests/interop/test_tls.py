"""Unchanged third-party clients over TLS against our nsqd (started with --tls-cert/--tls-key):
pynsq 0.9.1 (TLS alone and with snappy / deflate on top, a client certificate required and
verified against --tls-root-ca-file, AUTH through a real auth server) and nsqjs 0.13.0 (tls,
tls+snappy, tls+deflate). Certificates are made for the test with the openssl CLI."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import ssl
import urllib.request

import pytest

from helpers.servers import unique_name
from interop.support import assert_server_healthy, run_json_script, wait_until
from security.support import OPENSSL, AuthServer, SecureNsqd, grant, make_certs

pytest.importorskip("nsq")

from nsq.deflate_socket import DeflateSocket  # noqa: E402
from nsq.snappy_socket import SnappySocket  # noqa: E402

from interop.pynsq_support import Delivery, Reader, connected_writer, publish  # noqa: E402
from interop.test_nsqjs import JS_DIR, NODE, SCRIPT, by_body, conn  # noqa: E402

pytestmark = [
    pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command"),
    # pynsq asks tornado for ssl.PROTOCOL_TLSv1_2, which Python deprecates (not our concern)
    pytest.mark.filterwarnings("ignore:ssl.PROTOCOL_TLSv1_2 is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("interop_certs"))


@pytest.fixture
def tls_nsqd(tmp_path, certs):
    started: list[SecureNsqd] = []

    def start(*extra: str) -> SecureNsqd:
        node = SecureNsqd(tmp_path / f"nsqd{len(started)}", *extra, certs=certs)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


def client_stats(node, ctx: ssl.SSLContext | None = None) -> list[dict]:
    """Every client in /stats (over HTTPS with ``ctx``: plain HTTP is refused when TLS is required)."""
    base = f"https://{node.https_address}" if ctx is not None else f"http://{node.http_address}"
    with urllib.request.urlopen(f"{base}/stats?format=json", timeout=5, context=ctx) as r:
        doc = json.loads(r.read())
    out = list(doc["producers"] or [])
    for t in doc["topics"] or []:
        for ch in t["channels"]:
            out.extend(ch["clients"] or [])
    return out


# --- pynsq --------------------------------------------------------------------------------------------

@pytest.mark.timeout(40)
@pytest.mark.parametrize("codec", [None, "snappy", "deflate"])
def test_pynsq_over_tls(tls_nsqd, certs, tornado_run, codec):
    node = tls_nsqd("--msg-timeout=2s")
    topic = unique_name(f"pytls{codec or ''}")
    rnd = os.urandom(100_000)
    bodies = [f"small-{i}".encode() for i in range(100)] + [b"abc" * 30_000, rnd, b"\x00" * 500]
    deliveries: list[Delivery] = []

    def handler(message):
        deliveries.append(Delivery(message))
        return True

    kwargs = {"tls_v1": True, "tls_options": {"ca_certs": str(certs.ca), "cert_reqs": ssl.CERT_REQUIRED},
              "heartbeat_interval": 1}
    if codec:
        kwargs[codec] = True

    async def main():
        writer = await connected_writer(node.tcp_address, **kwargs)
        reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address],
                        max_in_flight=50, **kwargs)
        try:
            for client in (writer, reader):
                await wait_until(lambda: client.identify_responses, 5, "IDENTIFY response")
                resp = client.identify_responses[0]
                assert resp["tls_v1"] is True, resp
                if codec:
                    assert resp[codec] is True, resp
            assert await publish(writer, "mpub", topic, bodies[:60]) == b"OK"
            for body in bodies[60:]:
                assert await publish(writer, "pub", topic, body) == b"OK"
            await wait_until(lambda: reader.conns, 5, "the reader connection")
            await wait_until(lambda: len(deliveries) >= len(bodies), 15, "all messages")
            await asyncio.sleep(2.5)  # idle: heartbeats over TLS; un-FINed messages would time out
            digest = lambda bs: sorted(hashlib.sha1(b).hexdigest() for b in bs)  # noqa: E731
            assert digest([d.body for d in deliveries]) == digest(bodies)
            assert all(d.attempts == 1 for d in deliveries)
            for client in (writer, reader):
                [c] = client.conns.values()
                sock = c.socket
                if codec:
                    assert isinstance(sock, SnappySocket if codec == "snappy" else DeflateSocket)
                    sock = sock._socket
                assert isinstance(sock, ssl.SSLSocket), type(sock)
                assert client.errors == [], client.errors
                assert len(client.heartbeats) >= 2
            seen = client_stats(node)
            assert len(seen) >= 2 and all(c["tls"] for c in seen), seen
            assert {c["tls_version"] for c in seen} == {"TLS1.2"}  # pynsq asks for TLS 1.2
            if codec:
                assert all(c[codec] for c in seen)
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 35)
    assert_server_healthy(node)


@pytest.mark.timeout(40)
def test_pynsq_client_certificate_required_and_auth(tls_nsqd, certs, tornado_run):
    """--tls-client-auth-policy=require-verify + --tls-root-ca-file, and AUTH on top: the auth
    server sees the certificate's CN; a pynsq client without a certificate gets nowhere."""
    auth = AuthServer()
    try:
        auth.answers["reader-secret"] = lambda v: grant(
            identity=v["common_name"], auths=[{"topic": ".*", "channels": [".*"],
                                              "permissions": ["publish", "subscribe"]}])
        node = tls_nsqd("--tls-client-auth-policy=require-verify", f"--tls-root-ca-file={certs.ca}",
                        f"--auth-http-address={auth.address}")
        topic = unique_name("pymtls")
        deliveries: list[Delivery] = []
        with_cert = {"ca_certs": str(certs.ca), "cert_reqs": ssl.CERT_REQUIRED,
                     "certfile": str(certs.client_cert), "keyfile": str(certs.client_key)}
        without_cert = {"ca_certs": str(certs.ca), "cert_reqs": ssl.CERT_REQUIRED}

        def handler(message):
            deliveries.append(Delivery(message))
            return True

        async def main():
            writer = await connected_writer(node.tcp_address, tls_v1=True, tls_options=with_cert,
                                            auth_secret="reader-secret")
            reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address],
                            tls_v1=True, tls_options=with_cert, auth_secret="reader-secret")
            stranger = Reader(topic, "ch2", handler, nsqd_tcp_addresses=[node.tcp_address],
                              tls_v1=True, tls_options=without_cert, auth_secret="reader-secret")
            try:
                await wait_until(lambda: reader.conns, 5, "the reader connection")
                for i in range(5):
                    assert await publish(writer, "pub", topic, b"m%d" % i) == b"OK"
                await wait_until(lambda: len(deliveries) >= 5, 10, "messages")
                assert sorted(d.body for d in deliveries) == [b"m%d" % i for i in range(5)]
                await wait_until(lambda: stranger.errors, 5, "the certificate-less client to fail")
                assert not any(c.connected() for c in stranger.conns.values())
                seen = client_stats(node, certs.client_context("client"))
                assert {c["auth_identity"] for c in seen} == {"client-one"}
                assert all(c["authed"] and c["tls"] for c in seen)
            finally:
                for c in (reader, stranger, writer):
                    c.close()
                await asyncio.sleep(0.1)

        tornado_run(main, 35)
        assert {r["values"]["common_name"] for r in auth.requests} == {"client-one"}
        assert {r["values"]["tls"] for r in auth.requests} == {"true"}
        assert_server_healthy(node)
    finally:
        auth.close()


# --- nsqjs --------------------------------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.skipif(NODE is None, reason="node is not installed")
@pytest.mark.skipif(not (JS_DIR / "node_modules" / "nsqjs").is_dir(), reason="nsqjs is not installed")
@pytest.mark.parametrize("scenario", ["tls", "tls_snappy", "tls_deflate"])
def test_nsqjs_over_tls(tls_nsqd, certs, scenario):
    node = tls_nsqd("--msg-timeout=2s")
    result = run_json_script([NODE, str(SCRIPT), scenario, node.tcp_address,
                              unique_name(f"j{scenario}"), str(certs.ca)], 50, cwd=str(JS_DIR))
    assert result["ok"], f"{result.get('error')}\nobserved: {result}\nnsqd log:\n{node.log()[-3000:]}"
    assert result["errors"] == [] and result["closed_events"] == 0, result["errors"]
    assert result["responses"] == ["OK"] * (1 + 43 + 1)
    codec = scenario.partition("_")[2]
    for kind in ("reader", "writer"):
        c = conn(result, kind)
        assert c["identify"]["tls_v1"] is True and c["tls"] is True, c
        assert c["tls_protocol"] in ("TLSv1.2", "TLSv1.3")
        if codec:
            assert c["identify"][codec] is True
            assert c["inflater"] == ("UnsnappyStream" if codec == "snappy" else "InflateRaw")
        else:
            assert c["inflater"] is None
        assert len(c["nops"]) >= 2  # heartbeats went through TLS (and the codec) and back
    assert sorted(d["body"] for d in result["deliveries"]) == sorted(result["expected"])
    seen = by_body(result["deliveries"])
    assert [d["attempts"] for d in seen[b"small-3"]] == [1, 2]
    assert_server_healthy(node)
