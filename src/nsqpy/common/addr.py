"""``host:port`` handling shared by the servers and clients, and Go-like listening sockets."""

from __future__ import annotations

import os
import socket

from .goerrno import errno_text


def split_host_port(addr: str) -> tuple[str, int]:
    """``"127.0.0.1:4150"`` → ``("127.0.0.1", 4150)``; ``[::1]:4150`` works too. ValueError if bad."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        raise ValueError(f"address {addr!r} missing port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def is_unix_socket(addr: str) -> bool:
    """NSQ treats an address without ``:port`` as a unix socket path."""
    return ":" not in addr


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


#: hosts Go treats as "every interface": it then opens one dual-stack IPv6 socket
_WILDCARDS = ("", "0.0.0.0", "::")


def listen_socket(addr: str, backlog: int = 1024) -> socket.socket:
    """A listening TCP socket for ``host:port`` as Go's ``net.Listen("tcp", addr)`` opens it.

    A wildcard host (empty, ``0.0.0.0`` or ``::``) gets one dual-stack socket, so IPv4 and IPv6
    clients both connect (``curl http://[::1]:4151/ping`` against ``0.0.0.0:4151``); a host
    name listens on its first IPv4 address if it has one, as Go prefers; ``[::1]:4150`` on
    IPv6 only. A bad or taken address raises OSError worded as upstream's start-up error:
    ``listen (127.0.0.1:4150) failed - listen tcp 127.0.0.1:4150: bind: address already in use``.
    """
    refusal = _go_address_error(addr)
    if refusal:
        raise OSError(f"listen ({addr}) failed - listen tcp: {refusal}")
    try:
        return _listen(addr, backlog)
    except (OSError, ValueError) as err:
        if isinstance(err, OSError) and err.errno and not isinstance(err, socket.gaierror):
            why = f"listen tcp {addr}: bind: {errno_text(err)}"
        else:
            why = str(err)
        raise OSError(f"listen ({addr}) failed - {why}") from None


def _go_address_error(addr: str) -> str | None:
    """Go's ``net`` words for an address it will not listen on before any system call."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        return f"address {addr}: missing port in address"
    if port.isdigit() and int(port) > 65535:
        return f"address {port}: invalid port"
    return None


def _listen(addr: str, backlog: int) -> socket.socket:
    host, port = split_host_port(addr)
    if host in _WILDCARDS:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True,
                                        backlog=backlog)
        host = "0.0.0.0"
    # an ASCII host goes as bytes: a str would load the IDNA codec (and unicodedata) for good
    infos = socket.getaddrinfo(host.encode() if host.isascii() else host, port,
                               type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # stable: first IPv4, else first
    family, _, _, _, sockaddr = infos[0]
    return socket.create_server(sockaddr[:2], family=family, backlog=backlog)


def unix_listen_socket(path: str, backlog: int = 1024) -> socket.socket:
    """A listening unix socket at ``path`` (a stale socket file there is replaced, as asyncio's
    ``create_unix_server`` does); OSError worded as upstream's start-up error."""
    import stat

    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        raise OSError(f"listen ({path}) failed - {err}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(backlog)
    except OSError as err:
        sock.close()
        raise OSError(f"listen ({path}) failed - listen unix {path}: bind: "
                      f"{errno_text(err)}") from None
    return sock


def listener_name(sock: socket.socket) -> str:
    """How upstream names a listener in its log: ``host:port``, or the unix socket's path."""
    if sock.family == socket.AF_UNIX:
        return str(sock.getsockname())
    return sock_address(sock)


def sock_address(sock: socket.socket) -> str:
    """``host:port`` of a bound socket as Go prints a listener (``[::]:4150`` for dual-stack)."""
    name = sock.getsockname()
    return join_host_port(name[0], name[1])
