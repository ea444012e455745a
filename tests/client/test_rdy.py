"""RDY budget rules (go-nsq's), checked without sockets."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.client.rdy import RdyBudget

pytestmark = pytest.mark.timeout(30)


def apply(sent: dict, sends) -> None:
    for key, count in sends:
        sent[key] = count


def test_per_conn_share_is_clamped():
    b = RdyBudget(10)
    assert b.per_conn() == 10
    for i in range(3):
        b.add(i, 2500, 0.0)
    assert b.per_conn() == 3  # 10 // 3
    for i in range(3, 20):
        b.add(i, 2500, 0.0)
    assert b.per_conn() == 1  # never below 1, even with more conns than budget
    assert RdyBudget(0).per_conn() == 0


def test_new_connections_share_budget_and_never_exceed_it():
    b = RdyBudget(100)
    sent: dict = {}
    b.add("a", 2500, 0.0)
    apply(sent, b.rebalance(0.0))
    assert sent == {"a": 100}
    b.add("b", 2500, 0.0)
    apply(sent, b.rebalance(0.0))
    assert sent == {"a": 50, "b": 50}
    assert b.total == 100
    b.add("c", 2500, 0.0)
    sends = b.rebalance(0.0)
    # the decrease comes first so its budget can fund the new connection in the same pass
    assert sends[0] == ("a", 33) or sends[0] == ("b", 33)
    apply(sent, sends)
    assert sorted(sent.values()) == [33, 33, 33]
    assert b.total == 99


def test_max_rdy_count_caps_a_connection():
    b = RdyBudget(5000)
    b.add("a", 2500, 0.0)
    assert b.rebalance(0.0) == [("a", 2500)]
    assert b.total == 2500


def test_raise_truncated_to_remaining_budget():
    b = RdyBudget(10)
    b.add("a", 2500, 0.0)
    b.add("b", 2500, 0.0)
    assert b.update("a", 8, 0.0) == [("a", 8)]
    assert b.update("b", 5, 0.0) == [("b", 2)]  # only 2 left
    assert b.total == 10


def test_conn_stuck_at_zero_is_retried_on_tick():
    b = RdyBudget(1)
    b.add("a", 2500, 0.0)
    b.add("b", 2500, 0.0)
    assert b.update("a", 1, 0.0) == [("a", 1)]
    assert b.update("b", 1, 0.0) == []  # no budget: remembered for a retry
    assert b.conns["b"].retry == 1
    b.update("a", 0, 1.0)
    assert ("b", 1) in b.tick(2.0, in_backoff=False)
    assert b.total == 1


def test_decrease_always_applies_after_max_in_flight_lowered():
    b = RdyBudget(100)
    for k in "abcd":
        b.add(k, 2500, 0.0)
    b.rebalance(0.0)
    assert b.total == 100
    sends = b.set_max_in_flight(8, 1.0, in_backoff=False)
    assert sorted(c for _, c in sends) == [2, 2, 2, 2]
    assert b.total == 8


def test_removed_connection_share_goes_to_the_others():
    b = RdyBudget(10)
    b.add("a", 2500, 0.0)
    b.add("b", 2500, 0.0)
    b.rebalance(0.0)
    assert b.remove("b", 1.0, in_backoff=False) == [("a", 10)]
    assert b.total == 10


def test_redistribution_rotates_rdy_when_more_conns_than_budget():
    rng = random.Random(3)
    b = RdyBudget(2, low_rdy_idle_timeout=10, low_rdy_timeout=30, rng=rng)
    sent: dict = {}
    for k in "abcde":
        b.add(k, 2500, 0.0)
        apply(sent, b.rebalance(0.0))
    assert b.total == 2
    holders = {k for k, v in sent.items() if v}
    assert len(holders) == 2
    # holders stay idle past low_rdy_idle_timeout: they give RDY back, random conns get RDY 1
    for step in range(1, 30):
        apply(sent, b.tick(step * 5.0, in_backoff=False))
        assert b.total <= 2
        assert sum(sent.values()) == b.total
    seen = set()
    for step in range(30, 80):
        apply(sent, b.tick(step * 5.0, in_backoff=False))
        seen |= {k for k, v in sent.items() if v}
    assert seen == set("abcde")  # everybody gets a turn


def test_active_connection_keeps_rdy_until_low_rdy_timeout():
    b = RdyBudget(1, low_rdy_idle_timeout=10, low_rdy_timeout=30, rng=random.Random(1))
    b.add("a", 2500, 0.0)
    b.add("b", 2500, 0.0)
    b.update("a", 1, 0.0)
    b.conns["a"].last_msg = 20.0  # busy
    assert b.tick(25.0, in_backoff=False) == []
    b.conns["a"].last_msg = 31.0
    sends = b.tick(31.0, in_backoff=False)  # held RDY for > 30 s: handed on
    assert ("a", 0) in sends
    assert b.total == 1


def test_backoff_zero_then_probe_one():
    b = RdyBudget(50, rng=random.Random(7))
    for k in "abc":
        b.add(k, 2500, 0.0)
    b.rebalance(0.0)
    sends = b.all_zero(1.0)
    assert sorted(sends) == [("a", 0), ("b", 0), ("c", 0)]
    assert b.total == 0
    probe = b.probe(2.0)
    assert len(probe) == 1 and probe[0][1] == 1
    # in backoff redistribution keeps the total at 1
    for t in range(3, 200, 5):
        b.tick(float(t), in_backoff=True)
        assert b.total <= 1
    sends = b.rebalance(300.0)
    assert b.total == 48 and {c for _, c in sends} <= {16}


def test_zero_max_in_flight_pauses():
    b = RdyBudget(0)
    b.add("a", 2500, 0.0)
    assert b.rebalance(0.0) == []
    assert b.total == 0


ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "update", "rebalance", "tick", "zero", "probe", "mif", "msg"]),
        st.integers(0, 7),
        st.integers(0, 3000),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(mif=st.integers(0, 300), ops=ops, seed=st.integers(0, 1000))
def test_invariants_under_random_operations(mif, ops, seed):
    """Whatever happens, the RDY actually sent sums to at most max_in_flight and each
    connection stays within its nsqd's max_rdy_count."""
    b = RdyBudget(mif, rng=random.Random(seed))
    sent: dict = {}
    now = 0.0
    for op, key, n, flag in ops:
        now += 1.7
        if op == "add" and key not in b.conns:
            b.add(key, 1 + n % 200, now)
            sent[key] = 0
            if not flag:
                apply(sent, b.rebalance(now))
        elif op == "remove" and key in b.conns:
            sends = b.remove(key, now, in_backoff=flag)
            sent.pop(key)
            apply(sent, sends)
        elif op == "update" and key in b.conns:
            apply(sent, b.update(key, n, now))
        elif op == "rebalance":
            apply(sent, b.rebalance(now))
        elif op == "tick":
            now += 5.0 * (n % 10)
            apply(sent, b.tick(now, in_backoff=flag))
        elif op == "zero":
            apply(sent, b.all_zero(now))
        elif op == "probe":
            apply(sent, b.probe(now))
        elif op == "mif" and flag:
            apply(sent, b.set_max_in_flight(n % 300, now, in_backoff=False))
        elif op == "msg" and key in b.conns:
            b.conns[key].last_msg = now
        assert sum(sent.values()) == b.total
        for k, c in sent.items():
            assert 0 <= c <= b.conns[k].max_rdy
        if op != "mif":
            assert b.total <= b.max_in_flight
