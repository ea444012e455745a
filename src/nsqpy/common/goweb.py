"""What Go's standard library does at the HTTP edge, for the three daemons alike.

Upstream's HTTP APIs parse queries with ``url.ParseQuery`` and answer with ``encoding/json``;
clients and scripts see both in error cases and byte-for-byte bodies, so one copy serves nsqd,
nsqlookupd and nsqadmin (``go_json`` is :func:`nsqpy.protocol.gojson.dumps`).
"""

from __future__ import annotations

import re

from ..protocol.names import is_valid_name
from ..protocol.gojson import dumps as go_json  # noqa: F401 (the daemons' one JSON writer, as callers know it)

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _unescape(text: str) -> str:
    if "%" not in text:
        return text.replace("+", " ") if "+" in text else text
    if _BAD_ESCAPE.search(text):
        raise ValueError(f"invalid URL escape in {text!r}")
    from urllib.parse import unquote_to_bytes  # loaded with the first escape seen

    # Go keeps invalid UTF-8 as bytes; such names fail validation anyway, and replacing them
    # keeps every later JSON answer encodable
    return unquote_to_bytes(text.replace("+", " ")).decode("utf-8", "replace")


def parse_query(raw: str) -> dict[str, list[str]]:
    """Go's ``url.ParseQuery``: ValueError on a bad %-escape or a ``;`` separator. Go keeps
    parsing after an error, but upstream's handlers reject the request on any, so the first
    one is raised (after the whole query was read, as Go does)."""
    values: dict[str, list[str]] = {}
    error: ValueError | None = None
    for part in raw.split("&"):
        if ";" in part:
            error = error or ValueError("invalid semicolon separator in query")
            continue
        if not part:
            continue
        key, _, value = part.partition("=")
        try:
            key, value = _unescape(key), _unescape(value)
        except ValueError as err:
            error = error or err
            continue
        values.setdefault(key, []).append(value)
    if error is not None:
        raise error
    return values


def first_value(query: dict[str, list[str]], key: str) -> str | None:
    """``url.Values.Get``: the first value of ``key``, None when absent."""
    values = query.get(key)
    return values[0] if values else None


class ApiError(Exception):
    """An HTTP API error: the status and the text of upstream's ``{"message": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def topic_channel_args(query: dict[str, list[str]]) -> tuple[str, str]:
    """Upstream's ``http_api.GetTopicChannelArgs``: both names present and valid."""
    topic = first_value(query, "topic")
    if topic is None:
        raise ApiError(400, "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise ApiError(400, "INVALID_ARG_TOPIC")
    channel = first_value(query, "channel")
    if channel is None:
        raise ApiError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise ApiError(400, "INVALID_ARG_CHANNEL")
    return topic, channel
