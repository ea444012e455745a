"""Upstream v1.3.0's exact answers on the TCP protocol's edges (issue #10 items 1, 2 and 7), each
over a real socket to a real nsqd process.

The MPUB tests send a bad header and then *wait* with the rest of the declared body unsent:
upstream answers as soon as the bad field is readable, so must we.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from helpers.servers import unique_name
from helpers.wire import Wire, pack_i32

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def addr(shared_nsqd):
    return shared_nsqd.tcp_address


def _topic_depth(nsqd, topic: str) -> int | None:
    """The topic's message count from /stats, None if it does not exist."""
    with urllib.request.urlopen(f"http://{nsqd.http_address}/stats?format=json&topic={topic}") as r:
        stats = json.load(r)
    for t in stats.get("topics") or []:
        if t["topic_name"] == topic:
            return t["message_count"]
    return None


# --- issue #10 item 1: MPUB is validated as it streams ------------------------------------------

@pytest.mark.parametrize("header,error", [
    (pack_i32(1000) + pack_i32(0), b"E_BAD_BODY MPUB invalid message count 0"),
    (pack_i32(1000) + pack_i32(-4), b"E_BAD_BODY MPUB invalid message count -4"),
    (pack_i32(1000) + pack_i32(1048576), b"E_BAD_BODY MPUB invalid message count 1048576"),
    (pack_i32(1000) + pack_i32(3) + pack_i32(0), b"E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
    (pack_i32(1000) + pack_i32(3) + pack_i32(2) + b"ok" + pack_i32(-1),
     b"E_BAD_MESSAGE MPUB invalid message(1) body size -1"),
    (pack_i32(1000) + pack_i32(3) + pack_i32(2000000),
     b"E_BAD_MESSAGE MPUB message too big 2000000 > 1048576"),
])
def test_bad_mpub_header_is_answered_before_the_rest_of_the_body(shared_nsqd, header, error):
    topic = unique_name()
    w = Wire(shared_nsqd.tcp_address)
    w.send(b"MPUB " + topic.encode() + b"\n" + header)  # and nothing more: the client waits
    w.expect_error(error)
    assert w.is_closed()
    # upstream creates the topic before reading the body; nothing of the bad batch is published
    assert _topic_depth(shared_nsqd, topic) == 0


def test_bad_mpub_message_after_good_ones_publishes_nothing(shared_nsqd):
    topic = unique_name()
    sub = Wire(shared_nsqd.tcp_address)
    sub.sub(topic, "ch", rdy=10)
    w = Wire(shared_nsqd.tcp_address)
    w.send(b"MPUB " + topic.encode() + b"\n" + pack_i32(1000) + pack_i32(3)
           + pack_i32(3) + b"one" + pack_i32(3) + b"two" + pack_i32(0))
    w.expect_error(b"E_BAD_MESSAGE MPUB invalid message(2) body size 0")
    assert w.is_closed()
    assert sub.is_closed(0.5) is False and not sub.pending  # no message reached the consumer
    assert _topic_depth(shared_nsqd, topic) == 0


def test_mpub_read_from_the_stream_like_upstream(addr):
    # a declared size of 4 with a count of 3: upstream takes the next bytes as a message size
    w = Wire(addr)
    w.send(b"MPUB " + unique_name().encode() + b"\n" + pack_i32(4) + pack_i32(3) + b"PUB t\n")
    w.expect_error(b"E_BAD_MESSAGE MPUB message too big 1347764768 > 1048576")
    assert w.is_closed()


def test_good_mpub_sent_in_pieces(addr):
    topic = unique_name()
    w = Wire(addr)
    w.send(b"MPUB " + topic.encode() + b"\n" + pack_i32(4 + 2 * 7) + pack_i32(2))
    time.sleep(0.05)
    w.send(pack_i32(3) + b"one")
    time.sleep(0.05)
    w.send(pack_i32(3) + b"two")
    w.expect_ok()
    sub = Wire(addr)
    sub.sub(topic, "ch", rdy=2)
    assert sorted([sub.read_message().body, sub.read_message().body]) == [b"one", b"two"]


# --- issue #10 item 2: numeric arguments parsed as upstream's ByteToBase10 ----------------------
# digits only (a sign is not a digit), the empty string is 0, values past 64 bits wrap around

@pytest.mark.parametrize("arg,error", [
    (b"-5", b"E_INVALID DPUB could not parse timeout -5"),
    (b"+5", b"E_INVALID DPUB could not parse timeout +5"),
    (b"1.5", b"E_INVALID DPUB could not parse timeout 1.5"),
    (b"0x10", b"E_INVALID DPUB could not parse timeout 0x10"),
    (b"\xff", b"E_INVALID DPUB could not parse timeout \xff"),
    (b"3600001", b"E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
    # uint64 max: time.Duration(ms) * time.Millisecond is negative
    (b"18446744073709551615", b"E_INVALID DPUB timeout 18446744073709551615 out of range 0-3600000"),
    (b"99999999999999999999999", b"E_INVALID DPUB timeout 200376420520689663 out of range 0-3600000"),
])
def test_dpub_timeout_errors(addr, arg, error):
    w = Wire(addr)
    w.send(b"DPUB t " + arg + b"\n")  # answered before any body is sent
    w.expect_error(error)
    assert w.is_closed()


@pytest.mark.parametrize("arg", [b"", b"18446744073709551616"])  # empty = 0; 2**64 wraps to 0
def test_dpub_timeouts_upstream_reads_as_zero(addr, arg):
    topic = unique_name()
    sub = Wire(addr)
    sub.sub(topic, "ch", rdy=1)
    w = Wire(addr)
    w.send(b"DPUB " + topic.encode() + b" " + arg + b"\n" + pack_i32(3) + b"now")
    w.expect_ok()
    assert sub.read_message().body == b"now"


@pytest.mark.parametrize("arg,error", [
    (b"-1", b"E_INVALID RDY could not parse count -1"),
    (b"+1", b"E_INVALID RDY could not parse count +1"),
    (b"1e3", b"E_INVALID RDY could not parse count 1e3"),
    (b"2501", b"E_INVALID RDY count 2501 out of range 0-2500"),
    (b"18446744073709551615", b"E_INVALID RDY count -1 out of range 0-2500"),  # int64(uint64)
    (b"9223372036854775808", b"E_INVALID RDY count -9223372036854775808 out of range 0-2500"),
])
def test_rdy_count_errors(addr, arg, error):
    w = Wire(addr)
    w.sub(unique_name(), "ch")
    w.send(b"RDY " + arg + b"\n")
    w.expect_error(error)
    assert w.is_closed()


def test_rdy_empty_count_is_zero(addr):
    topic = unique_name()
    Wire(addr).pub(topic, b"held")
    w = Wire(addr)
    w.sub(topic, "ch", rdy=0)
    w.send(b"RDY \n")  # upstream: 0, no error
    assert not w.is_closed(0.3) and not w.pending
    w.send(b"RDY 18446744073709551617\n")  # wraps to 1
    assert w.read_message().body == b"held"


@pytest.mark.parametrize("arg,error", [
    (b"-5", b"E_INVALID REQ could not parse timeout -5"),
    (b"5s", b"E_INVALID REQ could not parse timeout 5s"),
])
def test_req_timeout_parse_errors(addr, arg, error):
    w = Wire(addr)
    w.sub(unique_name(), "ch")
    w.send(b"REQ 0123456789abcdef " + arg + b"\n")
    w.expect_error(error)
    assert w.is_closed()


def test_req_timeouts_upstream_accepts(nsqd_factory):
    node = nsqd_factory("--max-req-timeout=2s")
    topic = unique_name()
    Wire(node.tcp_address).pub(topic, b"m")
    w = Wire(node.tcp_address)
    w.sub(topic, "ch", rdy=1)
    m = w.read_message()
    w.send(b"REQ " + m.id + b" \n")  # empty timeout = 0: back at once
    m = w.read_message()
    assert m.attempts == 2
    w.send(b"REQ " + m.id + b" 18446744073709551615\n")  # negative once wrapped: clamped to 0
    m = w.read_message()
    assert m.attempts == 3
    started = time.monotonic()
    w.send(b"REQ " + m.id + b" 99999999999\n")  # past --max-req-timeout: clamped to it
    m = w.read_message()
    assert 1.5 < time.monotonic() - started < 5
    log = node.log()
    assert "REQ timeout -1000000 out of range 0-2000000000. Setting to 0" in log
    assert "REQ timeout 99999999999000000 out of range 0-2000000000. Setting to 2000000000" in log


@pytest.mark.parametrize("fields", [
    {"sample_rate": 1 << 31},            # an int32 upstream
    {"heartbeat_interval": 1 << 63},     # past Go's int
    {"msg_timeout": 1e3},                # not an integer literal
])
def test_identify_numbers_that_do_not_fit_go_types(addr, fields):
    w = Wire(addr)
    w.cmd(b"IDENTIFY", body=json.dumps(fields).encode())
    w.expect_error(b"E_BAD_BODY IDENTIFY failed to decode JSON body")
    assert w.is_closed()
