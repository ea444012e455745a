"""The history reads' Spark-free parts: options, and records -> Arrow on bytes."""

from __future__ import annotations

import pickle

import pytest

from nsqpy.client.history import EARLIEST, LATEST, BlockSplitter, Segment
from nsqpy.protocol.history_block import FramingError, encode_block
from nsqpy.spark.batch import BatchConfig, HistorySlice, _arrow, is_batch_read, partition_segments
from nsqpy.spark.arrow import arrow_schema
from nsqpy.spark.source import SourceConfig

pytestmark = pytest.mark.timeout(60)


def test_batch_options():
    cfg = BatchConfig.from_options({"nsqd_http_addresses": "127.0.0.1:4151", "topic": "t"})
    assert (cfg.start, cfg.end, cfg.nsqd_http, cfg.channel) == (EARLIEST, LATEST, ["http://127.0.0.1:4151"], None)
    cfg = BatchConfig.from_options({"lookupdHttpAddresses": "h:4161", "topic": "t", "from": "1700000000000",
                                    "to": "2026-11-28T03:00:00Z", "segmentsPerPartition": "4"})
    assert (cfg.start, cfg.end, cfg.segments_per_partition) == (1_700_000_000_000_000_000, 1_795_834_800 * 10**9, 4)
    with pytest.raises(ValueError, match="needs lookupd_http_addresses or nsqd_http_addresses"):
        BatchConfig.from_options({"nsqd_tcp_addresses": "h:4150", "topic": "t"})
    with pytest.raises(ValueError, match="invalid to 'soon'"):
        BatchConfig.from_options({"nsqd_http_addresses": "h:4151", "topic": "t", "to": "soon"})
    with pytest.raises(ValueError, match="'from' cannot be latest"):
        BatchConfig.from_options({"nsqd_http_addresses": "h:4151", "topic": "t", "from": "latest"})
    assert is_batch_read({"topic": "t", "from": "earliest", "channel": "c"})
    assert is_batch_read({"topic": "t"}) and not is_batch_read({"topic": "t", "channel": "c"})


def test_starting_position_option():
    base = {"nsqd_tcp_addresses": "h:4150", "topic": "t", "channel": "c"}
    assert SourceConfig.from_options(base).starting_position == LATEST
    assert SourceConfig.from_options({**base, "startingPosition": "EARLIEST"}).starting_position == EARLIEST
    assert SourceConfig.from_options({**base, "startingPosition": "1795927286000"}).starting_position == \
        1795927286000 * 10**6
    with pytest.raises(ValueError, match="invalid startingPosition"):
        SourceConfig.from_options({**base, "startingPosition": "beginning"})
    with pytest.raises(ValueError, match="invalid startingPosition 1795927286: .* not seconds"):
        SourceConfig.from_options({**base, "startingPosition": "1795927286"})  # (issue #43)


@pytest.mark.parametrize("largest", [3, 60])  # small blocks: numpy per record; large: joins
def test_blocks_to_arrow_any_sizes(largest):
    """Blocks of 1..3 or 1..60 records, bodies of 0..40 bytes, the stream split anywhere."""
    recs = [(b"%016x" % i, bytes([65 + i % 26]) * (i % 41), 1_700_000_000_000_000_000 + 1000 * i) for i in range(300)]
    blocks, at = [], 0
    while at < len(recs):
        group = recs[at:at + 1 + at % largest]
        blocks.append(encode_block([r[0] for r in group], [r[1] for r in group], [r[2] for r in group]))
        at += len(group)
    stream = b"".join(blocks)
    part = HistorySlice("http://x", "127.0.0.1:4150", "t", (1,), EARLIEST, 10**19, 300)
    cfg = BatchConfig.from_options({"nsqd_http_addresses": "x:1", "topic": "t"})
    rows = []
    sp = BlockSplitter()
    for at in range(0, len(stream), 997):
        sp.feed(stream[at : at + 997])
        batch = _arrow(sp, part, cfg, arrow_schema())
        if batch is not None:
            rows += batch.to_pylist()
    sp.close()
    assert len(rows) == 300
    for row, (i, b, t) in zip(rows, recs):
        assert (row["id"], row["body"], row["attempts"], row["topic"], row["channel"], row["nsqd_address"]) == \
            (i.decode(), b, 1, "t", None, "127.0.0.1:4150")
        assert int(row["timestamp"].timestamp() * 1_000_000) == t // 1000
    assert pickle.loads(pickle.dumps(part)) == part


def test_short_bodies_at_the_very_end_of_a_batch():
    """Bodies inline in Arrow's view layout (<= 12 bytes), the last ones in the buffer's last
    bytes, single-record blocks (numpy per record) and one block of them all (joins)."""
    bodies = [b"", b"a", b"bc", b"0123456789abcdef", b"", b"xyz"]
    ids = [b"%016d" % i for i in range(len(bodies))]
    singles = b"".join(encode_block([i], [b], [7]) for i, b in zip(ids, bodies))
    together = encode_block(ids * 2, bodies * 2, [7] * 12)
    part = HistorySlice("http://x", "127.0.0.1:4150", "t", (1,), EARLIEST, 10**19, 6)
    cfg = BatchConfig.from_options({"nsqd_http_addresses": "x:1", "topic": "t"})
    for stream, want in ((singles, bodies), (together, bodies * 2)):
        sp = BlockSplitter()
        sp.feed(stream)
        rows = _arrow(sp, part, cfg, arrow_schema()).to_pylist()
        assert [r["body"] for r in rows] == want


@pytest.mark.parametrize("n", [2, 20])
def test_blocks_whose_sizes_do_not_fill_them_are_refused(n):
    good = encode_block([b"%016d" % i for i in range(n)], [b"ab"] * n, list(range(n)))
    block = bytearray(good)
    block[16 + 8 * n + 3] = 3  # the first size says 3 bytes: the sizes add up to 2n + 1
    sp = BlockSplitter()
    sp.feed(good + bytes(block))
    part = HistorySlice("http://x", "127.0.0.1:4150", "t", (1,), EARLIEST, 10**19, 2)
    cfg = BatchConfig.from_options({"nsqd_http_addresses": "x:1", "topic": "t"})
    with pytest.raises(FramingError, match=f"block at offset {len(good)}: its body sizes add up to "
                                           f"{2 * n + 1} bytes, its bodies take {2 * n}"):
        _arrow(sp, part, cfg, arrow_schema())


def _plan(segs, parallelism=2, **options):
    cfg = BatchConfig.from_options({"nsqd_http_addresses": "x:1", "topic": "t", **options})
    return partition_segments(segs, cfg, parallelism)


def test_partitions_by_bytes_every_core_works():
    mib = 1 << 20
    one = [Segment(7, 1, 2, 300_000, 64 * mib)]
    # one large segment: a byte window per core (the last one open), each block in exactly one
    assert _plan(one) == [((7,), (0, 32 * mib), 150_000), ((7,), (32 * mib, None), 150_000)]
    assert len(_plan(one, parallelism=8)) == 8
    # small segments go together, a large one is cut; the partitions stay in log order
    segs = [Segment(1, 0, 0, 10, mib // 4), Segment(2, 0, 0, 10, mib // 4), Segment(3, 0, 0, 500, 10 * mib),
            Segment(4, 0, 0, 10, mib // 2)]
    assert _plan(segs, partitionBytes=str(4 * mib)) == [
        ((1, 2), None, 20), ((3,), (0, 10 * mib // 3), 166), ((3,), (10 * mib // 3, 20 * mib // 3), 166),
        ((3,), (20 * mib // 3, None), 166), ((4,), None, 10)]
    # asked for: whole segments grouped, or each segment in windows
    assert _plan(segs, segmentsPerPartition="3") == [((1, 2, 3), None, 520), ((4,), None, 10)]
    assert [p[1] for p in _plan(one, partitionsPerSegment="3")] == [
        (0, 64 * mib // 3), (64 * mib // 3, 2 * 64 * mib // 3), (2 * 64 * mib // 3, None)]
    # a small topic: one partition (at least 1 MiB each by default)
    assert _plan([Segment(1, 0, 0, 5, 5000)], parallelism=4) == [((1,), None, 5)]
