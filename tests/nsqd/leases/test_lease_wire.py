"""Consumption leases on the wire, against a real nsqd process (docs/leases.md §3-4).

Readers are raw V2 connections: IDENTIFY names the lease, SUB, RDY n, read, CLS, read up to
CLOSE_WAIT, close. What the lease holds, replays and lets go of is checked on the wire and in
``/stats``.
"""

from __future__ import annotations

import os
import time

import pytest

from helpers.servers import unique_name
from helpers.wire import Wire

from .lease_util import (
    channel_stats, error_frame, get_json, lease_conn, lease_read, post_json, read_n,
    read_until_close_wait, wait_for,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def leased(nsqd_factory):
    return nsqd_factory("--leases")


def publish(node, topic: str, n: int, start: int = 0) -> list[bytes]:
    bodies = [b"m%05d" % i for i in range(start, start + n)]
    w = Wire(node.tcp_address)
    try:
        for i in range(0, n, 100):
            w.mpub(topic, bodies[i:i + 100])
    finally:
        w.close()
    return bodies


def make_channel(node, topic: str, channel: str = "c") -> None:
    assert post_json(node, f"/topic/create?topic={topic}")[0] == 200
    assert post_json(node, f"/channel/create?topic={topic}&channel={channel}")[0] == 200


def test_without_the_flag_the_lease_field_is_ignored_as_upstream_ignores_it(nsqd):
    if "--leases" in os.environ.get("NSQPY_TEST_NSQD_FLAGS", ""):
        pytest.skip("the suite runs with --leases on every nsqd")
    w = Wire(nsqd.tcp_address)
    answer = w.identify(feature_negotiation=True, lease="g/1/0")
    assert "lease" not in answer
    w.close()
    assert post_json(nsqd, "/lease/fin?group=g&upto=1")[0] == 404
    assert get_json(nsqd, "/stats?format=json")  # nothing else changed


def test_probe_and_a_client_that_does_not_ask(leased):
    w = Wire(leased.tcp_address)
    plain = w.identify(feature_negotiation=True)
    assert "lease" not in plain  # upstream's answer, key for key
    w.close()
    w = Wire(leased.tcp_address)
    probe = w.identify(feature_negotiation=True, lease="")["lease"]
    assert probe == {"version": 1, "max_rdy_count": 1000000, "http_port": int(leased.http_address.rsplit(":", 1)[1])}
    w.close()


def test_read_close_replay_same_messages_in_order_and_nothing_new(leased):
    topic = unique_name("lease")
    make_channel(leased, topic)
    bodies = publish(leased, topic, 300)
    lease, first = lease_read(leased, "run1/1/0", topic, "c", 120)
    assert lease["state"] == "new" and lease["held"] == 0
    assert [m.body for m in first] == bodies[:120]
    ch = channel_stats(leased, topic, "c")
    assert (ch["in_flight_count"], ch["depth"], ch["client_count"]) == (120, 180, 0)
    assert (ch["lease_count"], ch["lease_held_count"]) == (1, 120)

    publish(leased, topic, 50, start=300)  # new messages must not reach the replay
    lease, again = lease_read(leased, "run1/1/0", topic, "c", 1000)
    assert lease["state"] == "replay" and lease["held"] == 120
    assert [(m.id, m.body, m.timestamp, m.attempts) for m in again] == \
        [(m.id, m.body, m.timestamp, m.attempts) for m in first]
    assert {m.attempts for m in again} == {1}  # a replay is not a new attempt
    # and a third time, from the replaying connection's table
    lease, third = lease_read(leased, "run1/1/0", topic, "c", 5)
    assert [m.id for m in third] == [m.id for m in first]
    ch = channel_stats(leased, topic, "c")
    assert (ch["in_flight_count"], ch["depth"], ch["timeout_count"]) == (120, 230, 0)

    # another name reads new messages, the next ones in the queue
    _, other = lease_read(leased, "run1/2/0", topic, "c", 10)
    assert [m.body for m in other] == bodies[120:130]


def test_group_fin_up_to_a_sequence_number(leased):
    topic = unique_name("fin")
    make_channel(leased, topic)
    publish(leased, topic, 60)
    for seq in (1, 2, 3):
        for part in (0, 1):
            lease_read(leased, f"q/{seq}/{part}", topic, "c", 10)
    assert channel_stats(leased, topic, "c")["in_flight_count"] == 60
    assert post_json(leased, "/lease/fin?group=q&upto=2") == (200, {"leases": 4, "messages": 40})
    ch = channel_stats(leased, topic, "c")
    assert (ch["in_flight_count"], ch["depth"], ch["lease_count"], ch["lease_held_count"]) == (20, 0, 2, 20)
    assert post_json(leased, "/lease/fin?group=q&upto=2") == (404, {"message": "LEASE_NOT_FOUND"})
    assert post_json(leased, "/lease/fin?group=other&upto=9") == (404, {"message": "LEASE_NOT_FOUND"})
    assert post_json(leased, "/lease/fin?name=q/3/1") == (200, {"leases": 1, "messages": 10})
    names = [doc["name"] for doc in get_json(leased, "/leases?group=q")["leases"]]
    assert names == ["q/3/0"]
    # a finished name is new again
    w, lease = lease_conn(leased, "q/1/0")
    assert (lease["state"], lease["held"]) == ("new", 0)
    w.close()


def test_group_requeue_counts_an_attempt(leased):
    topic = unique_name("req")
    make_channel(leased, topic)
    bodies = publish(leased, topic, 30)
    lease_read(leased, "r/1/0", topic, "c", 30)
    assert post_json(leased, "/lease/requeue?group=r&upto=1") == (200, {"leases": 1, "messages": 30})
    ch = channel_stats(leased, topic, "c")
    assert (ch["depth"], ch["in_flight_count"], ch["requeue_count"]) == (30, 0, 30)
    assert "lease_count" not in ch  # no lease left: the keys go away
    _, again = lease_read(leased, "r/2/0", topic, "c", 30)
    assert sorted(m.body for m in again) == bodies and {m.attempts for m in again} == {2}


def test_timeout_requeues_with_attempts_and_the_lease_is_forgotten_after_it(leased):
    topic = unique_name("to")
    make_channel(leased, topic)
    publish(leased, topic, 20)
    lease, got = lease_read(leased, "t/1/0", topic, "c", 20, msg_timeout=1000)
    assert lease["msg_timeout"] == 1000 and len(got) == 20
    # nobody is subscribed: the scan times them out all the same
    wait_for(lambda: channel_stats(leased, topic, "c")["timeout_count"] == 20, timeout=30,
             what="the lease's messages to time out")
    ch = channel_stats(leased, topic, "c")
    assert (ch["depth"], ch["in_flight_count"]) == (20, 0)
    lease, again = lease_read(leased, "t/1/0", topic, "c", 20)
    assert lease["state"] == "replay" and again == []  # the name still answers, holding nothing
    wait_for(lambda: get_json(leased, "/leases")["leases"] == [], timeout=30, what="the lease forgotten")
    _, fresh = lease_read(leased, "t/2/0", topic, "c", 20)
    assert {m.attempts for m in fresh} == {2}


def test_requeue_on_disconnect_does_not_apply_to_a_lease(nsqd_factory):
    node = nsqd_factory("--leases", "--requeue-on-disconnect")
    topic = unique_name("rod")
    make_channel(node, topic)
    publish(node, topic, 10)
    lease_read(node, "d/1/0", topic, "c", 10)
    time.sleep(0.3)
    ch = channel_stats(node, topic, "c")
    assert (ch["in_flight_count"], ch["depth"]) == (10, 0)
    # an ordinary consumer's messages are still requeued at once
    w = Wire(node.tcp_address)
    w.sub(topic, "c", rdy=5)
    publish(node, topic, 5, start=10)
    read_n(w, 5)
    w.close()
    wait_for(lambda: channel_stats(node, topic, "c")["depth"] == 5, what="the plain consumer's requeue")


def test_fin_and_req_by_id_on_another_connection_of_the_lease(leased):
    topic = unique_name("join")
    make_channel(leased, topic)
    publish(leased, topic, 10)
    a, lease_a = lease_conn(leased, "j/1/0")
    a.sub(topic, "c", rdy=4)
    from_a = read_n(a, 4)
    b, lease_b = lease_conn(leased, "j/1/0")
    assert (lease_a["state"], lease_b["state"], lease_b["held"]) == ("new", "joined", 4)
    b.sub(topic, "c", rdy=3)
    from_b = read_n(b, 3)
    assert {m.id for m in from_a}.isdisjoint(m.id for m in from_b)  # both read new messages
    a.cmd(b"RDY", b"0")
    b.cmd(b"RDY", b"0")
    b.cmd(b"FIN", from_a[0].id)
    b.cmd(b"REQ", from_a[1].id, b"0")
    a.cmd(b"FIN", from_b[0].id)
    # an id of no connection of the lease: upstream's error
    other = Wire(leased.tcp_address)
    other.sub(topic, "c", rdy=1)
    stranger = other.read_message()
    b.cmd(b"FIN", stranger.id)
    assert error_frame(b) == b"E_FIN_FAILED FIN %s failed client does not own message" % stranger.id
    wait_for(lambda: channel_stats(leased, topic, "c")["requeue_count"] == 1, what="the REQ")
    ch = channel_stats(leased, topic, "c")
    assert ch["lease_held_count"] == 4  # 7 read, 2 FINed, 1 REQed
    for w in (a, b, other):
        w.close()


def test_touch_renews_the_whole_lease(leased):
    topic = unique_name("touch")
    make_channel(leased, topic)
    publish(leased, topic, 5)
    w, _ = lease_conn(leased, "k/1/0", msg_timeout=1500)
    w.sub(topic, "c", rdy=5)
    msgs = read_n(w, 5)
    time.sleep(0.9)
    w.cmd(b"TOUCH", msgs[0].id)  # one TOUCH renews all five
    time.sleep(0.9)  # 1.8 s after delivery: without the renewal all would have timed out
    assert channel_stats(leased, topic, "c")["timeout_count"] == 0
    w.cmd(b"TOUCH", b"0" * 16)
    assert error_frame(w) == b"E_TOUCH_FAILED TOUCH 0000000000000000 failed ID not in flight"
    w.close()
    wait_for(lambda: channel_stats(leased, topic, "c")["timeout_count"] == 5, timeout=30, what="timeouts")


def test_replay_takes_a_lease_over_from_a_live_connection(leased):
    topic = unique_name("take")
    make_channel(leased, topic)
    publish(leased, topic, 50)
    zombie, _ = lease_conn(leased, "z/1/0")
    zombie.sub(topic, "c", rdy=20)
    seen = read_n(zombie, 20)
    lease, again = lease_read(leased, "z/1/0", topic, "c", 100, replay=True)
    assert (lease["state"], lease["held"]) == ("replay", 20)
    assert [m.id for m in again] == [m.id for m in seen]
    assert error_frame(zombie) == b'E_LEASE_ENDED lease "z/1/0" was taken over'
    assert zombie.is_closed()
    # the taken-over connection got nothing new, and nothing is lost
    ch = channel_stats(leased, topic, "c")
    assert (ch["in_flight_count"], ch["depth"]) == (20, 30)


def test_replay_of_an_unknown_name_leaves_an_empty_closed_lease(leased):
    topic = unique_name("tomb")
    make_channel(leased, topic)
    publish(leased, topic, 10)
    lease, got = lease_read(leased, "u/1/0", topic, "c", 10, replay=True)
    assert (lease["state"], lease["held"], got) == ("replay", 0, [])
    # a late reader under that name (a lost attempt) reads nothing either
    lease, got = lease_read(leased, "u/1/0", topic, "c", 10)
    assert (lease["state"], got) == ("replay", [])
    assert channel_stats(leased, topic, "c")["depth"] == 10


def test_a_live_connection_of_a_finished_lease_is_closed(leased):
    topic = unique_name("end")
    make_channel(leased, topic)
    publish(leased, topic, 5)
    w, _ = lease_conn(leased, "e/4/0")
    w.sub(topic, "c", rdy=5)
    read_n(w, 5)
    assert post_json(leased, "/lease/fin?group=e&upto=4") == (200, {"leases": 1, "messages": 5})
    assert error_frame(w) == b'E_LEASE_ENDED lease "e/4/0" was finished'
    assert w.is_closed()
    ch = channel_stats(leased, topic, "c")
    assert (ch["in_flight_count"], ch["depth"], ch["client_count"]) == (0, 0, 0)


@pytest.mark.parametrize("fields,error", [
    ({"lease": 7}, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ({"lease": "g/1", "lease_replay": "yes"}, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ({"lease": "g/x/0"}, b'E_BAD_LEASE IDENTIFY lease name "g/x/0" is not valid'),
    ({"lease": "g"}, b'E_BAD_LEASE IDENTIFY lease name "g" is not valid'),
    ({"lease": "g/1/a b"}, b'E_BAD_LEASE IDENTIFY lease name "g/1/a b" is not valid'),
    ({"lease": "g/99999999999999999999"}, b'E_BAD_LEASE IDENTIFY lease name "g/99999999999999999999" is not valid'),
    ({"lease": "g/1", "feature_negotiation": False}, b"E_BAD_LEASE IDENTIFY lease needs feature_negotiation"),
])
def test_bad_identify(leased, fields, error):
    w = Wire(leased.tcp_address)
    body = {"feature_negotiation": True, **fields}
    import orjson

    w.cmd(b"IDENTIFY", body=orjson.dumps(body))
    assert error_frame(w) == error
    assert w.is_closed()


def test_bad_sub_and_rdy_under_a_lease(nsqd_factory):
    node = nsqd_factory("--leases", "--max-lease-rdy-count=100")
    topic = unique_name("bad")
    make_channel(node, topic)
    w, _ = lease_conn(node, "b/1/0")
    w.cmd(b"SUB", topic, "c#ephemeral")
    assert error_frame(w) == b'E_BAD_LEASE SUB lease on ephemeral channel "c#ephemeral"'
    w, _ = lease_conn(node, "b/2/0")
    w.sub(topic, "c")
    w.close()
    w, _ = lease_conn(node, "b/2/0")
    w.cmd(b"SUB", topic, "other")
    assert error_frame(w) == f'E_BAD_LEASE SUB lease "b/2/0" belongs to {topic}:c'.encode()
    w, _ = lease_conn(node, "b/3/0")
    w.cmd(b"IDENTIFY", body=b'{"feature_negotiation": true, "lease": "b/4/0"}')
    assert error_frame(w) == b"E_BAD_LEASE IDENTIFY lease already set"
    w, lease = lease_conn(node, "b/5/0")
    assert lease["max_rdy_count"] == 100
    w.sub(topic, "c", rdy=100)  # above --max-rdy-count (2500 is the default) is fine up to 100
    w.cmd(b"RDY", b"101")
    assert error_frame(w) == b"E_INVALID RDY count 101 out of range 0-100"
    # nothing of this stopped nsqd or lost anything
    assert get_json(node, "/stats?format=json")["health"] == "OK"


@pytest.mark.parametrize("path,status,message", [
    ("/lease/fin", 400, "MISSING_ARG_GROUP"),
    ("/lease/fin?group=a%20b&upto=1", 400, "INVALID_GROUP"),
    ("/lease/fin?group=g", 400, "MISSING_ARG_UPTO"),
    ("/lease/fin?group=g&upto=-1", 400, "INVALID_ARG_UPTO"),
    ("/lease/requeue?group=g&upto=x", 400, "INVALID_ARG_UPTO"),
    ("/lease/touch?name=nope", 400, "INVALID_LEASE"),
    ("/lease/fin?name=g/1&group=g", 400, "INVALID_REQUEST"),
    ("/lease/fin?name=g/1/0", 404, "LEASE_NOT_FOUND"),
    ("/lease/requeue?group=g&upto=5", 404, "LEASE_NOT_FOUND"),
])
def test_http_errors(leased, path, status, message):
    assert post_json(leased, path) == (status, {"message": message})


def test_http_method_not_allowed(leased):
    from .lease_util import http_request

    status, _ = http_request(leased, "GET", "/lease/fin?group=g&upto=1")
    assert status == 405
