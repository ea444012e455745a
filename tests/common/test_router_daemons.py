"""httprouter's routing decisions, pinned on all three daemons (real processes, raw HTTP).

nsqd, nsqlookupd and nsqadmin share :mod:`nsqpy.common.router`; these requests check the
behaviour upstream's three daemons share (method-strict 405 with ``Allow``, ``OPTIONS``,
trailing-slash / case / clean-path redirects keeping the query, 404). The same requests to
upstream v1.3.0's daemons get the same answers: live with its binaries (``NSQ_UPSTREAM_BIN``),
else as recorded in ``tests/recordings/http/test_router_daemons.json``.
"""

from __future__ import annotations

import http.client
import json
import tempfile
from pathlib import Path

import pytest

from helpers.recording import recording
from helpers.servers import VENV_BIN, Nsqd, Nsqlookupd, ServerProcess, free_port
from helpers.upstream import upstream_binary, upstream_dir

pytestmark = pytest.mark.timeout(120)

RECORDED = recording("http", "test_router_daemons")

#: a POST-only route of each daemon
POST_PATH = {"nsqd": "/topic/create", "nsqlookupd": "/topic/create", "nsqadmin": "/api/topics"}


def request(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def start_daemons(bin_dir: Path, tmp: Path) -> tuple[dict[str, int], list]:
    """nsqd, nsqlookupd and nsqadmin from ``bin_dir``; returns their HTTP ports and handles."""
    procs: list = []
    ports = {name: free_port() for name in ("nsqd", "nsqlookupd", "nsqadmin")}
    ltcp, ntcp = free_port(), free_port()
    try:
        for name, args in (
            ("nsqlookupd", [f"--tcp-address=127.0.0.1:{ltcp}"]),
            ("nsqd", [f"--tcp-address=127.0.0.1:{ntcp}", f"--data-path={tmp / 'nsqd'}"]),
            ("nsqadmin", [f"--lookupd-http-address=127.0.0.1:{ports['nsqlookupd']}"]),
        ):
            (tmp / name).mkdir(parents=True, exist_ok=True)
            argv = [str(bin_dir / name), f"--http-address=127.0.0.1:{ports[name]}", *args]
            procs.append(ServerProcess(argv, f"http://127.0.0.1:{ports[name]}/ping",
                                       tmp / name / f"{name}.log"))
    except BaseException:
        for p in procs:
            p.stop()
        raise
    return ports, procs


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    ports, procs = start_daemons(VENV_BIN, tmp_path_factory.mktemp("ours"))
    yield ports
    for p in procs:
        p.stop()


def cases(daemon: str) -> list[tuple[str, str]]:
    post = POST_PATH[daemon]
    return [("GET", "/ping"), ("POST", "/ping"), ("PUT", "/ping"), ("GET", "/ping/"),
            ("GET", "/PING?x=1&y=%2F"), ("GET", "//ping"), ("GET", "/a/../ping"),
            ("POST", post + "/"), ("POST", post.upper()), ("GET", post), ("OPTIONS", "/ping"),
            ("OPTIONS", "/nope"), ("GET", "/nope"), ("DELETE", "/nope"), ("HEAD", "/ping/"),
            ("HEAD", "/ping"),
            ("GET", "/")]


def answer(port: int, method: str, path: str) -> tuple:
    status, headers, body = request(port, method, path)
    return (status, headers.get("location"), headers.get("allow"),
            headers.get("content-type") if status in (301, 307) else None,
            body if status != 200 or path != "/" else b"")


@pytest.mark.parametrize("daemon", ["nsqd", "nsqlookupd", "nsqadmin"])
def test_routing_decisions(ours, daemon):
    port = ours[daemon]
    post = POST_PATH[daemon]
    assert request(port, "GET", "/ping")[0] == 200

    status, headers, body = request(port, "POST", "/ping")
    assert (status, headers["allow"]) == (405, "GET, OPTIONS")
    assert json.loads(body) == {"message": "METHOD_NOT_ALLOWED"}

    status, headers, body = request(port, "GET", "/ping/")
    assert (status, headers["location"]) == (301, "/ping")
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert body == b'<a href="/ping">Moved Permanently</a>.\n\n'

    assert request(port, "GET", "/PING?x=1")[1]["location"] == "/ping?x=1"
    assert request(port, "GET", "/a/../ping")[1]["location"] == "/ping"

    status, headers, body = request(port, "POST", post + "/")
    assert (status, headers["location"], body) == (307, post, b"")
    assert request(port, "POST", post.upper())[1]["location"] == post

    status, headers, _ = request(port, "OPTIONS", "/ping")
    assert (status, headers["allow"]) == (200, "GET, OPTIONS")

    status, _, body = request(port, "GET", "/nope")
    assert status == 404 and json.loads(body) == {"message": "NOT_FOUND"}
    assert request(port, "HEAD", "/ping")[0] == 405  # no HEAD routes (httprouter v1.3.0)


def upstream_answers() -> dict[str, list[tuple]]:
    """Upstream's daemons' answers to ``cases``, daemon by daemon."""
    upstream_binary("nsqd"), upstream_binary("nsqlookupd"), upstream_binary("nsqadmin")  # or skip
    with tempfile.TemporaryDirectory() as tmp:
        theirs, procs = start_daemons(upstream_dir(), Path(tmp))
        try:
            return {daemon: [answer(theirs[daemon], method, path) for method, path in cases(daemon)]
                    for daemon in ("nsqd", "nsqlookupd", "nsqadmin")}
        finally:
            for p in procs:
                p.stop()


def test_same_answers_as_upstream(ours):
    want = RECORDED.answer(None, upstream_answers)
    for daemon in ("nsqd", "nsqlookupd", "nsqadmin"):
        for (method, path), expected in zip(cases(daemon), want[daemon], strict=True):
            assert answer(ours[daemon], method, path) == expected, (daemon, method, path)
