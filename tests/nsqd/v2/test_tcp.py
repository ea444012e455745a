"""nsqd's TCP protocol V2 over real sockets against a real nsqd process."""

from __future__ import annotations

import time

import orjson
import pytest

from helpers.servers import unique_name
from helpers.wire import Wire, pack_i32
from nsqpy.protocol.compression import DeflateCodec, SnappyCodec
from nsqpy.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, FrameDecoder
from nsqpy.protocol.message import decode_message

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def addr(shared_nsqd):
    return shared_nsqd.tcp_address


def test_pub_sub_fin(addr):
    topic = unique_name()
    pub = Wire(addr)
    pub.pub(topic, b"one")
    pub.mpub(topic, [b"two", b"three"])
    sub = Wire(addr)
    sub.sub(topic, "ch", rdy=10)
    got = [sub.read_message() for _ in range(3)]
    assert sorted(m.body for m in got) == [b"one", b"three", b"two"]
    assert all(m.attempts == 1 and len(m.id) == 16 for m in got)
    for m in got:
        sub.cmd(b"FIN", m.id)
    sub.cmd(b"NOP")
    assert not sub.is_closed(0.3)


def test_topic_fans_out_to_every_channel_and_consumers_share_one(addr):
    topic = unique_name()
    a1, a2, b = Wire(addr), Wire(addr), Wire(addr)
    for w, ch in ((a1, "a"), (a2, "a"), (b, "b")):
        w.sub(topic, ch, rdy=100)
    pub = Wire(addr)
    pub.mpub(topic, [str(i).encode() for i in range(40)])
    got_b = [b.read_message().body for _ in range(40)]
    assert sorted(got_b) == sorted(str(i).encode() for i in range(40))
    got_a: list[bytes] = []
    for w in (a1, a2):
        w.sock.settimeout(0.5)
        try:
            while True:
                got_a.append(w.read_message().body)
        except OSError:
            pass
    assert sorted(got_a) == sorted(got_b)  # each message to exactly one consumer of "a"


def test_rdy_is_a_ceiling_on_in_flight(addr):
    topic = unique_name()
    pub = Wire(addr)
    pub.mpub(topic, [b"m%d" % i for i in range(5)])
    sub = Wire(addr)
    sub.sub(topic, "ch", rdy=2)
    first = [sub.read_message(), sub.read_message()]
    assert sub.is_closed(0.3) is False and not sub.pending  # nothing beyond RDY
    sub.cmd(b"FIN", first[0].id)
    third = sub.read_message()
    assert third.body not in {m.body for m in first}
    sub.cmd(b"RDY", "0")
    sub.cmd(b"FIN", first[1].id)
    sub.cmd(b"FIN", third.id)
    assert sub.is_closed(0.3) is False and not sub.pending  # RDY 0 stops delivery


def test_req_with_delay_redelivers_with_attempts(addr):
    topic = unique_name()
    Wire(addr).pub(topic, b"again")
    sub = Wire(addr)
    sub.sub(topic, "ch", rdy=1)
    m = sub.read_message()
    t0 = time.monotonic()
    sub.cmd(b"REQ", m.id, "400")
    m2 = sub.read_message()
    assert time.monotonic() - t0 >= 0.35
    assert (m2.id, m2.body, m2.attempts) == (m.id, b"again", 2)
    assert m2.timestamp == m.timestamp
    sub.cmd(b"REQ", m2.id, "0")
    assert sub.read_message().attempts == 3


def test_msg_timeout_requeues_and_touch_extends(addr):
    topic = unique_name()
    Wire(addr).pub(topic, b"slow")
    sub = Wire(addr)
    sub.identify(msg_timeout=1000)
    sub.sub(topic, "ch", rdy=1)
    m = sub.read_message()
    for _ in range(3):  # keep it alive for ~1.5 s with TOUCH
        time.sleep(0.5)
        sub.cmd(b"TOUCH", m.id)
    sub.cmd(b"NOP")
    assert not sub.pending
    t0 = time.monotonic()
    sub.sock.settimeout(60)  # due in about 1 s; a busy machine may be late
    m2 = sub.read_message()  # now it times out and comes back
    assert m2.id == m.id and m2.attempts == 2
    assert time.monotonic() - t0 >= 0.8  # the TOUCHes were honoured: not before its time


def test_dpub_defers_delivery(addr):
    topic = unique_name()
    sub = Wire(addr)
    sub.sub(topic, "ch", rdy=5)
    t0 = time.monotonic()
    pub = Wire(addr)
    pub.cmd(b"DPUB", topic, "500", body=b"later")
    pub.expect_ok()
    pub.pub(topic, b"now")
    assert sub.read_message().body == b"now"
    m = sub.read_message()
    assert m.body == b"later" and time.monotonic() - t0 >= 0.45


def test_cls_then_close_wait(addr):
    topic = unique_name()
    sub = Wire(addr)
    sub.sub(topic, "ch", rdy=1)
    sub.cmd(b"CLS")
    frame = sub.read_frame()
    assert frame.data == b"CLOSE_WAIT"
    Wire(addr).pub(topic, b"x")
    sub.cmd(b"RDY", "5")  # ignored while closing
    assert not sub.is_closed(0.4) and not sub.pending


def test_heartbeats_and_read_timeout(addr):
    w = Wire(addr)
    w.identify(heartbeat_interval=1000)
    frame = w.read_frame(skip_heartbeats=False)
    assert frame.data == b"_heartbeat_"
    # stay silent: nsqd drops a client after two missed heartbeats
    assert w.is_closed(60.0)  # due at 2 x 1 s; far beyond it, a client left open would fail


def test_heartbeat_answered_keeps_connection(addr):
    w = Wire(addr)
    w.identify(heartbeat_interval=1000)
    deadline = time.monotonic() + 60  # three are due within about 3 s
    beats = 0
    while beats < 3 and time.monotonic() < deadline:  # past the 2 s read deadline
        frame = w.read_frame(skip_heartbeats=False)
        if frame.data == b"_heartbeat_":
            beats += 1
            w.cmd(b"NOP")
    assert beats >= 3
    w.pub(unique_name(), b"still alive")


def test_identify_feature_negotiation_response(addr):
    resp = Wire(addr).identify(feature_negotiation=True, msg_timeout=5000, user_agent="test/1")
    assert resp["max_rdy_count"] == 2500 and resp["version"] == "1.3.0"
    assert resp["msg_timeout"] == 5000 and resp["max_msg_timeout"] == 900000
    assert resp["tls_v1"] is False and resp["auth_required"] is False
    assert set(resp) >= {"deflate", "deflate_level", "max_deflate_level", "snappy", "sample_rate",
                         "output_buffer_size", "output_buffer_timeout"}
    assert Wire(addr).identify() == b"OK"


@pytest.mark.parametrize("codec_name", ["snappy", "deflate"])
def test_compressed_stream(addr, codec_name):
    topic = unique_name()
    w = Wire(addr)
    w.cmd(b"IDENTIFY", body=orjson.dumps({"feature_negotiation": True, codec_name: True, "deflate_level": 3}))
    raw = w.recv_exactly(4)
    size = int.from_bytes(raw, "big")
    resp = orjson.loads(w.recv_exactly(size)[4:])  # the JSON answer is sent before compression
    assert resp[codec_name] is True
    codec = SnappyCodec() if codec_name == "snappy" else DeflateCodec(3)
    dec = FrameDecoder()
    pending: list = []

    def read_frame():
        while not pending:
            pending.extend(dec.feed(codec.decompress(w.sock.recv(65536))))
        return pending.pop(0)

    assert read_frame().data == b"OK"
    w.send(codec.compress(b"SUB " + topic.encode() + b" ch\n"))
    assert read_frame().data == b"OK"
    w.send(codec.compress(b"RDY 10\n"))
    Wire(addr).mpub(topic, [b"x" * 500, b"y" * 500])
    bodies = sorted(decode_message(read_frame().data).body for _ in range(2))
    assert bodies == [b"x" * 500, b"y" * 500]


def test_snappy_and_deflate_together_fail(addr):
    w = Wire(addr)
    w.cmd(b"IDENTIFY", body=orjson.dumps({"feature_negotiation": True, "snappy": True, "deflate": True}))
    w.expect_error(b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression")
    assert w.is_closed()


@pytest.mark.parametrize("fields,error", [
    ({"heartbeat_interval": 10}, b"E_BAD_BODY IDENTIFY heartbeat interval (10) is invalid"),
    ({"output_buffer_size": 10}, b"E_BAD_BODY IDENTIFY output buffer size (10) is invalid"),
    ({"output_buffer_timeout": 1}, b"E_BAD_BODY IDENTIFY output buffer timeout (1) is invalid"),
    ({"sample_rate": 100}, b"E_BAD_BODY IDENTIFY sample rate (100) is invalid"),
    ({"msg_timeout": 10}, b"E_BAD_BODY IDENTIFY msg timeout (10) is invalid"),
    ({"heartbeat_interval": "x"}, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
])
def test_identify_validation(addr, fields, error):
    w = Wire(addr)
    w.cmd(b"IDENTIFY", body=orjson.dumps(fields))
    w.expect_error(error)
    assert w.is_closed()


def test_identify_bad_json(addr):
    w = Wire(addr)
    w.cmd(b"IDENTIFY", body=b"{not json")
    w.expect_error(b"E_BAD_BODY IDENTIFY failed to decode JSON body")


def test_bad_magic(addr):
    w = Wire(addr, magic=b"  V1")
    w.expect_error(b"E_BAD_PROTOCOL")
    assert w.is_closed()


@pytest.mark.parametrize("data,error", [
    (b"FOO\n", b"E_INVALID invalid command FOO"),
    (b"PUB t\n" + pack_i32(-1), b"E_BAD_MESSAGE PUB invalid message body size -1"),
    (b"PUB t\n" + pack_i32(0x7FFFFFFF), b"E_BAD_MESSAGE PUB message too big 2147483647 > 1048576"),
    (b"MPUB t\n" + pack_i32(0x7FFFFFFF), b"E_BAD_BODY MPUB body too big 2147483647 > 5242880"),
    (b"PUB bad/topic\n", b'E_BAD_TOPIC PUB topic name "bad/topic" is not valid'),
    (b"SUB t bad/ch\n", b'E_BAD_CHANNEL SUB channel name "bad/ch" is not valid'),
    (b"SUB t\n", b"E_INVALID SUB insufficient number of parameters"),
    (b"RDY 5\n", b"E_INVALID cannot RDY in current state"),
    (b"FIN 0123456789abcdef\n", b"E_INVALID cannot FIN in current state"),
    (b"REQ 0123456789abcdef 0\n", b"E_INVALID cannot REQ in current state"),
    (b"TOUCH 0123456789abcdef\n", b"E_INVALID cannot TOUCH in current state"),
    (b"CLS\n", b"E_INVALID cannot CLS in current state"),
    (b"AUTH\n" + pack_i32(3) + b"abc", b"E_AUTH_DISABLED AUTH disabled"),
])
def test_fatal_errors_close_the_connection(addr, data, error):
    w = Wire(addr)
    w.send(data)
    w.expect_error(error)
    assert w.is_closed()


@pytest.mark.parametrize("data,error", [
    (b"RDY 2501\n", b"E_INVALID RDY count 2501 out of range 0-2500"),
    (b"RDY -1\n", b"E_INVALID RDY could not parse count -1"),
    (b"FIN short\n", b"E_INVALID invalid message ID"),
    (b"FIN\n", b"E_INVALID FIN insufficient number of params"),
    (b"REQ 0123456789abcdef\n", b"E_INVALID REQ insufficient number of params"),
    (b"REQ 0123456789abcdef x\n", b"E_INVALID REQ could not parse timeout x"),
    (b"SUB a b\n", b"E_INVALID cannot SUB in current state"),
])
def test_fatal_errors_when_subscribed(addr, data, error):
    w = Wire(addr)
    w.sub(unique_name(), "ch")
    w.send(data)
    w.expect_error(error)
    assert w.is_closed()


def test_non_fatal_errors_keep_the_connection(addr):
    topic = unique_name()
    w = Wire(addr)
    w.sub(topic, "ch", rdy=1)
    w.cmd(b"FIN", b"0123456789abcdef")
    w.expect_error(b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight")
    w.cmd(b"REQ", b"0123456789abcdef", "0")
    w.expect_error(b"E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight")
    w.cmd(b"TOUCH", b"0123456789abcdef")
    w.expect_error(b"E_TOUCH_FAILED TOUCH 0123456789abcdef failed ID not in flight")
    Wire(addr).pub(topic, b"still works")
    assert w.read_message().body == b"still works"


def test_fin_of_another_consumers_message(addr):
    topic = unique_name()
    a, b = Wire(addr), Wire(addr)
    a.sub(topic, "ch", rdy=1)
    b.sub(topic, "ch", rdy=0)
    Wire(addr).pub(topic, b"mine")
    m = a.read_message()
    b.cmd(b"FIN", m.id)
    b.expect_error(b"E_FIN_FAILED FIN " + m.id + b" failed client does not own message")


def test_bad_client_does_not_disturb_others(addr):
    topic = unique_name()
    good = Wire(addr)
    good.sub(topic, "ch", rdy=100)
    for junk in (b"\xff" * 100, b"PUB t\n" + pack_i32(-7), b"X" * 20000):
        bad = Wire(addr)
        bad.send(junk)
        bad.is_closed(2.0)
    Wire(addr).pub(topic, b"fine")
    assert good.read_message().body == b"fine"


def test_truncated_body_then_disconnect(addr):
    bad = Wire(addr)
    bad.send(b"PUB t\n" + pack_i32(100) + b"only a few bytes")
    bad.close()
    topic = unique_name()
    w = Wire(addr)
    w.pub(topic, b"ok")


def test_max_channel_consumers(nsqd_factory):
    node = nsqd_factory("--max-channel-consumers=1")
    topic = unique_name()
    first = Wire(node.tcp_address)
    first.sub(topic, "ch")
    w = Wire(node.tcp_address)
    w.cmd(b"SUB", topic, "ch")
    w.expect_error(f"E_SUB_FAILED SUB failed consumers for {topic}:ch exceeds limit of 1".encode())


def test_disconnect_leaves_in_flight_to_time_out(addr):
    """Upstream keeps a gone consumer's messages in flight until their timeout."""
    topic = unique_name()
    Wire(addr).pub(topic, b"orphan")
    first = Wire(addr)
    first.identify(msg_timeout=1000)
    first.sub(topic, "ch", rdy=1)
    m = first.read_message()
    t0 = time.monotonic()
    first.close()
    second = Wire(addr)
    second.sub(topic, "ch", rdy=1)
    m2 = second.read_message()
    assert m2.id == m.id and m2.attempts == 2
    assert time.monotonic() - t0 >= 0.7


def test_sample_rate_keeps_delivering_with_low_rdy(addr):
    topic = unique_name()
    w = Wire(addr)
    w.identify(sample_rate=50)
    w.sub(topic, "ch", rdy=1)
    Wire(addr).mpub(topic, [b"%d" % i for i in range(200)])
    got = 0
    w.sock.settimeout(1.0)
    try:
        while True:
            m = w.read_message()
            got += 1
            w.cmd(b"FIN", m.id)
    except OSError:
        pass
    assert 50 < got < 160


def test_sample_rate_drops_part_of_the_stream(addr):
    topic = unique_name()
    w = Wire(addr)
    w.identify(sample_rate=10)
    w.sub(topic, "ch", rdy=2500)
    Wire(addr).mpub(topic, [b"%d" % i for i in range(1000)])
    got = 0
    w.sock.settimeout(0.5)
    try:
        while True:
            frame = w.read_frame()
            if frame.frame_type == FRAME_TYPE_MESSAGE:
                got += 1
    except OSError:
        pass
    assert 20 < got < 300


def test_ephemeral_channel_never_touches_disk(nsqd_factory):
    node = nsqd_factory("--mem-queue-size=2")
    topic = unique_name()
    w = Wire(node.tcp_address)
    w.sub(topic, "ch#ephemeral", rdy=0)
    Wire(node.tcp_address).mpub(topic, [b"1", b"2", b"3", b"4"])
    w.cmd(b"RDY", "10")
    got = [w.read_message().body for _ in range(2)]
    assert got == [b"1", b"2"]  # overflow past the memory queue is dropped, as upstream
    assert not list(node.data_path.glob("*ephemeral*"))


def test_error_frame_type(addr):
    w = Wire(addr)
    w.send(b"BOGUS\n")
    frame = w.read_frame()
    assert frame.frame_type == FRAME_TYPE_ERROR and frame.data.startswith(b"E_INVALID")


def test_response_frame_type(addr):
    w = Wire(addr)
    w.cmd(b"PUB", unique_name(), body=b"x")
    assert w.read_frame().frame_type == FRAME_TYPE_RESPONSE
