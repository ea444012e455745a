"""Upstream's ``internal/http_api`` answers for the daemons on :mod:`nsqpy.httpserver`.

nsqd and nsqlookupd answer through the same decorators upstream: ``V1`` (``RespondV1``: data as
JSON with its Content-Type, a string as it is, nothing as an empty body, always with
``X-NSQ-Content-Type``; an error as ``{"message": ...}``) and ``PlainText`` (the text alone,
its type sniffed by Go's server). The heads are built once; error answers are kept per status
and text, so a repeated refusal encodes nothing.
"""

from __future__ import annotations

from ..httpserver.wire import TEXT_PLAIN, Head, Response, sniff
from .goweb import go_json

V1_HEADER = "X-NSQ-Content-Type"
V1_VALUE = "nsq; version=1.0"
JSON_TYPE = "application/json; charset=utf-8"

V1_JSON = (("Content-Type", JSON_TYPE), (V1_HEADER, V1_VALUE))
#: ``RespondV1`` with data marshalled to JSON
OK_JSON = Head(200, V1_JSON)
#: ``RespondV1`` with no data (an empty body, no Content-Type), or a string (sniffed as text)
OK_V1 = Head(200, ((V1_HEADER, V1_VALUE),))
#: ``PlainText``: no header of its own, Go's server sniffs the text
OK_PLAIN = Head(200)

_ERROR_HEADS: dict[tuple[int, tuple[tuple[str, str], ...]], Head] = {}
_ERROR_BODIES: dict[str, bytes] = {}
_TEXT_HEADS: dict[tuple[int, str, bool], Head] = {}


def v1_error(code: int, text: str, extra: tuple[tuple[str, str], ...] = ()) -> Response:
    """``{"message": text}`` with upstream's V1 headers (plus e.g. ``Allow`` for 405)."""
    head = _ERROR_HEADS.get((code, extra))
    if head is None:
        head = _ERROR_HEADS[(code, extra)] = Head(code, V1_JSON + extra)
    body = _ERROR_BODIES.get(text)
    if body is None:
        if len(_ERROR_BODIES) >= 256:  # texts that carry values (rare): not kept for long
            _ERROR_BODIES.clear()
        body = _ERROR_BODIES[text] = go_json({"message": text})
    return head, body


def v1_json(value: object) -> Response:
    """``RespondV1(w, 200, value)`` for data that is marshalled."""
    return OK_JSON, go_json(value)


def v1_text(text: str | bytes, status: int = 200) -> Response:
    """``RespondV1`` with a string: its bytes as they are, typed by Go's sniffing."""
    return _sniffed(status, text, True)


def plain_text(text: str | bytes, status: int = 200) -> Response:
    """The ``PlainText`` decorator: the text alone, typed by Go's sniffing."""
    return _sniffed(status, text, False)


def _sniffed(status: int, text: str | bytes, v1: bool) -> Response:
    body = text.encode() if isinstance(text, str) else text
    kind = sniff(body) if body else TEXT_PLAIN
    head = _TEXT_HEADS.get((status, kind, v1))
    if head is None:
        head = _TEXT_HEADS[(status, kind, v1)] = Head(
            status, ((V1_HEADER, V1_VALUE),) if v1 else (), sniffed=kind)
    return head, body
