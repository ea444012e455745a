"""Go's error texts, as upstream's utilities print them.

A script that greps ``connection refused`` or ``no such host`` in a utility's stderr, or an
operator comparing two hosts' logs, sees what Go's ``net``, ``net/http`` and ``os`` packages
say: ``dial tcp 127.0.0.1:4150: connect: connection refused``, ``Get "http://...": dial tcp
...``, ``mkdir /data/out: not a directory``. These functions word Python's exceptions so.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import stat

import aiohttp

from ..client import NSQErrorResponse
from ..client.errors import ConnectionClosedError, IdentifyError
from ..common.flags import go_quote
from ..common.goerrno import errno_text
from ..common.goerrno import path_error as os_error  # Go's *os.PathError text, for the tools


# --- net -----------------------------------------------------------------------------------------


class GoError(Exception):
    """An error whose text is already Go's (what upstream would print)."""


def _resolver() -> str:
    """The nameserver Go's resolver names in ``lookup x on 10.0.0.1:53: no such host``."""
    try:
        with open("/etc/resolv.conf") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "nameserver":
                    host = parts[1]
                    return f"[{host}]:53" if ":" in host else f"{host}:53"
    except OSError:
        pass
    return "127.0.0.1:53"


def split_host_port(address: str) -> tuple[str, str]:
    """Go's ``net.SplitHostPort``; GoError worded as ``dial tcp`` reports it."""

    def bad(why: str) -> GoError:
        return GoError(f"dial tcp: address {address}: {why}")

    colon = address.rfind(":")
    if colon < 0:
        raise bad("missing port in address")
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise bad("missing ']' in address")
        if end + 1 == len(address):
            raise bad("missing port in address")
        if end + 1 != colon:
            raise bad("too many colons in address" if address[end + 1] == ":" else "missing port in address")
        host, j, k = address[1:end], 1, end + 1
    else:
        host, j, k = address[:colon], 0, 0
        if ":" in host:
            raise bad("too many colons in address")
    if "[" in address[j:]:
        raise bad("unexpected '[' in address")
    if "]" in address[k:]:
        raise bad("unexpected ']' in address")
    return host, address[colon + 1 :]


def check_dial_address(address: str) -> None:
    """What Go's dialer refuses before dialling: no port, a bad port."""
    _host, port = split_host_port(address)
    if port.isdigit():
        if int(port) > 0xFFFF:
            raise GoError(f"dial tcp: address {port}: invalid port")
    elif port:
        try:
            socket.getservbyname(port, "tcp")
        except OSError:
            raise GoError(f"dial tcp: lookup tcp/{port}: unknown port") from None


def _dialled(address: str) -> str:
    """``host:port`` as Go names the address it dialled: the host resolved to an IP."""
    try:
        host, port = split_host_port(address)
    except GoError:
        return address
    try:
        ipaddress.ip_address(host)
        return address
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host or None, port or 0, type=socket.SOCK_STREAM)
    except OSError:
        return address
    infos.sort(key=lambda i: i[0] != socket.AF_INET)
    ip = infos[0][4][0]
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def dial_error_text(err: BaseException, address: str) -> str:
    """What go-nsq's ``Conn.Connect`` error says for this failure to reach ``address``."""
    if isinstance(err, GoError):
        return str(err)
    if isinstance(err, socket.gaierror):
        host = address.rsplit(":", 1)[0].strip("[]")
        if err.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
            return f"dial tcp: lookup {host} on {_resolver()}: no such host"
        return f"dial tcp: lookup {host}: {errno_text(err)}"
    if isinstance(err, NSQErrorResponse):
        return f"failed to IDENTIFY - {err}"
    if isinstance(err, (ConnectionClosedError, IdentifyError)):
        return "failed to IDENTIFY - EOF"
    if isinstance(err, TimeoutError) or (isinstance(err, ConnectionError) and "timed out" in str(err)):
        return f"dial tcp {_dialled(address)}: i/o timeout"
    if isinstance(err, OSError) and err.errno is not None:
        return f"dial tcp {_dialled(address)}: connect: {errno_text(err)}"
    return str(err)


def io_error_text(err: BaseException | None) -> str:
    """go-nsq's ``IO error - ...`` text for why an established connection ended."""
    if err is None or isinstance(err, (ConnectionClosedError, EOFError)):
        return "EOF"
    if isinstance(err, OSError) and err.errno is not None:
        return f"read tcp: read: {errno_text(err)}"
    return str(err)


def http_error_text(method: str, url: str, err: BaseException) -> str:
    """Go's ``*url.Error``: ``Get "http://...": dial tcp ...: connect: connection refused``."""
    verb = method[:1].upper() + method[1:].lower()
    if isinstance(err, aiohttp.ClientConnectorError):
        host, port = err.host, err.port
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return f'{verb} "{url}": {dial_error_text(err.os_error, address)}'
    if isinstance(err, (asyncio.TimeoutError, TimeoutError)):
        return f'{verb} "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
    if isinstance(err, aiohttp.ServerDisconnectedError):
        return f'{verb} "{url}": EOF'
    return f'{verb} "{url}": {err}'


def response_error_text(status: int, reason: str, body: bytes) -> str:
    """go-nsq's and nsq's HTTP helpers on a non-200 answer: ``got response 404 Not Found "..."``."""
    return f"got response {status} {reason} {go_quote(body.decode('utf-8', 'replace'))}"


# --- os ------------------------------------------------------------------------------------------
def link_error(src: str, dst: str, err: OSError) -> str:
    """Go's ``*os.LinkError`` text: ``link /data/x /out/x: file exists``."""
    return f"link {src} {dst}: {errno_text(err)}"


def mkdir_all(path: str, mode: int) -> None:
    """Go's ``os.MkdirAll``, with its error texts (OSError whose ``str`` is Go's): which
    directory it names and how depend on Go's walk, e.g. ``mkdir /data/out: not a directory``
    when ``/data/out`` is a file and a directory below it was asked for."""
    try:
        st = os.stat(path)
    except OSError:
        pass
    else:
        if stat.S_ISDIR(st.st_mode):
            return
        raise GoOSError(os_error("mkdir", path, NotADirectoryError(20, "")))
    i = len(path)
    while i > 0 and path[i - 1] == "/":
        i -= 1
    j = i
    while j > 0 and path[j - 1] != "/":
        j -= 1
    if j > 1:
        mkdir_all(path[: j - 1], mode)
    try:
        os.mkdir(path, mode)
    except OSError as err:
        if os.path.isdir(path) and not os.path.islink(path):
            return
        raise GoOSError(os_error("mkdir", path, err)) from None


class GoOSError(OSError):
    """An OSError whose text is already Go's."""

    def __str__(self) -> str:
        return str(self.args[0])
