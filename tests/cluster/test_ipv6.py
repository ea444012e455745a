"""IPv6 and the wildcard address, over ``::1`` with real processes.

Upstream's Go listeners on ``0.0.0.0:P`` are dual-stack (IPv4 and IPv6 clients both connect);
``[::1]:P`` works in every address flag; an nsqd broadcasting an IPv6 address registers with an
nsqlookupd on IPv6 and consumers find and reach it through that address.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers.polling import wait_for
from helpers.servers import VENV_BIN, Nsqd, ServerProcess, free_port, unique_name
from helpers.wire import Wire
from nsqpy.client import Consumer
from nsqpy.common.addr import join_host_port

pytestmark = [pytest.mark.timeout(90)]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


if not _ipv6_loopback():
    pytestmark.append(pytest.mark.skip(reason="no IPv6 loopback here"))


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read()


def post(url: str, body: bytes = b"") -> bytes:
    req = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.read()


def start(program: str, directory: Path, health: str, *args: str) -> ServerProcess:
    directory.mkdir(parents=True, exist_ok=True)
    return ServerProcess([str(VENV_BIN / program), *args], health, directory / f"{program}.log")


def test_wildcard_listeners_are_dual_stack(tmp_path):
    tcp, http = free_port(), free_port()
    node = Nsqd(tmp_path / "n", f"--tcp-address=0.0.0.0:{tcp}", f"--http-address=0.0.0.0:{http}",
                tcp_port=tcp, http_port=http)
    try:
        for host in ("127.0.0.1", "[::1]"):
            assert get(f"http://{host}:{http}/ping") == (200, b"OK")
            wire = Wire(f"{host}:{tcp}")
            wire.cmd(b"NOP")
            wire.pub(unique_name("v"), b"x")
            wire.close()
        assert f"TCP: listening on [::]:{tcp}" in node.log()
        assert f"HTTP: listening on [::]:{http}" in node.log()
    finally:
        node.stop()
    assert f"TCP: closing [::]:{tcp}" in node.log()


def test_lookupd_and_admin_wildcard_dual_stack(tmp_path):
    ltcp, lhttp, ahttp = free_port(), free_port(), free_port()
    lookupd = start("nsqlookupd", tmp_path / "l", f"http://127.0.0.1:{lhttp}/ping",
                    f"--tcp-address=0.0.0.0:{ltcp}", f"--http-address=0.0.0.0:{lhttp}")
    try:
        admin = start("nsqadmin", tmp_path / "a", f"http://127.0.0.1:{ahttp}/ping",
                      f"--http-address=0.0.0.0:{ahttp}", f"--lookupd-http-address=[::1]:{lhttp}")
        try:
            assert get(f"http://[::1]:{lhttp}/ping") == (200, b"OK")
            assert get(f"http://[::1]:{ahttp}/ping") == (200, b"OK")
            status, body = get(f"http://[::1]:{ahttp}/api/nodes")
            assert status == 200 and "nodes" in json.loads(body)
            with socket.create_connection(("::1", ltcp), timeout=5) as s:
                s.sendall(b"  V1PING\n")
                assert s.recv(100) == b"\x00\x00\x00\x02OK"
        finally:
            admin.stop()
    finally:
        lookupd.stop()




def test_ipv6_addresses_broadcast_and_registration(tmp_path):
    ltcp, lhttp, ntcp, nhttp = (free_port() for _ in range(4))
    lookupd = start("nsqlookupd", tmp_path / "l", f"http://[::1]:{lhttp}/ping",
                    f"--tcp-address=[::1]:{ltcp}", f"--http-address=[::1]:{lhttp}",
                    "--broadcast-address=::1")
    node = None
    try:
        node = start("nsqd", tmp_path / "n", f"http://[::1]:{nhttp}/ping",
                     f"--tcp-address=[::1]:{ntcp}", f"--http-address=[::1]:{nhttp}",
                     f"--data-path={tmp_path / 'n'}", f"--lookupd-tcp-address=[::1]:{ltcp}",
                     "--broadcast-address=::1")
        with pytest.raises(OSError):  # IPv6 only: not on 127.0.0.1
            socket.create_connection(("127.0.0.1", ntcp), timeout=2).close()
        wait_for(lambda: "peer info" in node.log())
        topic = unique_name("six")
        post(f"http://[::1]:{nhttp}/pub?topic={topic}", b"over-six")
        def producers():
            try:  # 404 TOPIC_NOT_FOUND until nsqd's REGISTER arrives
                return json.loads(get(f"http://[::1]:{lhttp}/lookup?topic={topic}")[1])["producers"]
            except urllib.error.HTTPError:
                return None

        lookup = wait_for(producers)
        [producer] = lookup
        assert (producer["broadcast_address"], producer["tcp_port"]) == ("::1", ntcp)
        assert producer["remote_address"].startswith("[::1]:")
        query = f"CI: querying nsqlookupd http://[::1]:{lhttp}/channels?topic={topic}"
        wait_for(lambda: query in node.log())

        got: list[bytes] = []

        async def consume() -> None:
            done = asyncio.Event()

            async def handle(msg) -> None:
                got.append(msg.body)
                done.set()

            async with Consumer(topic, "ch", handle,
                                lookupd_http_addresses=[f"[::1]:{lhttp}"],
                                lookupd_poll_interval=0.5):
                await asyncio.wait_for(done.wait(), 20)

        asyncio.run(consume())
        assert got == [b"over-six"]

        # tombstoning by the "[::1]:port" node name nsqadmin sends
        node_name = join_host_port("::1", nhttp)
        post(f"http://[::1]:{lhttp}/topic/tombstone?topic={topic}&node={node_name}")
        [info] = json.loads(get(f"http://[::1]:{lhttp}/nodes")[1])["producers"]
        assert info["tombstones"] == [True]
    finally:
        if node is not None:
            node.stop()
        lookupd.stop()


def test_bad_ipv6_address_fails_with_message(tmp_path):
    out = subprocess.run([str(VENV_BIN / "nsqlookupd"), "--tcp-address=[::1:4160",
                          f"--http-address=[::1]:{free_port()}"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "FATAL" in out.stderr and "[::1:4160" in out.stderr
