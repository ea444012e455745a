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
from nsqpy.protocol.compression import DeflateCodec

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
    w.sock.settimeout(60)
    m = w.read_message()
    assert 1.5 < time.monotonic() - started < 60  # clamped: the asked delay is 3 years
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


# --- issue #10 item 7: the connection's log lines, as upstream writes them ------------------------

def _wait_log(node, text: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        log = node.log()
        if text in log or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


def _addr_of(w: Wire) -> str:
    host, port = w.sock.getsockname()[:2]
    return f"{host}:{port}"


@pytest.fixture(scope="module")
def logged_nsqd(tmp_path_factory):
    from helpers.servers import Nsqd
    node = Nsqd(tmp_path_factory.mktemp("logged"))
    yield node
    node.stop()


def test_magic_is_logged(logged_nsqd):
    w = Wire(logged_nsqd.tcp_address)
    me = _addr_of(w)
    w.send(b"NOP\n")
    log = _wait_log(logged_nsqd, f"CLIENT({me}): desired protocol magic '  V2'")
    assert f"INFO: TCP: new client({me})" in log
    assert f"INFO: CLIENT({me}): desired protocol magic '  V2'" in log
    w.close()
    log = _wait_log(logged_nsqd, f"PROTOCOL(V2): [{me}] exiting ioloop")
    assert f"INFO: PROTOCOL(V2): [{me}] exiting ioloop" in log
    assert f"client({me}) -" not in log  # a clean close between commands is no error


def test_bad_magic_is_logged(logged_nsqd):
    w = Wire(logged_nsqd.tcp_address, magic=b"  V9")
    me = _addr_of(w)
    w.expect_error(b"E_BAD_PROTOCOL")
    log = _wait_log(logged_nsqd, f"client({me}) bad protocol magic")
    assert f"INFO: CLIENT({me}): desired protocol magic '  V9'" in log
    assert f"ERROR: client({me}) bad protocol magic '  V9'" in log


def test_close_before_magic_is_logged(logged_nsqd):
    before = logged_nsqd.log().count("failed to read protocol version - unexpected EOF")
    w = Wire(logged_nsqd.tcp_address, magic=b"  ")
    w.close()
    deadline = time.monotonic() + 30
    while logged_nsqd.log().count("failed to read protocol version - unexpected EOF") == before:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_deflate_client_leaving_is_failed_to_read_command_unexpected_eof(logged_nsqd):
    # upstream reads a DEFLATE stream through compress/flate, which reports the end of a stream
    # that has no final block (clients never send one) as an unexpected EOF
    w = Wire(logged_nsqd.tcp_address)
    me = _addr_of(w)
    w.cmd(b"IDENTIFY", body=json.dumps({"feature_negotiation": True, "deflate": True}).encode())
    w.recv_exactly(int.from_bytes(w.recv_exactly(4), "big"))  # the JSON answer
    codec = DeflateCodec(6)
    assert codec.decompress(w.sock.recv(65536)).endswith(b"OK")  # read all: a close is then a FIN
    w.send(codec.compress(b"NOP\n"))
    time.sleep(0.1)
    w.close()
    log = _wait_log(logged_nsqd, f"client({me}) - failed to read command")
    assert f"ERROR: client({me}) - failed to read command - unexpected EOF" in log


@pytest.mark.parametrize("data,lines", [
    (b"PUB t\n" + pack_i32(100) + b"only a few",
     ["ERROR: [{me}] - E_BAD_MESSAGE PUB failed to read message body - unexpected EOF",
      "ERROR: client({me}) - E_BAD_MESSAGE PUB failed to read message body"]),
    (b"MPUB t\n" + pack_i32(100) + pack_i32(2) + pack_i32(1) + b"a",
     ["ERROR: [{me}] - E_BAD_MESSAGE MPUB failed to read message(1) body size - EOF",
      "ERROR: client({me}) - E_BAD_MESSAGE MPUB failed to read message(1) body size"]),
    (b"IDENTIFY\n\x00", ["ERROR: [{me}] - E_BAD_BODY IDENTIFY failed to read body size - unexpected EOF"]),
])
def test_client_leaving_mid_command_is_logged(logged_nsqd, data, lines):
    w = Wire(logged_nsqd.tcp_address)
    me = _addr_of(w)
    w.send(data)
    time.sleep(0.1)
    w.close()
    log = _wait_log(logged_nsqd, f"PROTOCOL(V2): [{me}] exiting ioloop")
    for line in lines:
        assert line.format(me=me) in log


def test_client_leaving_mid_line_is_no_error(logged_nsqd):
    # upstream's line reader returns what it has with io.EOF, which ends the loop quietly
    w = Wire(logged_nsqd.tcp_address)
    me = _addr_of(w)
    w.send(b"PUB t")
    time.sleep(0.1)
    w.close()
    log = _wait_log(logged_nsqd, f"PROTOCOL(V2): [{me}] exiting ioloop")
    assert f"[{me}] exiting ioloop" in log and f"client({me}) -" not in log


def test_fatal_error_is_logged_twice_like_upstream(logged_nsqd):
    # upstream's command loop logs "[addr] - err", then its TCP handler "client(addr) - err"
    w = Wire(logged_nsqd.tcp_address)
    me = _addr_of(w)
    w.send(b"FOO\n")
    w.expect_error(b"E_INVALID invalid command FOO")
    log = _wait_log(logged_nsqd, f"client({me}) - E_INVALID")
    first = log.index(f"ERROR: [{me}] - E_INVALID invalid command FOO")
    second = log.index(f"INFO: PROTOCOL(V2): [{me}] exiting ioloop")
    assert first < second < log.index(f"ERROR: client({me}) - E_INVALID invalid command FOO")


def test_line_too_long_and_read_timeout_are_logged_like_upstream(logged_nsqd):
    long_line = Wire(logged_nsqd.tcp_address)
    long_me = _addr_of(long_line)
    long_line.send(b"X" * 20000)
    quiet = Wire(logged_nsqd.tcp_address)
    quiet_me = _addr_of(quiet)
    quiet.identify(heartbeat_interval=1000)  # read deadline 2 s; heartbeats left unanswered
    log = _wait_log(logged_nsqd, f"client({quiet_me}) - failed to read command", timeout=8)
    local = logged_nsqd.tcp_address
    assert f"ERROR: client({long_me}) - failed to read command - bufio: buffer full" in log
    assert f"ERROR: client({quiet_me}) - failed to read command - read tcp {local}->{quiet_me}: " \
           "i/o timeout" in log


def test_parse_error_cause_identify_and_upgrade_lines(logged_nsqd):
    w = Wire(logged_nsqd.tcp_address)
    me = _addr_of(w)
    w.send(b"DPUB t -5\n")
    w.expect_error(b"E_INVALID DPUB could not parse timeout -5")
    n = Wire(logged_nsqd.tcp_address)
    neg = _addr_of(n)
    n.cmd(b"IDENTIFY", body=json.dumps({"feature_negotiation": True, "deflate": True,
                                         "client_id": "c", "user_agent": "ua/1"}).encode())
    log = _wait_log(logged_nsqd, f"[{neg}] upgrading connection")
    assert f"ERROR: [{me}] - E_INVALID DPUB could not parse timeout -5 - failed to convert to Base10" in log
    assert f"INFO: [{neg}] IDENTIFY: {{ClientID:c Hostname: HeartbeatInterval:0 OutputBufferSize:0 " \
           "OutputBufferTimeout:0 FeatureNegotiation:true TLSv1:false Deflate:true DeflateLevel:0 " \
           "Snappy:false SampleRate:0 UserAgent:ua/1 MsgTimeout:0}" in log
    assert f"INFO: PROTOCOL(V2): [{neg}] upgrading connection to deflate (level 6)" in log
    w.close()
    log = _wait_log(logged_nsqd, f"PROTOCOL(V2): [{me}] exiting messagePump")
    assert log.index(f"ERROR: client({me}) - E_INVALID DPUB") < \
        log.index(f"INFO: PROTOCOL(V2): [{me}] exiting messagePump")


def test_state_refusal_comes_before_the_body_even_pipelined_after_sub(addr):
    # upstream runs commands one by one: after SUB, IDENTIFY is refused before its size is read
    w = Wire(addr)
    w.send(b"SUB " + unique_name().encode() + b" c\nIDENTIFY\n" + pack_i32(0x7FFFFFFF))
    w.expect_ok()
    w.expect_error(b"E_INVALID cannot IDENTIFY in current state")
    assert w.is_closed()
