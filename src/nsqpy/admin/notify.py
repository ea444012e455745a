"""Notifications of admin actions (upstream's ``notify.go``): one JSON document per action,
POSTed to ``--notification-http-endpoint`` in the background, one at a time.

An admin action never waits for (or fails because of) its notification. The queue is bounded:
beyond :data:`NOTIFY_BACKLOG` waiting documents a new one is dropped with an error line.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import time
from typing import Any, Callable

import aiohttp
from aiohttp import web

from ..common.goweb import go_json

#: notifications waiting to be sent; beyond this an admin action's notification is dropped
NOTIFY_BACKLOG = 1000


def basic_auth_user(request: web.Request) -> str:
    parts = request.headers.get("Authorization", "").split(" ", 1)
    if len(parts) != 2 or parts[0] != "Basic":
        return ""
    try:
        decoded = base64.b64decode(parts[1], validate=True).decode("utf-8", "replace")
    except ValueError:
        return ""
    user, sep, _ = decoded.partition(":")
    return user if sep else ""


def remote_addr(request: web.Request) -> str:
    """``host:port`` of the peer, as Go's ``Request.RemoteAddr``."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if not peer:
        return ""
    host = peer[0]
    return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"


def action_document(action: str, topic: str, channel: str, node: str,
                    request: web.Request) -> dict[str, Any]:
    """Upstream's ``AdminAction``: who did what, from where, through which URL."""
    scheme = "https" if request.secure or request.headers.get("X-Scheme") == "https" else "http"
    url = f"{scheme}://{request.host}{request.path}"
    if request.rel_url.raw_query_string:
        url += "?" + request.rel_url.raw_query_string
    doc: dict[str, Any] = {"action": action, "topic": topic}
    if channel:
        doc["channel"] = channel
    if node:
        doc["node"] = node
    doc["timestamp"] = int(time.time())
    user = basic_auth_user(request)
    if user:
        doc["user"] = user
    doc["remote_ip"] = remote_addr(request)
    doc["user_agent"] = request.headers.get("User-Agent", "")
    doc["url"] = url
    doc["via"] = socket.gethostname()
    return doc


class Notifier:
    """The background sender; ``endpoint`` is read per document (``PUT /config`` may not
    change it, but the options object is the one the server reads)."""

    def __init__(self, endpoint: Callable[[], str], session: aiohttp.ClientSession,
                 logger: Any) -> None:
        self.endpoint = endpoint
        self.session = session
        self.logger = logger
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(NOTIFY_BACKLOG)
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    def send(self, doc: dict[str, Any]) -> None:
        try:
            self.queue.put_nowait(doc)
        except asyncio.QueueFull:
            self.logger.error("notification queue full, dropping %s", doc.get("action"))

    async def _run(self) -> None:
        while True:
            doc = await self.queue.get()
            if doc is None:
                return
            endpoint = self.endpoint()
            self.logger.info("POSTing notification to %s", endpoint)
            try:
                async with self.session.post(
                        endpoint, data=go_json(doc),
                        headers={"Content-Type": "application/json"}) as resp:
                    await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as err:
                self.logger.error("failed to POST notification - %s", err)

    async def close(self, timeout: float) -> None:
        if self.task is None:
            return
        try:
            self.queue.put_nowait(None)
        except asyncio.QueueFull:
            self.task.cancel()
        try:
            await asyncio.wait_for(self.task, timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self.logger.error("notifications still queued at exit were not sent")
