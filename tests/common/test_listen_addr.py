"""``listen_socket``: Go's listening rules (dual-stack wildcard, IPv4 first for names), real sockets."""

from __future__ import annotations

import socket

import pytest

from nsqpy.common.addr import listen_socket, sock_address, split_host_port

pytestmark = pytest.mark.timeout(30)


def connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.mark.parametrize("wildcard", ["0.0.0.0:0", ":0", "[::]:0"])
def test_wildcard_is_dual_stack(wildcard):
    with listen_socket(wildcard) as sock:
        port = sock.getsockname()[1]
        assert sock_address(sock) == f"[::]:{port}"
        assert connects("127.0.0.1", port) and connects("::1", port)


def test_specific_families():
    with listen_socket("[::1]:0") as six, listen_socket("127.0.0.1:0") as four:
        assert six.family == socket.AF_INET6 and four.family == socket.AF_INET
        assert connects("::1", six.getsockname()[1])
        assert not connects("127.0.0.1", six.getsockname()[1])
        assert sock_address(four).startswith("127.0.0.1:")


def test_host_name_prefers_ipv4():
    with listen_socket("localhost:0") as sock:
        assert sock.family == socket.AF_INET


@pytest.mark.parametrize("addr,pair", [("[::1]:4150", ("::1", 4150)), ("0.0.0.0:1", ("0.0.0.0", 1)),
                                       (":4151", ("", 4151))])
def test_split_host_port(addr, pair):
    assert split_host_port(addr) == pair


@pytest.mark.parametrize("addr", ["4150", "host:port"])
def test_bad_addresses(addr):
    with pytest.raises(OSError, match=rf"^listen \({addr}\) failed - "):
        listen_socket(addr)


def test_taken_address_worded_as_go():
    with listen_socket("127.0.0.1:0") as taken:
        addr = sock_address(taken)
        with pytest.raises(OSError) as info:
            listen_socket(addr)
    assert str(info.value) == (f"listen ({addr}) failed - listen tcp {addr}: bind: "
                               "address already in use")
