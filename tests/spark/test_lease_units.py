"""The executor-side reader's pieces without Spark or sockets: the raw frame stream of a lease
read and the Arrow columns built from it; the offsets' plan."""

from __future__ import annotations

import asyncio
import random

from nsqpy.protocol.frames import CLOSE_WAIT_FRAME, HEARTBEAT_FRAME, encode_error
from nsqpy.protocol.message import encode_message_frame
from nsqpy.spark.arrow import record_batch_from_frames
from nsqpy.spark.lease_read import FrameStream
from nsqpy.spark.nodes import Node
from nsqpy.spark.partitioned import split


def test_frames_fed_in_any_pieces_become_the_same_columns():
    rng = random.Random(7)
    msgs = [(b"%016x" % i, bytes(rng.randrange(256) for _ in range(rng.choice([1, 5, 12, 13, 40, 300]))),
             1_700_000_000_123_456_789 + i * 1000, rng.randrange(1, 70000) & 0xFFFF) for i in range(500)]
    wire = b"".join(encode_message_frame(*m) for m in msgs[:250]) + HEARTBEAT_FRAME \
        + b"".join(encode_message_frame(*m) for m in msgs[250:]) + CLOSE_WAIT_FRAME
    nops = []
    stream = FrameStream(lambda: nops.append(1), asyncio.Event())
    pos = 0
    while pos < len(wire):  # arbitrary chunks, frames split anywhere
        step = rng.randrange(1, 700)
        stream.feed(wire[pos:pos + step])
        pos += step
    assert (stream.count, stream.close_wait, stream.error, len(nops)) == (500, True, None, 1)
    rows = record_batch_from_frames(stream.buf, stream.starts, stream.sizes, "h:4150", "t", "c")
    assert rows.column("id").to_pylist() == [m[0].decode() for m in msgs]
    assert rows.column("body").to_pylist() == [m[1] for m in msgs]
    assert rows.column("attempts").to_pylist() == [m[3] for m in msgs]
    assert [v.value for v in rows.column("timestamp")] == [m[2] // 1000 for m in msgs]
    assert set(rows.column("nsqd_address").to_pylist()) == {"h:4150"}


def test_an_error_frame_ends_the_stream():
    stream = FrameStream(lambda: None, asyncio.Event())
    stream.feed(encode_message_frame(b"0" * 16, b"x", 1, 1) + encode_error(b'E_LEASE_ENDED lease "g/1" was taken over'))
    assert stream.count == 1 and not stream.close_wait
    assert stream.error == 'E_LEASE_ENDED lease "g/1" was taken over'


def test_a_batch_is_split_over_the_nodes_by_depth():
    a, b, c = Node("a:1"), Node("b:1"), Node("c:1")
    assert split(1000, [(a, 100), (b, 0), (c, 300)]) == [(a, 100), (c, 300)]
    out = dict(split(1000, [(a, 3000), (b, 1000), (c, 0)]))
    assert sum(out.values()) == 1000 and out[a] == 750 and out[b] == 250
    assert sum(dict(split(10, [(a, 7), (b, 7), (c, 7)])).values()) == 10
