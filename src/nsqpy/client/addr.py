"""``host:port`` strings as NSQ tools write them (IPv6 in brackets), to and from pairs."""

from __future__ import annotations


def parse_address(text: str, default_port: int | None = None) -> tuple[str, int]:
    """``"127.0.0.1:4150"`` / ``"[::1]:4150"`` / ``"host"`` (with ``default_port``) → pair."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ValueError(f"bad address {text!r}")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    elif ":" in text:  # bare IPv6 without a port
        host, port_text = text, ""
    else:
        host, port_text = text, ""
    if not port_text:
        if default_port is None:
            raise ValueError(f"address {text!r} has no port")
        return host, default_port
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bad port in address {text!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"bad port in address {text!r}")
    return host or "127.0.0.1", port


def format_address(host: str, port: int) -> str:
    """The inverse of :func:`parse_address` (Go's ``net.JoinHostPort``)."""
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def normalize(text: str, default_port: int | None = None) -> str:
    return format_address(*parse_address(text, default_port))
