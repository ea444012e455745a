"""The replication link's records and framing (protocol/replication.py), on bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol import replication as r

MID = b"0123456789abcdef"
MID2 = b"fedcba9876543210"


def test_every_record_round_trips():
    batch = b"".join([
        r.enc_msg("t", MID, 123, 2, 0, False, b"body"),
        r.enc_msg("t", MID2, -5, 0, 99, True, b""),
        r.enc_msg_owed("t", MID, 1, 3, 7, {"b", "a"}, b"x" * 300),
        r.enc_fin("t", "c", [MID, MID2]),
        r.enc_chan(r.CHAN_ADD, "t", "c"),
        r.enc_chan(r.CHAN_DEL, "t", "c"),
        r.enc_pumped("t", [MID]),
        r.enc_topic_del("t"),
        r.enc_sync({"t": {"a", "b"}, "u": set()}),
        r.enc_attempts("t", MID, 7),
        r.enc_marker(r.RESHIP_BEGIN),
        r.enc_marker(r.RESHIP_END),
        r.enc_topic_del("t", held_only=True),
    ])
    recs = r.decode_records(batch)
    assert recs == [
        r.Msg("t", MID, 123, 2, 0, r.OWED_CHANNELS, b"body"),
        r.Msg("t", MID2, -5, 0, 99, r.OWED_HELD, b""),
        r.Msg("t", MID, 1, 3, 7, frozenset({"a", "b"}), b"x" * 300),
        r.Fin("t", "c", [MID, MID2]),
        r.ChanEvent(r.CHAN_ADD, "t", "c"),
        r.ChanEvent(r.CHAN_DEL, "t", "c"),
        r.Pumped("t", [MID]),
        r.TopicDel("t"),
        r.Sync({"t": frozenset({"a", "b"}), "u": frozenset()}),
        r.Attempts("t", MID, 7),
        r.Marker(r.RESHIP_BEGIN),
        r.Marker(r.RESHIP_END),
        r.TopicDel("t", True),
    ]


def test_every_truncation_is_an_error_never_a_partial_list():
    batch = r.enc_msg("topic", MID, 1, 0, 0, False, b"hello") + r.enc_fin("topic", "ch", [MID])
    for cut in range(1, len(batch)):
        if cut == len(r.enc_msg("topic", MID, 1, 0, 0, False, b"hello")):
            continue  # a whole record: valid on its own
        with pytest.raises(r.ReplicationError):
            r.decode_records(batch[:cut])


@pytest.mark.parametrize("bad", [
    b"\x09",                              # unknown kind
    b"\x06\x00",                          # empty name
    b"\x06\x02\xff\xfe",                  # non-ascii name
    b"\x01\x01t" + MID + b"\x00" * 18 + b"\x05" + b"\x00" * 4,   # bad owed mode
    b"\x02\x01t\x01c\xff\xff\xff\xff",    # id count beyond the bytes
    b"\x07\xff\xff\xff\xff",              # topic count beyond the bytes
])
def test_malformed_records(bad):
    with pytest.raises(r.ReplicationError):
        r.decode_records(bad)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_crashes(data):
    try:
        r.decode_records(data)
    except r.ReplicationError:
        pass


def test_names_are_checked_when_encoding():
    with pytest.raises(ValueError):
        r.enc_topic_del("x" * 256)
    with pytest.raises(ValueError):
        r.enc_topic_del("")


def test_link_parser_splits_batches_at_any_byte_boundary():
    a = r.enc_msg("t", MID, 1, 0, 0, False, b"one")
    b = r.enc_fin("t", "c", [MID])
    stream = r.encode_batch(1, a) + r.encode_batch(2, b, acked=False) + r.encode_batch(3, b"")
    for step in (1, 2, 7, len(stream)):
        p = r.LinkParser()
        out = []
        for i in range(0, len(stream), step):
            out += p.feed(stream[i:i + step])
        assert out == [r.Batch(1, True, a), r.Batch(2, False, b), r.Batch(3, True, b"")]


@pytest.mark.parametrize("bad", [b"PUB 1\n", b"RPUB x\n", b"RPUB 1 2\n", b"R" * 70])
def test_link_parser_rejects_other_commands(bad):
    with pytest.raises(r.ReplicationError):
        r.LinkParser().feed(bad + b"\x00\x00\x00\x00")


def test_link_parser_bounds_the_batch_size():
    with pytest.raises(r.ReplicationError):
        r.LinkParser(max_batch=10).feed(b"RPUB 1\n" + struct.pack(">I", 11))


def test_rsub_and_acks():
    line = r.encode_rsub("host:4150", "00112233aabbccdd", 4151)
    assert line == b"RSUB host:4150 00112233aabbccdd 4151\n"
    assert r.parse_rsub(line.strip().split(b" ")) == ("host:4150", "00112233aabbccdd", 4151)
    for bad in (b"RSUB a", b"RSUB ../x 00112233aabbccdd 1", b"RSUB a/b 00112233aabbccdd 1",
                b"RSUB a zz 1", b"RSUB a 00112233aabbccdd x", b"RSUB a 0011 1"):
        with pytest.raises(r.ReplicationError):
            r.parse_rsub(bad.split(b" "))
    assert r.parse_ack(r.encode_ack(42)) == 42
    assert r.parse_ack(b"OK") is None
    assert r.parse_ack(b"_heartbeat_") is None


@settings(max_examples=100, deadline=None)
@given(topics=st.lists(st.sampled_from(["t", "topic_b", "x" * 64]), min_size=1, max_size=6),
       bodies=st.lists(st.binary(max_size=64), min_size=1, max_size=6),
       held=st.booleans(), due=st.integers(0, 2**62))
def test_batched_msg_encoding_is_the_same_records(topics, bodies, held, due):
    """enc_msgs writes exactly enc_msg's records, and a batch mixing topics (the decoder's
    topic shortcut) decodes back to every message with its own topic."""
    msgs = [(b"%016d" % i, body, 1000 + i, i % 3) for i, body in enumerate(bodies)]
    one_topic = r.enc_msgs(topics[0], msgs, due, held)
    assert one_topic == b"".join(r.enc_msg(topics[0], m[0], m[2], m[3], due, held, m[1]) for m in msgs)
    mixed = b"".join(r.enc_msgs(topics[i % len(topics)], [m], due, held) for i, m in enumerate(msgs))
    decoded = r.decode_records(mixed)
    assert [(d.topic, d.id, d.body, d.timestamp, d.attempts, d.due_ns) for d in decoded] == [
        (topics[i % len(topics)], m[0], m[1], m[2], m[3], due) for i, m in enumerate(msgs)]
    assert all(d.owed == (r.OWED_HELD if held else r.OWED_CHANNELS) for d in decoded)
