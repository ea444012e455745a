"""Back-to-back FINs in one read (nsqd handles them as one run): same effects and errors, in
order, as FINs arriving one by one."""

from __future__ import annotations

import json
import urllib.request

import pytest

from helpers.servers import unique_name
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(30)


def fin(mid: bytes, crlf: bool = False) -> bytes:
    return b"FIN " + mid + (b"\r\n" if crlf else b"\n")


def client_stats(http: str, topic: str) -> list[dict]:
    with urllib.request.urlopen(f"http://{http}/stats?format=json&topic={topic}", timeout=5) as r:
        stats = json.load(r)
    stats = stats.get("data", stats)
    return stats["topics"][0]["channels"][0]["clients"]


def test_fin_run_with_bad_ids_answers_each_in_order(shared_nsqd):
    topic = unique_name()
    pub, other = Wire(shared_nsqd.tcp_address), Wire(shared_nsqd.tcp_address)
    sub = Wire(shared_nsqd.tcp_address)
    sub.sub(topic, "ch", rdy=5)
    other.sub(topic, "ch", rdy=0)
    pub.mpub(topic, [b"m%d" % i for i in range(5)])
    got = [sub.read_message() for _ in range(5)]
    ids = [m.id for m in got]
    # one write: two FINs, an unknown id, a repeat, a CRLF line in the middle, the rest
    sub.send(fin(ids[0]) + fin(ids[1]) + fin(b"0123456789abcdef") + fin(ids[1])
             + fin(ids[2]) + fin(ids[3], crlf=True) + fin(ids[4]))
    sub.expect_error(b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight")
    sub.expect_error(b"E_FIN_FAILED FIN " + ids[1] + b" failed ID not in flight")
    # all five were finished: the next five fill RDY 5 again and nothing comes back
    pub.mpub(topic, [b"n%d" % i for i in range(5)])
    again = [sub.read_message() for _ in range(5)]
    assert sorted(m.body for m in again) == [b"n%d" % i for i in range(5)]
    assert {m.attempts for m in again} == {1}
    # another consumer's messages in a run: "does not own", and the connection carries on
    other.send(fin(again[0].id) + fin(again[1].id))
    other.expect_error(b"E_FIN_FAILED FIN " + again[0].id + b" failed client does not own message")
    other.expect_error(b"E_FIN_FAILED FIN " + again[1].id + b" failed client does not own message")
    sub.send(b"".join(fin(m.id) for m in again))
    sub.cmd(b"NOP")
    assert not sub.is_closed(0.3)
    counts = {c["finish_count"] for c in client_stats(shared_nsqd.http_address, topic)}
    assert counts == {10, 0}


def test_fin_run_before_sub_is_fatal(shared_nsqd):
    w = Wire(shared_nsqd.tcp_address)
    w.send(fin(b"0123456789abcdef") + fin(b"fedcba9876543210"))
    w.expect_error(b"E_INVALID cannot FIN in current state")
    assert w.is_closed()
