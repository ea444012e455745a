"""Response encoding with no I/O: the bytes Go's ``net/http`` server writes, per case."""

from __future__ import annotations

import pytest

from nsqpy.httpserver import wire
from nsqpy.httpserver.wire import Head, encode

DATE = b"Wed, 25 Nov 2026 15:52:51 GMT"
V1 = [("Content-Type", "application/json; charset=utf-8"),
      ("X-NSQ-Content-Type", "nsq; version=1.0")]


def test_handler_headers_are_canonical_and_sorted_then_the_servers():
    data, close = encode(Head(404, list(reversed(V1))), b'{"message":"NOT_FOUND"}', DATE)
    assert data == (b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\n"
                    b"X-Nsq-Content-Type: nsq; version=1.0\r\nDate: " + DATE +
                    b"\r\nContent-Length: 23\r\n\r\n{\"message\":\"NOT_FOUND\"}")
    assert not close


def test_sniffed_type_comes_after_the_length_and_only_with_a_body():
    assert encode(Head(200), b"OK", DATE)[0] == (
        b"HTTP/1.1 200 OK\r\nDate: " + DATE + b"\r\nContent-Length: 2\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n\r\nOK")
    assert encode(Head(200, [("X-NSQ-Content-Type", "nsq; version=1.0")]), b"", DATE)[0] == (
        b"HTTP/1.1 200 OK\r\nX-Nsq-Content-Type: nsq; version=1.0\r\nDate: " + DATE +
        b"\r\nContent-Length: 0\r\n\r\n")


def test_close_and_http10_keep_alive():
    data, close = encode(Head(200), b"OK", DATE, close=True)
    assert data.endswith(b"text/plain; charset=utf-8\r\nConnection: close\r\n\r\nOK") and close
    data, close = encode(Head(200), b"OK", DATE, http11=False, keep_alive10=True)
    assert data.startswith(b"HTTP/1.0 200 OK\r\n")
    assert data.endswith(b"Connection: keep-alive\r\n\r\nOK") and not close
    data, close = encode(Head(200), b"OK", DATE, http11=False)
    assert b"Connection" not in data and close


def test_a_body_over_gos_buffer_is_chunked_or_closes_the_connection():
    body = b"x" * 2049
    data, close = encode(Head(200), body, DATE)
    assert data == (b"HTTP/1.1 200 OK\r\nDate: " + DATE + b"\r\nContent-Type: text/plain; "
                    b"charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n801\r\n" + body +
                    b"\r\n0\r\n\r\n") and not close
    assert b"Content-Length: 2048\r\n" in encode(Head(200), b"x" * 2048, DATE)[0]
    data, close = encode(Head(200), body, DATE, http11=False, keep_alive10=True)
    assert b"Content-Length" not in data and b"Connection" not in data and close
    assert data.endswith(b"\r\n\r\n" + body)


def test_head_requests_get_the_length_without_the_body():
    data, _ = encode(Head(405, V1 + [("Allow", "GET, OPTIONS")]), b"x" * 32, DATE,
                     head_request=True)
    assert data.startswith(b"HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, OPTIONS\r\n")
    assert data.endswith(b"Content-Length: 32\r\n\r\n")
    assert encode(Head(200), b"", DATE, head_request=True)[0].endswith(DATE + b"\r\n\r\n")


def test_explicit_length_and_bodiless_statuses():
    assert wire.GLOBAL_OPTIONS.has_length
    assert encode(wire.GLOBAL_OPTIONS, b"", DATE)[0] == (
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nDate: " + DATE + b"\r\n\r\n")
    assert encode(Head(204), b"", DATE)[0] == (
        b"HTTP/1.1 204 No Content\r\nDate: " + DATE + b"\r\n\r\n")


def test_date_prefix_follows_the_date_value():
    head = Head(200)
    first = encode(head, b"OK", DATE)[0]
    later = encode(head, b"OK", b"Wed, 25 Nov 2026 15:52:52 GMT")[0]
    assert DATE in first and b"15:52:52" in later and DATE not in later


@pytest.mark.parametrize("name,canonical", [
    ("x-nsq-content-type", "X-Nsq-Content-Type"), ("content-TYPE", "Content-Type"),
    ("allow", "Allow"), ("bad header", "bad header")])
def test_canonical_key(name, canonical):
    assert wire.canonical_key(name) == canonical


def test_early_errors_are_gos_bytes():
    assert wire.BAD_REQUEST == (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; "
                                b"charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request")
    assert wire.MISSING_HOST.endswith(b"\r\n\r\n400 Bad Request: missing required Host header")
    assert wire.HEADER_TOO_LARGE.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert wire.expectation_failed(DATE) == (
        b"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: " + DATE +
        b"\r\nContent-Length: 0\r\n\r\n")


def test_header_values():
    assert wire.format_date(0) == b"Thu, 01 Jan 1970 00:00:00 GMT"
    assert wire.format_date(1795621971) == DATE
    assert wire.has_token(b"keep-alive, Close", b"close")
    assert not wire.has_token(b"closed", b"close")
    assert wire.parse_content_length(b" 12 ") == 12
    for bad in (b"-1", b"1.0", b"", b"0x10", b"1" * 20):
        with pytest.raises(ValueError):
            wire.parse_content_length(bad)
    assert wire.valid_host(b"[::1]:4151") and wire.valid_host(b"")
    assert not wire.valid_host(b"a b") and not wire.valid_host(b"a/b")


def test_date_cache_changes_once_a_second():
    cache = wire.DateCache()
    cache.refresh(100.2)
    value = cache.value
    cache.refresh(100.9)
    assert cache.value is value
    cache.refresh(101.0)
    assert cache.value == wire.format_date(101)
