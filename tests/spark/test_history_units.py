"""The history reads' Spark-free parts: options, and records -> Arrow on bytes."""

from __future__ import annotations

import pickle

import pytest

from nsqpy.client.history import EARLIEST, LATEST, RecordSplitter, encode_record
from nsqpy.spark.batch import BatchConfig, HistorySlice, _arrow, is_batch_read
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
    assert SourceConfig.from_options({**base, "startingPosition": "1000"}).starting_position == 10**9
    with pytest.raises(ValueError, match="invalid startingPosition"):
        SourceConfig.from_options({**base, "startingPosition": "beginning"})


def test_records_to_arrow_any_sizes():
    """Bodies of 0..40 bytes (inline and out-of-line in Arrow's view layout), split anywhere."""
    recs = [(b"%016x" % i, bytes([65 + i % 26]) * (i % 41), 1_700_000_000_000_000_000 + 1000 * i) for i in range(300)]
    stream = b"".join(encode_record(i, b, t) for i, b, t in recs)
    part = HistorySlice("http://x", "127.0.0.1:4150", "t", (1,), EARLIEST, 10**19, 300)
    cfg = BatchConfig.from_options({"nsqd_http_addresses": "x:1", "topic": "t"})
    rows = []
    sp = RecordSplitter()
    for at in range(0, len(stream), 997):
        sp.feed(stream[at : at + 997])
        batch = _arrow(sp, part, cfg, arrow_schema())
        if batch is not None:
            rows += batch.to_pylist()
    assert len(rows) == 300
    for row, (i, b, t) in zip(rows, recs):
        assert (row["id"], row["body"], row["attempts"], row["topic"], row["channel"], row["nsqd_address"]) == \
            (i.decode(), b, 1, "t", None, "127.0.0.1:4150")
        assert int(row["timestamp"].timestamp() * 1_000_000) == t // 1000
    assert pickle.loads(pickle.dumps(part)) == part


def test_time_windows_cover_the_range_once():
    from nsqpy.client.history import Segment
    from nsqpy.spark.batch import time_windows

    seg = Segment(3, 1000, 1999, 500, 10)
    wins = time_windows(seg, EARLIEST, 5000, 4)
    assert wins == [(EARLIEST, 1250), (1250, 1500), (1500, 1750), (1750, 5000)]
    assert time_windows(seg, 1600, 1800, 4) == [(1600, 1750), (1750, 1800)]
    assert time_windows(Segment(1, 7, 7, 1, 1), EARLIEST, 8, 3) == [(EARLIEST, 8)]
