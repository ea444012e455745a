"""Helpers for the lease tests: a leased reader over the raw V2 wire, and the lease routes."""

from __future__ import annotations

import urllib.error
import urllib.request

import orjson

from helpers.polling import wait_for  # noqa: F401
from helpers.wire import Wire
from nsqpy.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from nsqpy.protocol.message import decode_message


def lease_conn(node, name: str, replay: bool = False, **fields) -> tuple[Wire, dict]:
    """A connection that named ``name`` in IDENTIFY; returns it and the answer's ``lease``."""
    w = Wire(node.tcp_address)
    body = {"feature_negotiation": True, "lease": name, **fields}
    if replay:
        body["lease_replay"] = True
    answer = w.identify(**body)
    return w, answer["lease"]


def read_until_close_wait(w: Wire) -> list:
    """CLS, then every message up to CLOSE_WAIT (nsqd queues CLOSE_WAIT after them)."""
    w.cmd(b"CLS")
    got = []
    while True:
        frame = w.read_frame()
        if frame.frame_type == FRAME_TYPE_MESSAGE:
            got.append(decode_message(frame.data))
            continue
        assert frame.frame_type == FRAME_TYPE_RESPONSE and frame.data == b"CLOSE_WAIT", frame
        return got


def read_n(w: Wire, n: int) -> list:
    return [w.read_message() for _ in range(n)]


def lease_read(node, name: str, topic: str, channel: str, n: int, replay: bool = False,
               **fields) -> tuple[dict, list]:
    """Read ``n`` messages under the lease (RDY n), stop with CLS and close; the answer's lease
    part and every message received."""
    w, lease = lease_conn(node, name, replay, **fields)
    try:
        w.sub(topic, channel, rdy=n)
        got = read_n(w, n) if lease["state"] != "replay" else []
        got += read_until_close_wait(w)
    finally:
        w.close()
    return lease, got


def error_frame(w: Wire) -> bytes:
    frame = w.read_frame()
    assert frame.frame_type == FRAME_TYPE_ERROR, frame
    return frame.data


def http_request(node, method: str, path: str) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://{node.http_address}{path}",
                                 data=b"" if method == "POST" else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def post_json(node, path: str) -> tuple[int, dict | None]:
    status, body = http_request(node, "POST", path)
    return status, (orjson.loads(body) if body else None)


def get_json(node, path: str) -> dict:
    status, body = http_request(node, "GET", path)
    assert status == 200, (status, body)
    return orjson.loads(body)


def channel_stats(node, topic: str, channel: str) -> dict:
    doc = get_json(node, f"/stats?format=json&topic={topic}&channel={channel}")
    return doc["topics"][0]["channels"][0]
