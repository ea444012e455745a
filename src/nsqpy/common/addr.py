"""``host:port`` handling shared by the servers and clients."""

from __future__ import annotations


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
