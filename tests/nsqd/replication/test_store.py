"""The peer's replica store (nsqd/replication/store.py) on real files: index, replay, bounds, torn tails."""

from __future__ import annotations

import os

from nsqpy.nsqd.replication.store import ReplicaStore
from nsqpy.protocol import replication as r


def mid(i: int) -> bytes:
    return b"%016d" % i


def add(store, topic, *channels):
    store.append(b"".join(r.enc_chan(r.CHAN_ADD, topic, c) for c in channels))


def pub(store, topic, ids, held=False, body=b"b" * 10, due=0):
    store.append(b"".join(r.enc_msg(topic, mid(i), 1000 + i, 0, due, held, body) for i in ids))


def fin(store, topic, channel, ids):
    store.append(r.enc_fin(topic, channel, [mid(i) for i in ids]))


def owed(store, i):
    e = store.live.get(mid(i))
    return None if e is None else e[3]


def test_owed_per_channel_and_replay(tmp_path):
    s = ReplicaStore(str(tmp_path))
    add(s, "t", "a", "b")
    pub(s, "t", range(5))
    fin(s, "t", "a", [0, 1])
    fin(s, "t", "b", [1, 2])
    assert owed(s, 0) == {"b"} and owed(s, 1) is None and owed(s, 2) == {"a"}
    assert owed(s, 3) == {"a", "b"}
    s.close()
    s2 = ReplicaStore(str(tmp_path))
    assert set(s2.live) == {mid(0), mid(2), mid(3), mid(4)}
    assert owed(s2, 0) == {"b"} and owed(s2, 2) == {"a"}
    assert s2.stats()["topics"] == [{"name": "t", "messages": 4, "held": 0,
                                     "channels": {"a": 3, "b": 3}}]
    bodies = {m.id: (m.body, m.timestamp) for m, _, _, _ in s2.messages()}
    assert bodies[mid(3)] == (b"b" * 10, 1003)


def test_held_messages_get_the_channels_that_exist_when_pumped(tmp_path):
    s = ReplicaStore(str(tmp_path))
    pub(s, "t", [1, 2], held=True)
    assert owed(s, 1) is None
    add(s, "t", "a")
    s.append(r.enc_pumped("t", [mid(1)]))
    add(s, "t", "b")
    s.append(r.enc_pumped("t", [mid(2)]))
    assert owed(s, 1) == {"a"} and owed(s, 2) == {"a", "b"}
    fin(s, "t", "a", [1])
    assert owed(s, 1) is None


def test_messages_without_durable_channels_are_not_kept(tmp_path):
    s = ReplicaStore(str(tmp_path))
    pub(s, "t", [1])  # flowing but no (durable) channel: nobody owes it
    assert not s.live


def test_channel_deletion_sync_and_topic_deletion_release_messages(tmp_path):
    s = ReplicaStore(str(tmp_path))
    add(s, "t", "a", "b")
    add(s, "u", "a")
    pub(s, "t", [1, 2])
    pub(s, "u", [3])
    s.append(r.enc_chan(r.CHAN_DEL, "t", "b"))
    assert owed(s, 1) == {"a"}
    s.append(r.enc_sync({"t": {"a"}}))  # channel u:a disappeared while the link was down
    assert owed(s, 3) is None and owed(s, 1) == {"a"}
    s.append(r.enc_topic_del("t"))
    assert not s.live
    s.append(r.enc_attempts("t", mid(1), 3))  # about a gone message: ignored


def test_resent_messages_are_not_duplicated(tmp_path):
    s = ReplicaStore(str(tmp_path))
    add(s, "t", "a")
    pub(s, "t", [1])
    pub(s, "t", [1])
    assert s.stats()["messages"] == 1
    s.append(r.enc_attempts("t", mid(1), 4))
    assert next(s.messages())[2] == 4


def test_torn_tail_is_truncated_and_the_log_goes_on(tmp_path):
    s = ReplicaStore(str(tmp_path))
    add(s, "t", "a")
    pub(s, "t", [1, 2])
    s.close()
    seg = os.path.join(tmp_path, "00000000.log")
    good = os.path.getsize(seg)
    with open(seg, "ab") as f:  # a crash in the middle of the next write
        f.write(b"\x00\x00\x01\x00\x12\x34")
    s2 = ReplicaStore(str(tmp_path))
    assert os.path.getsize(seg) == good
    assert set(s2.live) == {mid(1), mid(2)}
    pub(s2, "t", [3])
    fin(s2, "t", "a", [1])
    s2.close()
    s3 = ReplicaStore(str(tmp_path))
    assert set(s3.live) == {mid(2), mid(3)}
    s3.close()
    # a corrupted byte inside the last entry (CRC mismatch) also ends the log there
    data = bytearray(open(seg, "rb").read())
    data[-3] ^= 0xFF
    open(seg, "wb").write(data)
    s4 = ReplicaStore(str(tmp_path))
    assert set(s4.live) == {mid(1), mid(2), mid(3)}  # the FIN of 1 was the torn entry


def test_finished_segments_are_deleted(tmp_path):
    s = ReplicaStore(str(tmp_path), segment_bytes=2000)
    add(s, "t", "a")
    for k in range(50):
        pub(s, "t", range(k * 10, k * 10 + 10))
        fin(s, "t", "a", range(k * 10, k * 10 + 10))
    assert not s.live
    assert len(s.segments) == 1
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".log")]) == 1


def test_a_stalled_message_is_compacted_forward_and_disk_stays_bounded(tmp_path):
    s = ReplicaStore(str(tmp_path), segment_bytes=4000)
    add(s, "t", "a", "b")
    pub(s, "t", [0], body=b"stalled")
    fin(s, "t", "a", [0])  # b never finishes it
    for k in range(1, 200):
        pub(s, "t", range(k * 10, k * 10 + 10), body=b"x" * 50)
        fin(s, "t", "a", range(k * 10, k * 10 + 10))
        fin(s, "t", "b", range(k * 10, k * 10 + 10))
    assert set(s.live) == {mid(0)}
    assert s.disk_bytes < 3 * 4000
    assert len(s.segments) <= 2
    s.close()
    s2 = ReplicaStore(str(tmp_path), segment_bytes=4000)
    assert set(s2.live) == {mid(0)} and owed(s2, 0) == {"b"}
    [(m, o, _, _)] = list(s2.messages())
    assert m.body == b"stalled" and o == {"b"}
    fin(s2, "t", "b", [0])
    assert not s2.live


def test_channel_state_survives_head_segment_deletion(tmp_path):
    s = ReplicaStore(str(tmp_path), segment_bytes=500)
    add(s, "t", "a", "b")  # only in the first segment
    for k in range(20):
        pub(s, "t", [k])
        fin(s, "t", "a", [k])
        fin(s, "t", "b", [k])
    assert s.segments[0] > 0
    s.close()
    s2 = ReplicaStore(str(tmp_path), segment_bytes=500)
    pub(s2, "t", [100])
    assert owed(s2, 100) == {"a", "b"}


def test_malformed_batch_is_refused_before_writing(tmp_path):
    s = ReplicaStore(str(tmp_path))
    size = s.disk_bytes
    try:
        s.append(b"\x09junk")
    except r.ReplicationError:
        pass
    else:
        raise AssertionError("accepted")
    assert s.disk_bytes == size


def test_topic_empty_drops_only_held_messages(tmp_path):
    s = ReplicaStore(str(tmp_path))
    add(s, "t", "a")
    pub(s, "t", [1])
    pub(s, "t", [2], held=True)
    s.append(r.enc_topic_del("t", held_only=True))
    assert set(s.live) == {mid(1)}


def test_what_a_complete_reship_leaves_out_is_handed_over_as_orphans(tmp_path):
    s = ReplicaStore(str(tmp_path))
    add(s, "t", "a", "b")
    pub(s, "t", [1, 2, 3], body=b"lost?")
    fin(s, "t", "a", [2])
    # the origin restarted: it re-ships only 1 (it lost 2 and 3 with its memory)
    s.append(r.enc_marker(r.RESHIP_BEGIN)
             + r.enc_msg_owed("t", mid(1), 1, 0, 0, {"a", "b"}, b"lost?")
             + r.enc_msg("t", mid(9), 1, 0, 0, False, b"new")
             + r.enc_marker(r.RESHIP_END))
    got = {m.id: (o, m.body) for m, o, _, _ in s.orphans}
    assert got == {mid(2): ({"b"}, b"lost?"), mid(3): ({"a", "b"}, b"lost?")}
    assert set(s.live) == {mid(1), mid(9)}
    s.close()
    s2 = ReplicaStore(str(tmp_path))  # replay: the same outcome, nothing handed over twice
    assert set(s2.live) == {mid(1), mid(9)} and s2.orphans == []
    s2.append(r.enc_marker(r.RESHIP_END))  # an END without a BEGIN: nothing
    assert set(s2.live) == {mid(1), mid(9)}


def test_a_resent_batch_and_its_reship_in_one_entry_are_one_message(tmp_path):
    """After a relink the origin resends its unacked batches and re-ships all it holds in the
    same batch, so one log entry holds an unacked id twice: it is still one message when
    adopted, after a replay and after its segment is compacted forward."""
    s = ReplicaStore(str(tmp_path), segment_bytes=3000)
    add(s, "t", "a")
    s.append(r.enc_msg("t", mid(1), 1001, 1, 0, False, b"unacked")  # the resent batch
             + r.enc_sync({"t": {"a"}}) + r.enc_marker(r.RESHIP_BEGIN)
             + r.enc_msg_owed("t", mid(1), 1001, 1, 0, {"a"}, b"unacked")
             + r.enc_marker(r.RESHIP_END))
    assert [m.id for m, _, _, _ in s.messages()] == [mid(1)] and s.orphans == []
    s.close()
    s = ReplicaStore(str(tmp_path), segment_bytes=3000)
    assert [(m.id, o) for m, o, _, _ in s.messages()] == [(mid(1), {"a"})]
    for k in range(1, 40):  # mid(1) alone keeps the head segment: copied to the tail
        pub(s, "t", range(k * 10, k * 10 + 10), body=b"x" * 50)
        fin(s, "t", "a", range(k * 10, k * 10 + 10))
    assert s.live[mid(1)][1] > 0, "not compacted"
    assert [(m.id, m.body) for m, _, _, _ in s.messages()] == [(mid(1), b"unacked")]
    assert s.stats()["messages"] == 1 and s.live_bytes == len(b"unacked")
