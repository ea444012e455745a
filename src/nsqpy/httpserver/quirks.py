"""Where Go's reading of a request differs from llhttp's, and how the layer bridges it.

llhttp (through httptools) refuses a few heads that Go's ``net/http`` reads: a method outside
its list (Go routes any token, so ``get /ping`` gets a 405), bytes above ASCII in the target
(Go refuses only control bytes there: ``?topic=über`` reaches the handler, which answers
``INVALID_TOPIC``), bare LF line ends, equal duplicate Content-Length headers, HTTP/2's
``PRI *`` preface line. When such a head begins a read, it is rewritten so llhttp reads it,
and parsed again (:func:`go_readable`), with the method or target it really had. For heads neither reads,
:func:`parse_error_answer` picks Go's answer from llhttp's reason.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from httptools import HttpParserInvalidMethodError

from . import wire

TOKEN_BYTES = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        b"abcdefghijklmnopqrstuvwxyz")
_BARE_LF = re.compile(rb"(?<!\r)\n")
_HIGH = re.compile(rb"[\x80-\xff]")
_CTL = re.compile(rb"[\x00-\x1f\x7f]")
#: what stands in for the bytes above ASCII while llhttp reads a target
_HIGH_TO_X = bytes(range(128)) + b"x" * 128
_HEAD_END = re.compile(rb"\r?\n\r?\n")


def parse_error_answer(err: Exception, head: bytes | None) -> bytes:
    """Go's answer to what llhttp refused in a request head (``head``: the request's bytes,
    when this read began with it)."""
    text = str(err)
    if "Transfer-Encoding" in text:
        return wire.UNSUPPORTED_TRANSFER_ENCODING
    if "header token" in text:
        # Go reads a line without a colon as a malformed head, a bad name as a bad name
        lines = _HEAD_END.split(head, 1)[0].splitlines()[1:] if head else ()
        if any(b":" not in line for line in lines):
            return wire.BAD_REQUEST
        return wire.INVALID_HEADER_NAME
    if "header value char" in text:
        return wire.INVALID_HEADER_VALUE
    return wire.BAD_REQUEST


class Retry(NamedTuple):
    """A head rewritten so llhttp reads it: what to parse, and what the request really had."""

    method: str | None  # the method, when a stand-in replaced it
    url: bytes | None  # the target, when a stand-in replaced it
    data: bytes


def go_readable(data: bytes, err: Exception) -> Retry | None:
    """A request head (at the start of ``data``) llhttp refused but Go reads, rewritten so that
    llhttp reads it: any token as method (``get`` is routed, and gets 405), bytes above ASCII
    in the target, bare LF line ends, HTTP/2's ``PRI *`` preface line. One problem is fixed at
    a time; the caller parses the result again, which may meet the next."""
    start = 0
    while data[start:start + 2] == b"\r\n":
        start += 2
    space = data.find(b" ", start)
    if space <= start:
        return None
    method = data[start:space]
    if isinstance(err, HttpParserInvalidMethodError):
        if all(c in TOKEN_BYTES for c in method):
            return Retry(method.decode("latin-1"), None, b"GET" + data[space:])
        return None
    text = str(err)
    if "url" in text:
        # Go splits the request line at its first two spaces and refuses only control bytes
        # in the target
        line_end = data.find(b"\n", space)
        if line_end < 0:
            return None
        target, sep, _ = data[space + 1:line_end].partition(b" ")
        if not sep or not _HIGH.search(target) or _CTL.search(target):
            return None
        stand_in = target.translate(_HIGH_TO_X)
        return Retry(None, target, data[:space + 1] + stand_in + data[space + 1 + len(target):])
    if "CRLF" in text or "LF after" in text:
        end = _HEAD_END.search(data, start)
        if end is None:
            return None
        head = _BARE_LF.sub(b"\r\n", data[start:end.end()])
        return Retry(None, None, head + data[end.end():])
    if "Duplicate Content-Length" in text:
        # Go keeps one of several equal Content-Length headers
        end = _HEAD_END.search(data, start)
        if end is None:
            return None
        lines = data[start:end.start()].split(b"\r\n")
        lengths = {line.split(b":", 1)[1].strip() for line in lines
                   if line[:15].lower() == b"content-length:"}
        if len(lengths) != 1:
            return None
        seen = False
        kept = []
        for line in lines:
            if line[:15].lower() == b"content-length:":
                if seen:
                    continue
                seen = True
            kept.append(line)
        return Retry(None, None, b"\r\n".join(kept) + data[end.start():])
    if "PRI" in text and data.startswith(b"PRI * HTTP/2.0\r\n", start):
        # Go answers the preface's request line like any other, then closes
        return Retry("PRI", None, b"GET * HTTP/2.0\r\nConnection: close\r\n\r\n")
    return None


def unescape_path(raw: bytes) -> str:
    """Go's path unescaping: every ``%`` must start two hex digits (ValueError otherwise)."""
    i = raw.find(b"%")
    while i >= 0:
        pair = raw[i + 1:i + 3]
        if len(pair) != 2 or not all(c in b"0123456789abcdefABCDEF" for c in pair):
            raise ValueError("invalid URL escape")
        i = raw.find(b"%", i + 3)
    from urllib.parse import unquote_to_bytes  # escaped paths are rare

    return unquote_to_bytes(raw).decode("utf-8", "surrogateescape")
