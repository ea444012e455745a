"""The V2 state machine without sockets: parsed commands in, frames / errors / requests out.

A real NSQD (not started: no listeners) with its data in tmp_path; the bytes go through the real
CommandParser, whose pre-body check is the state machine's, as on a connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct

import orjson
import pytest

from nsqpy.nsqd.v2.client import STATE_CLOSING, STATE_INIT, STATE_SUBSCRIBED, ClientV2
from nsqpy.nsqd.nsqd import NSQD
from nsqpy.nsqd.main import parse_options
from nsqpy.nsqd.v2.protocol_v2 import KNOWN_COMMANDS, STATES, TLS_PENDING, ProtocolV2, Upgrade
from nsqpy.protocol.commands import MPUB_HEAD, CommandParser, encode_command, encode_mpub
from nsqpy.protocol.errors import ClientError, FatalError
from nsqpy.protocol.fin_run import FIN_RUN
from nsqpy.protocol.frames import FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, FrameDecoder
from nsqpy.protocol.message import decode_message

pytestmark = pytest.mark.timeout(30)
I32 = struct.Struct(">i").pack


@pytest.fixture
def make_nsqd(tmp_path):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    made: list[NSQD] = []

    def make(*flags: str) -> NSQD:
        nsqd = NSQD(parse_options([f"--data-path={tmp_path}", *flags]), logging.getLogger("t"))
        made.append(nsqd)
        return nsqd

    yield make
    for nsqd in made:
        for topic in list(nsqd.topics.values()):
            topic.close(flush=False)
    asyncio.set_event_loop(None)
    loop.close()


class Peer:
    """One client's conversation: bytes -> parser -> state machine; what it answered."""

    def __init__(self, nsqd: NSQD) -> None:
        self.client = ClientV2(nsqd.next_client_id(), nsqd.options)
        self.client.set_peer("127.0.0.1", 5555)
        self.protocol = ProtocolV2(nsqd, self.client)
        self.parser = CommandParser(nsqd.limits)
        self.parser.pre_body_check = self.protocol.pre_body
        self.parser.mpub_head = nsqd.auth is not None  # as V2Connection
        self.decoder = FrameDecoder()

    def send(self, data: bytes) -> list:
        """Feed bytes; returns the frames answered, then the error raised if any."""
        results: list = []
        for item in self.parser.feed(data):
            if isinstance(item, FatalError):
                results.append(item)
                break
            try:
                upgrade = self.protocol.receive(*item)
            except (FatalError, ClientError) as err:
                results.append(err)
                if isinstance(err, FatalError):
                    break
                continue
            if upgrade is not None:
                results.append(upgrade)
        frames = self.decoder.feed(b"".join(self.client.out))
        self.client.out.clear()
        return frames + results

    def say(self, *params, body: bytes | None = None) -> list:
        return self.send(encode_command(*params, body=body))


def error_text(results: list) -> str:
    assert results and isinstance(results[-1], (FatalError, ClientError)), results
    return str(results[-1])


# nsqpy's own rows: a parsed run of FINs (handled as FIN where FIN is allowed), MPUB's line
# before its body (its auth check) and the replication link's RSUB (refused as an unknown
# command unless --accept-replicas)
NSQPY_ROWS = {FIN_RUN, MPUB_HEAD, b"RSUB"}


def test_the_table_is_upstreams():
    assert set(STATES[STATE_INIT]) - NSQPY_ROWS == {b"PUB", b"MPUB", b"DPUB", b"NOP", b"IDENTIFY", b"AUTH", b"SUB"}
    assert set(STATES[STATE_SUBSCRIBED]) - NSQPY_ROWS == {b"PUB", b"MPUB", b"DPUB", b"NOP", b"RDY", b"FIN", b"REQ",
                                             b"TOUCH", b"CLS"}
    assert set(STATES[STATE_CLOSING]) == set(STATES[STATE_SUBSCRIBED]) - {b"CLS"}
    assert b"RSUB" in STATES[STATE_INIT] and FIN_RUN in STATES[STATE_SUBSCRIBED]
    assert STATES[STATE_INIT][b"SUB"][1] == STATE_SUBSCRIBED
    assert STATES[STATE_SUBSCRIBED][b"CLS"][1] == STATE_CLOSING
    assert set(TLS_PENDING) == {b"IDENTIFY"}
    assert len(KNOWN_COMMANDS) == 12


@pytest.mark.parametrize("line", [b"RDY 1\n", b"FIN 0123456789abcdef\n", b"REQ 0123456789abcdef 0\n",
                                  b"TOUCH 0123456789abcdef\n", b"CLS\n"])
def test_init_refuses_consumer_commands(make_nsqd, line):
    peer = Peer(make_nsqd())
    name = line.split()[0].decode()
    assert error_text(peer.send(line)) == f"E_INVALID cannot {name} in current state"


def test_unknown_command(make_nsqd):
    assert error_text(Peer(make_nsqd()).send(b"HELLO\n")) == "E_INVALID invalid command HELLO"


def test_sub_then_cls_walks_the_states(make_nsqd):
    peer = Peer(make_nsqd())
    frames = peer.say(b"SUB", "t", "c")
    assert [f.data for f in frames] == [b"OK"] and peer.client.state == STATE_SUBSCRIBED
    assert peer.say(b"RDY", "7") == [] and peer.client.ready_count == 7
    assert [f.data for f in peer.say(b"CLS")] == [b"CLOSE_WAIT"]
    assert peer.client.state == STATE_CLOSING and peer.client.ready_count == 0
    assert peer.say(b"RDY", "5") == [] and peer.client.ready_count == 0  # ignored after CLS
    assert error_text(peer.say(b"CLS")) == "E_INVALID cannot CLS in current state"


def test_a_second_sub_is_refused(make_nsqd):
    peer = Peer(make_nsqd())
    peer.say(b"SUB", "t", "c")
    assert error_text(peer.say(b"SUB", "t", "d")) == "E_INVALID cannot SUB in current state"


def test_state_is_checked_before_the_body_is_read(make_nsqd):
    # upstream refuses IDENTIFY/AUTH after SUB before it reads a body size (here a huge one)
    peer = Peer(make_nsqd())
    peer.say(b"SUB", "t", "c")
    assert error_text(peer.send(b"IDENTIFY\n" + I32(0x7FFFFFFF))) == \
        "E_INVALID cannot IDENTIFY in current state"
    peer = Peer(make_nsqd())
    peer.say(b"SUB", "t", "c")
    assert error_text(peer.send(b"AUTH extra\n")) == "E_INVALID cannot AUTH in current state"


def test_tls_required_allows_only_identify_until_tls(make_nsqd):
    nsqd = make_nsqd("--tls-required=true")
    peer = Peer(nsqd)
    for data in (b"NOP\n", b"FOO\n", b"PUB t\n" + I32(1) + b"x"):
        other = Peer(nsqd)
        name = data.split()[0].decode()
        assert error_text(other.send(data)) == f"E_INVALID cannot {name} in current state (TLS required)"
    results = peer.say(b"IDENTIFY", body=orjson.dumps({"client_id": "me"}))
    assert results[0].data == b"OK" and isinstance(results[1], Upgrade)
    peer.protocol.tls_established()
    assert peer.client.tls and [f.data for f in peer.say(b"PUB", "t", body=b"x")] == [b"OK"]


def test_identify_negotiates_and_asks_for_the_upgrade(make_nsqd):
    peer = Peer(make_nsqd("--max-deflate-level=4"))
    results = peer.say(b"IDENTIFY", body=orjson.dumps(
        {"feature_negotiation": True, "deflate": True, "deflate_level": 9, "heartbeat_interval": 2000,
         "client_id": "c1", "user_agent": "ua"}))
    answer = orjson.loads(results[0].data)
    assert answer["deflate"] is True and answer["deflate_level"] == 4
    upgrade = results[1]
    assert (upgrade.tls, upgrade.snappy, upgrade.deflate_level) == (False, False, 4)
    assert (peer.client.client_id, peer.client.user_agent, peer.client.heartbeat_interval) == \
        ("c1", "ua", 2.0)
    assert peer.client.state == STATE_INIT  # IDENTIFY does not move the state


def test_identify_validation_comes_from_the_record(make_nsqd):
    peer = Peer(make_nsqd())
    results = peer.say(b"IDENTIFY", body=orjson.dumps({"heartbeat_interval": 10}))
    assert error_text(results) == "E_BAD_BODY IDENTIFY heartbeat interval (10) is invalid"


def test_pub_and_fin_flow_through_a_channel(make_nsqd):
    nsqd = make_nsqd()
    consumer, producer = Peer(nsqd), Peer(nsqd)
    consumer.say(b"SUB", "t", "c")
    consumer.say(b"RDY", "2")
    assert [f.data for f in producer.say(b"PUB", "t", body=b"hello")] == [b"OK"]
    assert [f.data for f in producer.send(encode_mpub("t", [b"a", b"b"]))] == [b"OK"]
    assert producer.client.pub_counts == {"t": 3}
    assert consumer.send(b"") == []  # delivery runs after the publish, later in the loop turn
    nsqd.loop.run_until_complete(asyncio.sleep(0))
    frames = consumer.send(b"")
    assert [f.frame_type for f in frames] == [FRAME_TYPE_MESSAGE, FRAME_TYPE_MESSAGE]  # RDY 2
    first = decode_message(frames[0].data)
    assert first.body == b"hello" and len(consumer.client.in_flight) == 2
    assert consumer.say(b"FIN", first.id) == []
    assert consumer.protocol.acked and consumer.client.finish_count == 1
    nsqd.get_topic("t").get_channel("c").dispatch()  # what the connection does after a FIN
    third = consumer.send(b"")
    assert decode_message(third[0].data).body == b"b"
    assert str(consumer.say(b"FIN", first.id)[-1]) == \
        f"E_FIN_FAILED FIN {first.id.decode()} failed ID not in flight"  # non-fatal
    assert consumer.client.state == STATE_SUBSCRIBED


def test_bad_mpub_publishes_nothing(make_nsqd):
    nsqd = make_nsqd()
    peer = Peer(nsqd)
    data = b"MPUB t\n" + I32(100) + I32(3) + I32(1) + b"a" + I32(1) + b"b" + I32(-1)
    assert error_text(peer.send(data)) == "E_BAD_MESSAGE MPUB invalid message(2) body size -1"
    assert nsqd.get_topic("t").message_count == 0  # created before the body, as upstream


def test_auth_without_an_auth_server(make_nsqd):
    peer = Peer(make_nsqd())
    assert error_text(peer.say(b"AUTH", body=b"secret")) == "E_AUTH_DISABLED AUTH disabled"


def test_frames_are_response_frames(make_nsqd):
    frames = Peer(make_nsqd()).say(b"PUB", "t", body=b"x")
    assert frames[0].frame_type == FRAME_TYPE_RESPONSE
