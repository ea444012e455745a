"""Blocking publishing for scripts, cron jobs and threads that have no event loop.

:func:`publish` opens a plain socket, publishes and closes — no asyncio, so it is safe to call
from anywhere, including code that runs inside someone else's loop thread. :class:`SyncPublisher`
keeps the socket for repeated publishes. :func:`http_publish` / :func:`http_mpublish` use nsqd's
HTTP API (``/pub``, ``/mpub``) when only the HTTP port is reachable.

nsqd accepts PUB/MPUB/DPUB before IDENTIFY, so the blocking path skips the handshake; it answers
heartbeats (``NOP``) while waiting so a slow nsqd does not time us out.
"""

from __future__ import annotations

import socket
import struct
import urllib.error
import urllib.request
from typing import Sequence
from urllib.parse import urlencode

import orjson

from nsqpy.common.gotls import shared_context
from nsqpy.protocol.commands import MAGIC_V2
from nsqpy.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, HEARTBEAT, OK

from .addr import format_address, parse_address
from .connection import _as_bytes, encode_dpub, encode_mpub_b, encode_pub, name_bytes
from .errors import ConnectionClosedError, HTTPPublishError, NSQError, NSQErrorResponse

Body = bytes | bytearray | memoryview | str
_HEADER = struct.Struct(">ii")
_I32 = struct.Struct(">I")


class SyncPublisher:
    """A blocking connection to one nsqd: ``with SyncPublisher("127.0.0.1:4150") as p: p.pub(...)``."""

    def __init__(self, address: str = "127.0.0.1:4150", timeout: float = 5.0) -> None:
        self.host, self.port = parse_address(address, 4150)
        self.timeout = timeout
        self._sock: socket.socket | None = None

    def __enter__(self) -> SyncPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(MAGIC_V2)
            self._sock = sock
        return self._sock

    def _read_exact(self, sock: socket.socket, n: int) -> bytes:
        chunks = []
        while n:
            chunk = sock.recv(n)
            if not chunk:
                raise ConnectionClosedError(f"{format_address(self.host, self.port)}: closed")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _command(self, data: bytes) -> None:
        sock = self._connect()
        try:
            sock.sendall(data)
            while True:
                size, frame_type = _HEADER.unpack(self._read_exact(sock, 8))
                payload = self._read_exact(sock, size - 4)
                if frame_type == FRAME_TYPE_RESPONSE and payload == HEARTBEAT:
                    sock.sendall(b"NOP\n")
                    continue
                break
        except (OSError, NSQError):
            self.close()
            raise
        if frame_type == FRAME_TYPE_ERROR:
            self.close()  # every publish error is fatal: nsqd has hung up
            raise NSQErrorResponse.from_frame(payload)
        if frame_type != FRAME_TYPE_RESPONSE or payload != OK:
            self.close()
            raise NSQError(f"unexpected answer {frame_type} {payload[:100]!r}")

    def pub(self, topic: str, body: Body) -> None:
        self._command(encode_pub(name_bytes(topic), _as_bytes(body)))

    def mpub(self, topic: str, bodies: Sequence[Body]) -> None:
        if not bodies:
            raise ValueError("mpub needs at least one message")
        self._command(encode_mpub_b(name_bytes(topic), [_as_bytes(b) for b in bodies]))

    def dpub(self, topic: str, delay: float, body: Body) -> None:
        """Deferred publish; ``delay`` in seconds."""
        self._command(encode_dpub(name_bytes(topic), int(round(delay * 1000)), _as_bytes(body)))


def publish(
    topic: str,
    message: Body | Sequence[Body],
    address: str = "127.0.0.1:4150",
    *,
    delay: float | None = None,
    timeout: float = 5.0,
) -> None:
    """Publish one message (PUB, or DPUB with ``delay`` seconds) or a list of them (MPUB).

    Raises :class:`NSQErrorResponse` with nsqd's ``E_*`` code when nsqd refuses.
    """
    with SyncPublisher(address, timeout) as pub:
        if isinstance(message, (bytes, bytearray, memoryview, str)):
            if delay is None:
                pub.pub(topic, message)
            else:
                pub.dpub(topic, delay, message)
        else:
            if delay is not None:
                raise ValueError("nsqd has no deferred MPUB")
            pub.mpub(topic, list(message))


# --- HTTP ----------------------------------------------------------------------------------


def _http_base(address: str) -> str:
    if "://" in address:
        return address.rstrip("/")
    return "http://" + normalize_http(address)


def normalize_http(address: str) -> str:
    return format_address(*parse_address(address, 4151))


def _post(url: str, data: bytes, timeout: float) -> None:
    req = urllib.request.Request(url, data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=shared_context()) as resp:
            resp.read()
    except urllib.error.HTTPError as err:
        raise HTTPPublishError(err.code, _error_message(err.read())) from None


def _error_message(body: bytes) -> str:
    try:
        data = orjson.loads(body)
        if isinstance(data, dict) and "message" in data:
            return str(data["message"])
        if isinstance(data, dict) and "status_txt" in data:
            return str(data["status_txt"])
    except orjson.JSONDecodeError:
        pass
    return body.decode("utf-8", "replace").strip()


def http_publish(
    address: str, topic: str, body: Body, *, delay: float | None = None, timeout: float = 5.0
) -> None:
    """``POST /pub?topic=T[&defer=ms]`` to nsqd's HTTP address (``host:4151``)."""
    query = {"topic": topic}
    if delay is not None:
        query["defer"] = str(int(round(delay * 1000)))
    _post(f"{_http_base(address)}/pub?{urlencode(query)}", _as_bytes(body), timeout)


def mpub_binary_body(bodies: Sequence[Body]) -> bytes:
    """The ``/mpub?binary=true`` body: ``[uint32 n]`` then ``[uint32 size][bytes]`` each."""
    parts = [_I32.pack(len(bodies))]
    for body in bodies:
        raw = _as_bytes(body)
        parts.append(_I32.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


def http_mpublish(
    address: str, topic: str, bodies: Sequence[Body], *, binary: bool = True, timeout: float = 5.0
) -> None:
    """``POST /mpub?topic=T``; binary mode by default so bodies may contain newlines."""
    if not bodies:
        raise ValueError("mpub needs at least one message")
    if binary:
        data = mpub_binary_body(bodies)
        url = f"{_http_base(address)}/mpub?{urlencode({'topic': topic, 'binary': 'true'})}"
    else:
        raw = [_as_bytes(b) for b in bodies]
        if any(b"\n" in b for b in raw):
            raise ValueError("text-mode /mpub cannot carry newlines; use binary=True")
        data = b"\n".join(raw)
        url = f"{_http_base(address)}/mpub?{urlencode({'topic': topic})}"
    _post(url, data, timeout)
