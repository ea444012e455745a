"""Lease names and a lease's replay order, without sockets."""

from __future__ import annotations

from nsqpy.nsqd.leases.lease import Lease
from nsqpy.nsqd.leases.names import is_valid_group, parse_name, parse_seq
from nsqpy.protocol.message import decode_message
from nsqpy.protocol.frames import FrameDecoder


def test_names():
    assert parse_name("run-1.a_b/12/p0") == ("run-1.a_b", 12, "p0")
    assert parse_name("g/0") == ("g", 0, "")
    assert parse_name("g/9223372036854775807").seq == (1 << 63) - 1
    for bad in ("", "g", "g/", "/1", "g/1/", "g/-1", "g/+1", "g/1/2/3", "g/9223372036854775808",
                "g/١", "a" * 65 + "/1", "g/1/" + "p" * 65, "g h/1"):
        assert parse_name(bad) is None, bad
    assert is_valid_group("q7") and not is_valid_group("a/b") and not is_valid_group("")
    assert parse_seq("0") == 0 and parse_seq("١") is None and parse_seq("-3") is None


class FakeClient:
    def __init__(self, cid: int) -> None:
        self.id = cid
        self.in_flight: dict = {}
        self.out: list[bytes] = []
        self.message_count = 0
        self.flushes = 0

    def schedule_flush(self) -> None:
        self.flushes += 1


def entry(i: int, delivered: float) -> tuple:
    mid = b"%016d" % i
    return (mid, b"body%d" % i, 1000 + i, 1 + i % 3, delivered + 60, delivered)


def test_replay_merges_tables_in_delivery_order_and_keeps_attempts():
    lease = Lease("g/1/0", parse_name("g/1/0"), 60.0)
    a, b = {}, {}
    for i, t in ((0, 1.0), (1, 1.0), (2, 1.0), (5, 3.0)):
        a[b"%016d" % i] = entry(i, t)
    for i, t in ((3, 2.0), (4, 2.0)):
        b[b"%016d" % i] = entry(i, t)
    lease.tables = [a, b]
    lease.renew(900.0)  # in place: the order stays
    replayer = FakeClient(9)
    lease.tables.append(replayer.in_flight)
    assert lease.replay(replayer) == 6
    frames = FrameDecoder().feed(b"".join(replayer.out))
    msgs = [decode_message(f.data) for f in frames]
    assert [int(m.id) for m in msgs] == [0, 1, 2, 3, 4, 5]
    assert [m.attempts for m in msgs] == [1, 2, 3, 1, 2, 3]
    assert list(replayer.in_flight) == [m.id for m in msgs]
    assert lease.tables == [replayer.in_flight] and lease.held == 6
    assert lease.pop(b"%016d" % 4)[1] == b"body4" and lease.held == 5
