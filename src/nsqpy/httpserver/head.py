"""A request head as Go's server reads it, before any handler: the target, the headers it looks
at (``Host``, ``Content-Length``, ``Transfer-Encoding``, ``Expect``, ``Connection``), in the
order it checks them, and its answer when the head is not acceptable (no ``Host`` in HTTP/1.1,
a transfer coding other than ``chunked``, HTTP/2 or 0.9, an unknown expectation...).

One :class:`HeadReader` per connection also keeps what the previous request had: keep-alive
clients repeat their target and ``Host``, which are then not decoded or validated again.
"""

from __future__ import annotations


from httptools import HttpParserError, parse_url

from . import wire
from .quirks import unescape_path
from .request import Peer, Request


_HEADER_KIND = {b"host": 1, b"content-length": 2, b"transfer-encoding": 3, b"expect": 4,
                b"connection": 5}


def request_target(url: bytes) -> tuple[str, str, str] | None:
    """``(target, path, query)`` of a request-URI: what Go logs (``RequestURI()``), the decoded
    path it routes on, the raw query; None when Go would refuse it."""
    if url[:1] == b"/":
        raw_path, _, raw_query = url.partition(b"?")
        target = url.decode("latin-1")
    elif url == b"*":
        raw_path, raw_query, target = b"*", b"", "*"
    else:  # absolute form: Go routes on its path and logs path?query
        try:
            parsed = parse_url(url)
        except HttpParserError:
            return None
        raw_path = parsed.path or b"/"
        raw_query = parsed.query or b""
        target = (raw_path + (b"?" + raw_query if raw_query else b"")).decode("latin-1")
    if b"%" in raw_path:
        try:
            path = unescape_path(raw_path)
        except ValueError:
            return None
    elif raw_path.isascii():
        path = raw_path.decode("latin-1")
    else:  # Go's path holds the bytes as sent
        path = raw_path.decode("utf-8", "surrogateescape")
    return target, path, raw_query.decode("latin-1")


class HeadReader:
    """Reads the heads of one connection's requests."""

    __slots__ = ("conn", "date", "last_url", "last_target", "valid_host", "last_post",
                 "last_length")

    def __init__(self, conn: Peer, date: wire.DateCache) -> None:
        self.conn = conn
        self.date = date  # the server's Date header value, for the answers made here
        self.last_url = b""
        self.last_target: tuple[str, str, str] = ("", "", "")
        self.valid_host = b""
        #: Go tolerates blank lines before a request only after a POST
        self.last_post = False
        self.last_length: tuple[bytes, int] = (b"0", 0)  # a Content-Length value, read

    def read(self, version: str, method: str, url: bytes,
             headers: list[tuple[bytes, bytes]]) -> Request | bytes:
        """The Request, or the bytes of Go's answer to a head it refuses."""
        if url == self.last_url:
            target, path, query = self.last_target
        else:
            parts = request_target(url)
            if parts is None:
                return wire.BAD_REQUEST
            target, path, query = self.last_target = parts
            self.last_url = url
        http11 = version == "1.1" or version > "1.0"  # Go's ProtoAtLeast(1, 1)
        self.last_post = method == "POST"
        req = Request(self.conn, method, target, path, query, http11, headers)
        hosts = 0
        host = b""
        lengths: list[bytes] | None = None
        encodings: list[bytes] | None = None
        expect = b""
        for name, value in headers:
            kind = _HEADER_KIND.get(name.lower())
            if kind is None:
                continue
            if kind == 1:
                hosts += 1
                host = value
            elif kind == 2:
                lengths = (lengths or []) + [value]
            elif kind == 3:
                encodings = (encodings or []) + [value]
            elif kind == 4:
                expect = value
            else:
                if wire.has_token(value, b"close"):
                    req.wants_close = True
                if not http11 and wire.has_token(value, b"keep-alive"):
                    req.keep_alive10 = True
        if encodings is not None:
            if len(encodings) != 1 or encodings[0].strip(b" \t").lower() != b"chunked":
                return wire.UNSUPPORTED_TRANSFER_ENCODING
            req.chunked = True
        elif lengths is not None and len(lengths) == 1:  # publishers repeat their body size
            raw = lengths[0]
            last = self.last_length
            if raw == last[0]:
                req.content_length = last[1]
            else:
                try:
                    req.content_length = wire.parse_content_length(raw)
                except ValueError:
                    return wire.BAD_REQUEST
                self.last_length = (raw, req.content_length)
        elif lengths is not None:
            try:
                values = {wire.parse_content_length(v) for v in lengths}
            except ValueError:
                values = set()
            if len(values) != 1:
                return wire.BAD_REQUEST
            req.content_length = values.pop()
        if version == "1.1":
            if hosts != 1 and (hosts or method != "CONNECT"):
                return wire.BAD_REQUEST if hosts else wire.MISSING_HOST
        else:
            h2_preface = version == "2.0" and method == "PRI" and url == b"*"
            if version[0] != "1" and not h2_preface:
                return wire.VERSION_NOT_SUPPORTED
            if hosts > 1:
                return wire.BAD_REQUEST
            if http11 and not hosts and method != "CONNECT" and not h2_preface:
                return wire.MISSING_HOST
            if h2_preface:
                req.close = True
        if hosts and host != self.valid_host:
            if not wire.valid_host(host):
                return wire.MALFORMED_HOST
            self.valid_host = host
        if expect:
            if not wire.has_token(expect, b"100-continue"):
                return wire.expectation_failed(self.date.value)
            req.expect_continue = http11 and req.content_length != 0
        if req.wants_close:
            req.close = True
        return req
