"""How nsqadmin's API answers: upstream's ``http_api.V1`` decorator and ``maybeWarnMsg``.

The bottom of the package: the HTTP server and every module that serves a route of its own
(graphite, live) answer through these, and this module imports nothing of nsqadmin's.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..common.goweb import go_json

V1_HEADERS = {"X-NSQ-Content-Type": "nsq; version=1.0"}


def warn_message(messages: list[str]) -> str:
    """Upstream's ``maybeWarnMsg``: partial failures joined after ``WARNING: ``."""
    return "WARNING: " + "; ".join(messages) if messages else ""


def v1_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=go_json(data),
                        headers={**V1_HEADERS, "Content-Type": "application/json; charset=utf-8"})


def v1_error(code: int, text: str) -> web.Response:
    return v1_response({"message": text}, code)
