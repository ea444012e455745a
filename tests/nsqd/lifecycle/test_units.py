"""Unit tests of the lifecycle controls' cores (issue #13): settings parsing, and the disk-queue
readers behind peek and the byte bound, on a real DiskQueue in a temp directory."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from nsqpy.nsqd.lifecycle import config as ec
from nsqpy.nsqd.lifecycle.bounded import trim, unread_bytes
from nsqpy.nsqd.diskqueue import DiskQueue
from nsqpy.nsqd.lifecycle.peek import disk_records


def test_parse_update_normalizes_and_clears():
    assert ec.parse_update({"msg_ttl": "1m30s", "max_attempts": 3, "dead_letter_topic": None}) == {
        "msg_ttl": 90.0, "max_attempts": 3, "dead_letter_topic": None}
    assert ec.merged({"max_attempts": 3, "msg_ttl": 5.0}, {"msg_ttl": None, "mem_queue_size": 0}) == {
        "max_attempts": 3, "mem_queue_size": 0}
    assert ec.render({**dict.fromkeys(ec.KEYS, 0), "msg_ttl": 0.25})["msg_ttl"] == "250ms"
    for bad in ({"x": 1}, {"max_attempts": 65536}, {"msg_ttl": "1y"}, "[]", None):
        with pytest.raises(ec.ConfigError):
            ec.parse_update(bad)


def test_metadata_round_trip_skips_bad_entries():
    warnings = []
    raw = ec.to_metadata({"msg_ttl": 3600.0, "max_disk_bytes": 10})
    assert raw == {"msg_ttl": "1h0m0s", "max_disk_bytes": 10}
    back = ec.from_metadata({**raw, "max_attempts": -3, "future_key": 1},
                            lambda *a: warnings.append(a))
    assert back == {"msg_ttl": 3600.0, "max_disk_bytes": 10} and len(warnings) == 2
    assert ec.from_metadata("garbage", print) == {}


@pytest.mark.parametrize("template,topic,expected", [
    ("%s.dead", "orders", "orders.dead"),
    ("graveyard", "orders", "graveyard"),
    ("orders", "orders", None),              # itself: would loop
    ("%s.dead", "o#ephemeral", None),         # '#ephemeral' only as a suffix
    ("%s" + "x" * 60, "orders", None),        # over 64 characters
])
def test_dead_letter_name(template, topic, expected):
    assert ec.dead_letter_name(template, topic) == expected


def _queue(path, per_file: int) -> DiskQueue:
    return DiskQueue("q", str(path), per_file, 1, 1 << 20, 2500, 2.0, logging.getLogger("t"))


@pytest.mark.parametrize("per_file", [1 << 20, 100])
def test_disk_records_peek_without_consuming(tmp_path, per_file):
    dq = _queue(tmp_path, per_file)
    records = [b"r%03d" % i * (1 + i % 7) for i in range(40)]
    dq.put_many(records[:20])
    dq.put_many(records[20:])
    assert dq.get_many(5) == records[:5]
    assert list(disk_records(dq, 1000)) == records[5:]
    assert list(disk_records(dq, 3)) == records[5:8]
    assert dq.depth == 35 and dq.get_many(35) == records[5:]
    assert list(disk_records(dq, 10)) == []
    dq.close()


@pytest.mark.parametrize("per_file", [1 << 20, 64])
def test_unread_bytes_and_trim_across_files(tmp_path, per_file):
    dq = _queue(tmp_path, per_file)
    owner = SimpleNamespace(backend=dq, disk_file_sizes={}, max_disk_bytes=0,
                            disk_full_policy="drop-oldest", dropped_count=0)
    records = [b"x" * 20] * 30
    dq.put_many(records)
    assert unread_bytes(owner) == 30 * 24
    dq.get_many(7)
    assert unread_bytes(owner) == 23 * 24
    owner.max_disk_bytes = 10 * 24 + 5
    trim(owner)
    assert dq.depth == 10 and owner.dropped_count == 13 and unread_bytes(owner) == 240
    dq.close()
