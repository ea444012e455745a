"""HTTP/1.1 responses as Go's ``net/http`` server writes them, encoded with no I/O.

Upstream's daemons answer through Go's server, and clients, proxies and our differential tests
see its exact bytes; so this module reproduces what ``chunkWriter.writeHeader`` does:

* the status line ``HTTP/1.1 200 OK`` (``HTTP/1.0`` for a 1.0 request) with Go's status texts;
* the handler's own headers, keys canonicalised (``X-NSQ-Content-Type`` → ``X-Nsq-Content-Type``)
  and sorted; then what the server adds, in its fixed order: ``Date``, ``Content-Length``, a
  sniffed ``Content-Type`` (only when the handler set none and the body is not empty),
  ``Connection``, ``Transfer-Encoding``;
* ``Content-Length`` only when the whole body fits Go's 2048-byte buffer: a larger body is sent
  ``chunked`` (one chunk, as one ``Write`` produces) to an HTTP/1.1 client, and delimited by
  closing the connection for HTTP/1.0;
* ``Connection: close`` when the server closes after the reply (the client asked, or the
  request's body could not be skipped), ``Connection: keep-alive`` for an HTTP/1.0 keep-alive;
* the raw answers Go writes before any handler runs (malformed request, header too large,
  unsupported transfer coding or version), which carry no ``Date``.

A :class:`Head` (status line plus the handler's headers) is encoded once and reused by every
response of its kind; the ``Date`` value is cached for the current second (:class:`DateCache`).
"""

from __future__ import annotations

import re
import time

#: Go's ``http.StatusText`` for the codes the daemons answer with
STATUS_TEXT = {
    100: "Continue", 200: "OK", 201: "Created", 202: "Accepted", 204: "No Content",
    301: "Moved Permanently", 302: "Found", 304: "Not Modified", 307: "Temporary Redirect",
    308: "Permanent Redirect", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
    411: "Length Required", 413: "Request Entity Too Large", 417: "Expectation Failed",
    429: "Too Many Requests", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout", 505: "HTTP Version Not Supported",
}

#: what Go's ``DetectContentType`` answers for the text bodies the daemons write
TEXT_PLAIN = "text/plain; charset=utf-8"
#: Go buffers this much of a response before it must choose between a length and chunking
BUFFER_BEFORE_CHUNKING = 2048

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def canonical_key(name: str) -> str:
    """Go's ``CanonicalHeaderKey``: ``x-nsq-content-type`` → ``X-Nsq-Content-Type`` (a key with
    a byte outside a token, such as a space, is left as it is)."""
    if not _TOKEN.fullmatch(name):
        return name
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


_HTML_TAGS = (b"<!DOCTYPE HTML", b"<HTML", b"<HEAD", b"<SCRIPT", b"<IFRAME", b"<H1", b"<DIV",
              b"<FONT", b"<TABLE", b"<A", b"<STYLE", b"<TITLE", b"<B", b"<BODY", b"<BR", b"<P",
              b"<!--")
_EXACT_SIGNATURES = (
    (b"%PDF-", "application/pdf"), (b"%!PS-Adobe-", "application/postscript"),
    (b"\xfe\xff", "text/plain; charset=utf-16be"), (b"\xff\xfe", "text/plain; charset=utf-16le"),
    (b"\xef\xbb\xbf", TEXT_PLAIN), (b"\x00\x00\x01\x00", "image/x-icon"),
    (b"\x00\x00\x02\x00", "image/x-icon"), (b"BM", "image/bmp"), (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"), (b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x1a\x45\xdf\xa3", "video/webm"), (b"\x00\x01\x00\x00", "font/ttf"), (b"OTTO", "font/otf"),
    (b"ttcf", "font/collection"), (b"wOFF", "font/woff"), (b"wOF2", "font/woff2"),
    (b"\x1f\x8b\x08", "application/x-gzip"), (b"PK\x03\x04", "application/zip"),
    (b"Rar!\x1a\x07\x00", "application/x-rar-compressed"),
    (b"Rar!\x1a\x07\x01\x00", "application/x-rar-compressed"), (b"\x00asm", "application/wasm"),
)
_BINARY = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")


def sniff(body: bytes) -> str:
    """The Content-Type Go's ``DetectContentType`` gives a body a handler wrote without one
    (upstream's plain-text and string answers): HTML and XML by their first tag, the binary
    formats by their magic bytes (not the audio and video ones Go also knows), else text
    unless a control byte makes it ``application/octet-stream``."""
    data = body[:512]
    text = data.lstrip(b"\t\n\x0c\r ")
    if text[:1] == b"<":
        upper = text[:15].upper()
        for tag in _HTML_TAGS:
            if upper.startswith(tag) and text[len(tag):len(tag) + 1] in (b" ", b">"):
                return "text/html; charset=utf-8"
        if text.startswith(b"<?xml"):
            return "text/xml; charset=utf-8"
    for magic, kind in _EXACT_SIGNATURES:
        if data.startswith(magic):
            return kind
    if _BINARY.search(text):
        return "application/octet-stream"
    return TEXT_PLAIN


def _body_allowed(status: int) -> bool:
    return not (100 <= status < 200 or status in (204, 304))


class Head:
    """The status line and a handler's headers of one kind of response, encoded once.

    ``sniffed`` is the Content-Type Go's server would detect for this kind of body when the
    handler sets none (upstream's plain-text answers rely on it); it is written after
    Content-Length, where Go puts it, and only for a non-empty body.
    """

    __slots__ = ("status", "prefix11", "prefix10", "sniffed_line", "body_allowed", "has_length",
                 "_date", "_dated")

    def __init__(self, status: int, headers: list[tuple[str, str]] | tuple = (),
                 sniffed: str = TEXT_PLAIN) -> None:
        self.status = status
        fields = sorted(((canonical_key(k), v) for k, v in headers), key=lambda kv: kv[0])
        block = "".join(f"{k}: {v}\r\n" for k, v in fields).encode("latin-1")
        reason = STATUS_TEXT.get(status, f"status code {status}")
        self.prefix11 = f"HTTP/1.1 {status} {reason}\r\n".encode() + block + b"Date: "
        self.prefix10 = f"HTTP/1.0 {status} {reason}\r\n".encode() + block + b"Date: "
        has_type = any(k == "Content-Type" for k, _ in fields)
        self.sniffed_line = b"" if has_type else f"Content-Type: {sniffed}\r\n".encode()
        self.body_allowed = _body_allowed(status)
        #: the handler set Content-Length itself (Go then adds none)
        self.has_length = any(k == "Content-Length" for k, _ in fields)
        # the HTTP/1.1 head up to the length's digits, for the Date value it was made with
        self._date = b""
        self._dated = b""

    def __repr__(self) -> str:
        return f"<Head {self.status}>"


#: a response: its head and its whole body
Response = tuple[Head, bytes]


def encode(head: Head, body: bytes, date: bytes, http11: bool = True, close: bool = False,
           keep_alive10: bool = False, head_request: bool = False) -> tuple[bytes, bool]:
    """The bytes of a response and whether the connection closes after it.

    ``close``: the server closes after this reply (``Connection: close`` for HTTP/1.1);
    ``keep_alive10``: an HTTP/1.0 request that asked for keep-alive; ``head_request``: a HEAD,
    whose body is not sent (its length is, as Go computes it).
    """
    n = len(body)
    if (http11 and n <= BUFFER_BEFORE_CHUNKING and head.body_allowed
            and not (close or head_request or head.has_length)):
        # the common answer: keep-alive, with its length; Date changes once a second
        if head._date is not date:
            head._date = date
            head._dated = head.prefix11 + date + b"\r\nContent-Length: "
        return b"%s%d\r\n%s\r\n%s" % (head._dated, n, head.sniffed_line if n else b"",
                                            body), False
    if not head.body_allowed:
        # 1xx/204/304: no body, no length, no sniffed type
        conn = b"Connection: close\r\n" if close and http11 else b""
        prefix = head.prefix11 if http11 else head.prefix10
        return b"%s%s\r\n%s\r\n" % (prefix, date, conn), close or not http11
    ctype = head.sniffed_line if n else b""
    if n <= BUFFER_BEFORE_CHUNKING:
        length = (b"Content-Length: %d\r\n" % n if (n or not head_request) and not head.has_length
                  else b"")
        if http11:
            conn = b"Connection: close\r\n" if close else b""
            out = b"%s%s\r\n%s%s%s\r\n" % (head.prefix11, date, length, ctype, conn)
        else:
            keep = keep_alive10 and not close and bool(length)
            conn = b"Connection: keep-alive\r\n" if keep else b""
            close = not keep
            out = b"%s%s\r\n%s%s%s\r\n" % (head.prefix10, date, length, ctype, conn)
        return (out if head_request else out + body), close
    if http11:
        conn = b"Connection: close\r\n" if close else b""
        if head_request:  # Go sends neither a length nor chunking for a big HEAD answer
            return b"%s%s\r\n%s%s\r\n" % (head.prefix11, date, ctype, conn), close
        # (joined: ``%`` copies a multi-megabyte body through a growing buffer, 15x slower)
        return b"".join((b"%s%s\r\n%s%sTransfer-Encoding: chunked\r\n\r\n%x\r\n"
                         % (head.prefix11, date, ctype, conn, n), body, b"\r\n0\r\n\r\n")), close
    out = b"%s%s\r\n%s\r\n" % (head.prefix10, date, ctype)
    return (out if head_request else out + body), True


# --- answers Go writes before any handler runs (no Date, then the connection closes) ----------

_ERROR_HEADERS = b"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"


def early_error(status: int, text: str = "") -> bytes:
    """Go's ``conn.serve`` answer to a request it could not read: ``400 Bad Request`` (``text``
    appended as ``400 Bad Request: <text>`` for the errors Go names), 431, 505..."""
    public = f"{status} {STATUS_TEXT[status]}" + (f": {text}" if text else "")
    return b"HTTP/1.1 " + public.encode() + _ERROR_HEADERS + public.encode()


BAD_REQUEST = early_error(400)
HEADER_TOO_LARGE = early_error(431)
VERSION_NOT_SUPPORTED = early_error(505, "unsupported protocol version")
MISSING_HOST = early_error(400, "missing required Host header")
MALFORMED_HOST = early_error(400, "malformed Host header")
INVALID_HEADER_NAME = early_error(400, "invalid header name")
INVALID_HEADER_VALUE = early_error(400, "invalid header value")
UNSUPPORTED_TRANSFER_ENCODING = (b"HTTP/1.1 501 Not Implemented" + _ERROR_HEADERS
                                 + b"Unsupported transfer encoding")


#: ``OPTIONS *``, which Go's server answers itself (``globalOptionsHandler``)
GLOBAL_OPTIONS = Head(200, [("Content-Length", "0")])


def expectation_failed(date: bytes) -> bytes:
    """An ``Expect`` other than ``100-continue``: Go's ``sendExpectationFailed``."""
    return (b"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: %s\r\n"
            b"Content-Length: 0\r\n\r\n" % date)


# --- request header values ---------------------------------------------------------------------

_VALID_HOST = re.compile(rb"[0-9A-Za-z!$%&'()*+,\-.:;=\[\]_~]*")


def valid_host(value: bytes) -> bool:
    """``httpguts.ValidHostHeader``: only the bytes a host, IPv6 literal or port may hold."""
    return _VALID_HOST.fullmatch(value) is not None


def has_token(value: bytes, token: bytes) -> bool:
    """Go's ``hasToken`` on a comma-separated header value, case-insensitively."""
    return any(part.strip(b" \t").lower() == token for part in value.split(b","))


def parse_content_length(value: bytes) -> int:
    """Go's ``parseContentLength``: digits only (after trimming), ValueError otherwise."""
    text = value.strip(b" \t")
    if not text or not text.isdigit() or len(text) > 19:
        raise ValueError("bad Content-Length")
    return int(text)


# --- the Date header ---------------------------------------------------------------------------

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("", "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
           "Dec")


def format_date(epoch: float) -> bytes:
    """``Wed, 25 Nov 2026 15:52:51 GMT`` (Go's ``http.TimeFormat``) for a Unix time."""
    t = time.gmtime(epoch)
    return (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT").encode()


class DateCache:
    """The ``Date`` value for the current second, refreshed by the server's one-second tick
    rather than formatted per response."""

    __slots__ = ("value", "second")

    def __init__(self) -> None:
        self.second = -1
        self.value = b""
        self.refresh()

    def refresh(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        second = int(now)
        if second != self.second:
            self.second = second
            self.value = format_date(second)
