"""Helpers for the nsqadmin tests: a real nsqlookupd + 2 nsqd + nsqadmin, all subprocesses.

The nsqd register with the nsqlookupd (``--lookupd-tcp-address``), nsqadmin reads the cluster
through the nsqlookupd's HTTP API, exactly as in production. Everything listens on free loopback
ports and is stopped by PID at teardown.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from helpers.servers import VENV_BIN, Nsqd, Nsqlookupd, ServerProcess, free_port

ADMIN_USER = "alice"


class NsqAdmin(ServerProcess):
    def __init__(self, log_dir: Path, *extra: str, base_path: str = "/") -> None:
        self.http_port = free_port()
        log_dir.mkdir(parents=True, exist_ok=True)
        argv = [str(VENV_BIN / "nsqadmin"), f"--http-address=127.0.0.1:{self.http_port}",
                f"--base-path={base_path}", *extra]
        ping = base_path.rstrip("/") + "/ping"
        super().__init__(argv, f"http://127.0.0.1:{self.http_port}{ping}",
                         log_dir / f"nsqadmin_{self.http_port}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(url: str, method: str = "GET", body: Any = None,
            headers: dict[str, str] | None = None) -> Response:
    """One HTTP request; errors are returned, not raised. ``body``: JSON-encoded unless bytes."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return Response(resp.status, dict(resp.headers), resp.read())
    except urllib.error.HTTPError as err:
        return Response(err.code, dict(err.headers), err.read())


def wait_until(cond, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def nsqd_stats(node: Nsqd, topic: str) -> dict | None:
    """The topic's entry in one nsqd's ``/stats`` (None when that nsqd has no such topic)."""
    doc = request(f"http://{node.http_address}/stats?format=json&topic={topic}").json()
    topics = doc.get("topics") or []
    return topics[0] if topics else None


def lookupd_producer_ports(lookupd: Nsqlookupd, topic: str) -> set[int]:
    resp = request(f"http://{lookupd.http_address}/lookup?topic={topic}")
    if resp.status != 200:
        return set()
    return {p["http_port"] for p in resp.json()["producers"]}


class NotificationSink:
    """An HTTP server recording every POSTed notification (JSON) in a queue."""

    def __init__(self) -> None:
        self.received: queue.Queue[dict] = queue.Queue()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                doc = json.loads(self.rfile.read(length))
                doc["_content_type"] = self.headers.get("Content-Type")
                sink.received.put(doc)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait_for(self, action: str, topic: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {action} notification for {topic}")
            try:
                doc = self.received.get(timeout=left)
            except queue.Empty:
                continue
            if doc.get("action") == action and doc.get("topic") == topic:
                return doc

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@dataclass
class Cluster:
    lookupd: Nsqlookupd
    nodes: list[Nsqd]
    admin: NsqAdmin
    sink: NotificationSink | None

    def publish(self, node: Nsqd, topic: str, count: int) -> None:
        body = b"\n".join(b"msg %d" % i for i in range(count)) + b"\n"
        resp = request(f"http://{node.http_address}/mpub?topic={topic}", "POST", body)
        assert resp.status == 200, resp

    def create_channel(self, topic: str, channel: str) -> None:
        for node in self.nodes:
            for path in (f"/topic/create?topic={topic}",
                         f"/channel/create?topic={topic}&channel={channel}"):
                resp = request(f"http://{node.http_address}{path}", "POST", b"")
                assert resp.status == 200, resp

    def wait_in_channel(self, topic: str, channel: str, counts: list[int]) -> None:
        """Until each nsqd's channel holds its messages: nsqd hands a new topic's messages to
        its channels only once the topic has started (after asking nsqlookupd for channels)."""
        def arrived() -> bool:
            for node, count in zip(self.nodes, counts):
                stats = nsqd_stats(node, topic)
                chans = {c["channel_name"]: c for c in (stats or {}).get("channels") or ()}
                if channel not in chans or chans[channel]["depth"] != count:
                    return False
            return True
        wait_until(arrived, what=f"messages in {topic}/{channel} on every nsqd")

    def wait_registered(self, topic: str) -> None:
        ports = {n.http_port for n in self.nodes}
        wait_until(lambda: lookupd_producer_ports(self.lookupd, topic) == ports,
                   what=f"both nsqd registered for {topic}")


def start_cluster(tmp: Path, *admin_flags: str, with_sink: bool = True,
                  nsqd_flags: tuple[str, ...] = ()):
    started: list[ServerProcess] = []
    sink = NotificationSink() if with_sink else None
    try:
        lookupd = Nsqlookupd(tmp / "lookupd")
        started.append(lookupd)
        for i in range(2):
            started.append(Nsqd(tmp / f"nsqd{i}", f"--lookupd-tcp-address={lookupd.tcp_address}",
                                *nsqd_flags))
        flags = [f"--lookupd-http-address={lookupd.http_address}", *admin_flags]
        if sink is not None:
            flags.append(f"--notification-http-endpoint={sink.url}")
        admin = NsqAdmin(tmp / "admin", *flags)
        started.append(admin)
    except BaseException:
        for proc in reversed(started):
            proc.stop()
        if sink is not None:
            sink.close()
        raise
    cluster = Cluster(lookupd, [p for p in started if isinstance(p, Nsqd)], admin, sink)
    return cluster, started
