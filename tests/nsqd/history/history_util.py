"""Reading a test nsqd's history over HTTP, and consuming a channel over a raw V2 socket."""

from __future__ import annotations

import urllib.error
import urllib.request

import orjson

from helpers.nsqd_http import stats
from helpers.wire import Wire
from nsqpy.protocol.history_block import CONTENT_TYPE, BlockSplitter
from nsqpy.protocol.message import Message


def call(node, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    """``(status, body)`` of a request, errors included."""
    req = urllib.request.Request(f"http://{node.http_address}{path}", data=body or None,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def segments(node, topic: str, query: str = "") -> dict:
    status, body = call(node, "GET", f"/history/segments?topic={topic}{query}")
    assert status == 200, (status, body)
    return orjson.loads(body)


def read(node, topic: str, query: str = "") -> list:
    """The records of ``/history/read`` (``nsqpy.protocol.message.Message``, attempts 1)."""
    return [Message(i, b, t, 1) for i, b, t in read_records(node, topic, query)]


def read_blocks(node, topic: str, query: str = "") -> bytes:
    """The raw answer of ``/history/read`` (checked to be in the block framing)."""
    req = urllib.request.Request(f"http://{node.http_address}/history/read?topic={topic}{query}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"] == CONTENT_TYPE
        return resp.read()


def read_records(node, topic: str, query: str = "") -> list[tuple[bytes, bytes, int]]:
    """``(id, body, timestamp)`` of every record of ``/history/read``, in the order sent."""
    splitter = BlockSplitter()
    splitter.feed(read_blocks(node, topic, query))
    out = splitter.records()
    splitter.close()
    return out


def channel_stats(node, topic: str, channel: str) -> dict:
    """One channel's entry in ``/stats``."""
    t = [t for t in stats(node)["topics"] if t["topic_name"] == topic][0]
    return [c for c in t["channels"] if c["channel_name"] == channel][0]


def error(node, method: str, path: str) -> tuple[int, str]:
    status, body = call(node, method, path)
    return status, orjson.loads(body)["message"]


def consume(node, topic: str, channel: str, n: int, rdy: int = 100, fin: bool = True,
            wire: Wire | None = None) -> list:
    """``n`` messages off ``channel`` (each FINished), in the order they came."""
    w = wire or Wire(node.tcp_address, timeout=20)
    if wire is None:
        w.sub(topic, channel, rdy)
    got = []
    while len(got) < n:
        msg = w.read_message()
        got.append(msg)
        if fin:
            w.cmd(b"FIN", msg.id)
    if wire is None:
        w.close()
    return got


def nothing_more(wire: Wire, wait: float = 0.5) -> bool:
    """True when no message arrives within ``wait`` seconds."""
    import socket

    wire.sock.settimeout(wait)
    try:
        frame = wire.read_frame()
    except socket.timeout:
        return True
    finally:
        wire.sock.settimeout(20)
    raise AssertionError(f"unexpected frame {frame}")
