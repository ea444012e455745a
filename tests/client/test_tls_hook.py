"""The TLS hook: IDENTIFY answer -> TLS handshake -> OK -> snappy -> OK, against a scripted
peer (nsqpy's nsqd has no TLS yet; upstream does it in exactly this order)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import struct
import subprocess

import orjson
import pytest

from nsqpy.client import NSQConnection
from nsqpy.client.compression import SnappyCodec
from nsqpy.client.options import ConnectionOptions
from nsqpy.protocol.frames import encode_response

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]


@pytest.fixture
def cert(tmp_path):
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(crt), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=20,
    )
    return crt, key


async def test_tls_then_snappy_upgrade(cert):
    crt, key = cert
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(crt, key)
    seen: dict = {}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readexactly(4) == b"  V2"
        assert await reader.readline() == b"IDENTIFY\n"
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        seen["identify"] = orjson.loads(await reader.readexactly(size))
        writer.write(encode_response(orjson.dumps({"max_rdy_count": 99, "tls_v1": True, "snappy": True})))
        await writer.drain()
        await writer.start_tls(server_ctx)
        codec = SnappyCodec()
        writer.write(encode_response(b"OK") + codec.encode(encode_response(b"OK")))
        await writer.drain()
        data = b""
        while b"\n" not in data:
            chunk = await reader.read(1000)
            if not chunk:
                return
            data += codec.decode(chunk)
        seen["command"] = data.split(b"\n")[0]
        writer.write(codec.encode(encode_response(b"CLOSE_WAIT")))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        client_ctx = ssl.create_default_context(cafile=str(crt))
        conn = NSQConnection("127.0.0.1", port, ConnectionOptions(tls=client_ctx, snappy=True))
        resp = await conn.connect()
        assert resp["tls_v1"] is True and conn.max_rdy_count == 99
        assert seen["identify"]["tls_v1"] is True and seen["identify"]["snappy"] is True
        conn.subscribed = True  # pretend, to send CLS through the TLS+snappy stream
        assert await conn.start_close() == b"CLOSE_WAIT"
        assert seen["command"] == b"CLS"
        conn.close()
        await conn.wait_closed()
    finally:
        server.close()
