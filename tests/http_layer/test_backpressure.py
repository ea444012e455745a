"""A client that pipelines requests without reading the answers is not read either (issue #32).

Go's ``net/http`` handles a connection's requests one after the other and writes each answer
before reading on, so once a client stops reading, the server's write blocks and it stops reading
too. Ours must hold no more: 4 connections pipelining 120,000 ``GET /ping`` each, reading nothing,
grow nsqd's and nsqlookupd's resident size by less than 32 MiB, and every request is answered once
the clients read. Before the bound, 4 x 400,000 grew nsqd by 363 MiB (~240 bytes an answer held), so
4 x 120,000 would grow it by ~110 MiB: the count keeps a server that reads on well past the limit
while costing a quarter of the CPU (``make test``'s time, issue #45). nsqadmin (aiohttp) bounds the
requests it parses ahead itself (32 per connection); it is checked with 4 x 30,000, as it answers
more slowly: with aiohttp's bound lifted, 4 x 20,000 grew it by 49 MiB (~630 bytes a request).
"""

from __future__ import annotations

import pytest

from helpers.daemons_cluster import NsqAdmin
from helpers.pipelining import pipelined_growth
from helpers.proc import rss_kib
from helpers.servers import Nsqd, Nsqlookupd

CONNECTIONS = 4
LIMIT_KIB = 32 << 10

pytestmark = pytest.mark.timeout(300)


def _check(server, count: int) -> None:
    growth, answered, clients = pipelined_growth("127.0.0.1", server.http_port,
                                                 lambda: rss_kib(server.pid),
                                                 connections=CONNECTIONS, count=count,
                                                 timeout=240)
    assert [c.error for c in clients] == [None] * CONNECTIONS
    assert answered == CONNECTIONS * count
    assert growth < LIMIT_KIB, f"RSS grew {growth} KiB"


@pytest.mark.parametrize("daemon", [Nsqd, Nsqlookupd], ids=["nsqd", "nsqlookupd"])
def test_daemon_stops_reading_a_client_that_does_not_read(tmp_path, daemon):
    node = daemon(tmp_path / "daemon")
    try:
        _check(node, 120_000)
    finally:
        node.stop()


def test_nsqadmin_stops_reading_a_client_that_does_not_read(tmp_path):
    lookupd = Nsqlookupd(tmp_path / "lookupd")
    try:
        admin = NsqAdmin(tmp_path / "admin", f"--lookupd-http-address={lookupd.http_address}")
        try:
            _check(admin, 30_000)
        finally:
            admin.stop()
    finally:
        lookupd.stop()


def _post(path: str, body: bytes) -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        path.encode(), len(body), body)


def test_a_read_held_back_is_answered_in_order(layer, client):
    """One write far larger than a slice, mixing answers much larger than their requests (the
    answers owed pass the limit mid-read), an awaiting handler, bodies buffered, drained and
    streamed: the rest of the read waits unparsed, and every request is answered, in order."""
    server = layer()
    c = client(server.port, timeout=30)
    burst = [b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n"] * 120 + [
        b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", _post("/buffer", b"abc"),
        _post("/drain", b"d" * 3000), _post("/stream", b"s" * 5000)]
    burst = burst * 3 + [b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"] * 2000
    data = b"".join(burst)
    assert len(data) > 4 * (16 << 10)
    c.send(data)
    bodies = [c.read_answer()[2] for _ in range(len(burst))]
    expected = ([b"x" * 5000] * 120 + [b"slow", b"got 3", b"drained", b"5000"]) * 3
    assert bodies == expected + [b"OK"] * 2000
    assert server.errors == []
