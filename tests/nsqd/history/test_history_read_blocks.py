"""``/history/read`` sends the log's blocks (docs/history.md §6): whole blocks inside the range
exactly as they lie in the segment files, only blocks with records outside it cut; byte windows
that tile a segment give every block once."""

from __future__ import annotations

import time
import zlib
from pathlib import Path

import orjson
import pytest

from helpers.servers import unique_name
from helpers.wire import Wire
from nsqpy.protocol.history_block import FRAME, BlockSplitter, FramingError, decode_block, encode_block

from .history_util import call, error, read_blocks, read_records, segments

pytestmark = pytest.mark.timeout(90)


def _blocks_of(data: bytes) -> list[bytes]:
    """The blocks of a stream (or a segment file), each as its bytes."""
    splitter = BlockSplitter()
    splitter.feed(data)
    buf, starts, _, stop = splitter.take()
    splitter.close()
    return [bytes(buf[a:b]) for a, b in zip(starts, starts[1:] + [stop])]


def _segment_files(node, topic: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted((node.data_path / f"{topic}.history").glob("*.seg"))]


def test_a_whole_read_is_the_segment_files_as_they_are(nsqd_factory):
    node = nsqd_factory("--retention=1h", "--retention-bytes=200000")  # segments of 25 KB
    topic = unique_name()
    w = Wire(node.tcp_address)
    for i in range(40):
        w.mpub(topic, [b"%03d-%d" % (i, j) + b"x" * (j * 37 % 300) for j in range(20)])
        w.pub(topic, b"single %d" % i)
    assert len(segments(node, topic)["segments"]) > 3
    files = _segment_files(node, topic)
    assert read_blocks(node, topic) == b"".join(files)
    for seg in segments(node, topic)["segments"]:  # one segment: that file
        assert read_blocks(node, topic, f"&segment={seg['segment']}") == files[seg["segment"] - 1]


def _write_log(data_path: Path, topic: str, blocks: list[list[tuple[bytes, bytes, int]]]) -> bytes:
    """A segment file of these blocks, as nsqd's log writes them (a topic nsqd.dat does not
    list yet: --retention brings it back at start-up)."""
    seg = b"".join(encode_block([r[0] for r in b], [r[1] for r in b], [r[2] for r in b]) for b in blocks)
    folder = data_path / f"{topic}.history"
    folder.mkdir(parents=True)
    (folder / f"{1:020d}.seg").write_bytes(seg)
    return seg


def test_blocks_partly_inside_the_range_are_cut_the_others_sent_as_stored(nsqd_factory, tmp_path):
    topic = unique_name()
    t0 = (time.time_ns() // 10**6 - 60_000) * 10**6  # a minute ago, whole milliseconds
    ms = 10**6
    blocks, k = [], 0
    for b in range(30):  # blocks of 1..5 records, a millisecond apart; block 12 goes back in time
        block = []
        for _ in range(1 + b % 5):
            block.append((b"%016x" % k, b"body %d" % k, t0 + k * ms))
            k += 1
        blocks.append(block)
    blocks[12] = [(b"%016x" % (900 + j), b"late %d" % j, t0 + s * ms) for j, s in enumerate((70, 3, 71, 40))]
    stored = _write_log(tmp_path / "n", topic, blocks)
    node = nsqd_factory("--retention=1h", data_path=tmp_path / "n")
    everything = [r for b in blocks for r in b]
    assert read_records(node, topic) == everything
    assert read_blocks(node, topic) == stored  # every block inside: the file as it is
    for lo, hi in ((5, 60), (0, 41), (3, 4), (41, 1000), (70, 71)):
        query = f"&from={(t0 + lo * ms) // ms}&to={(t0 + hi * ms) // ms}"
        got = read_records(node, topic, query)
        assert got == [r for r in everything if t0 + lo * ms <= r[2] < t0 + hi * ms], (lo, hi)
        stored_blocks = set(_blocks_of(stored))
        for block in _blocks_of(read_blocks(node, topic, query)):
            length, crc = FRAME.unpack_from(block)
            assert crc == zlib.crc32(block[FRAME.size:]) and length == len(block) - FRAME.size
            if block not in stored_blocks:  # cut: some records of one stored block, in its order
                recs = decode_block(block, 0)
                assert any(set(recs) < set(b) for b in blocks), recs


def test_byte_windows_tile_a_segment(nsqd_factory):
    node = nsqd_factory("--retention=1h", "--retention-bytes=400000")  # segments of 50 KB
    topic = unique_name()
    w = Wire(node.tcp_address)
    for i in range(150):
        w.mpub(topic, [b"%03d-%d" % (i, j) + b"y" * (i % 7 * 40) for j in range(1 + i % 9)])
    everything = read_records(node, topic)
    for seg in segments(node, topic)["segments"]:
        sid, size = seg["segment"], seg["bytes"]
        whole = read_records(node, topic, f"&segment={sid}")
        for cuts in ([0, size], [0, 1, size], [0, size // 3, 2 * size // 3], [0, 17, 46, 4000, size - 1],
                     list(range(0, size, 997))):
            pieces = []
            for i, lo in enumerate(cuts):
                hi = f"&byte_to={cuts[i + 1]}" if i + 1 < len(cuts) else ""
                pieces += read_records(node, topic, f"&segment={sid}&byte_from={lo}{hi}")
            assert pieces == whole, (sid, cuts)
        assert len(whole) == seg["count"]
    # a window and a time range together: the window's blocks, cut to the range
    mid = everything[len(everything) // 2][2]
    sid = segments(node, topic)["segments"][0]["segment"]
    got = read_records(node, topic, f"&segment={sid}&byte_from=100&from={mid // 10**6}")
    assert all(r[2] >= mid // 10**6 * 10**6 for r in got)


def test_byte_window_errors(nsqd_factory):
    node = nsqd_factory("--retention=1h")
    topic = unique_name()
    Wire(node.tcp_address).pub(topic, b"x")
    assert error(node, "GET", f"/history/read?topic={topic}&byte_from=0") == (400, "MISSING_ARG_SEGMENT")
    assert error(node, "GET", f"/history/read?topic={topic}&segment=1&byte_from=x") == (400, "INVALID_BYTE_FROM")
    assert error(node, "GET", f"/history/read?topic={topic}&segment=1&byte_to=-1") == (400, "INVALID_BYTE_TO")
    assert error(node, "GET", f"/history/read?topic={topic}&segment=1&byte_to=99999999999999999999") == \
        (400, "INVALID_BYTE_TO")
    for past_the_end in ("&byte_from=1000000", "&byte_from=999999999999999999",
                         "&byte_from=40&byte_to=999999999999999999", "&byte_from=5&byte_to=5"):
        assert read_blocks(node, topic, "&segment=1" + past_the_end) == b"", past_the_end
    assert call(node, "GET", "/ping") == (200, b"OK")


def test_a_read_that_fails_midway_ends_inside_a_block(nsqd_factory, tmp_path):
    """A damaged block in a sealed segment (its summary on disk, so not scanned at start-up)
    that a range cuts: the answer breaks off inside a block, the reader fails rather than
    taking a shorter range, and nsqd goes on serving."""
    topic = unique_name()
    ms = 10**6
    t0 = (time.time_ns() // ms - 60_000) * ms
    good = encode_block([b"a" * 16, b"b" * 16], [b"one", b"two"], [t0, t0 + ms])
    damaged = bytearray(encode_block([b"c" * 16, b"d" * 16, b"e" * 16], [b"x", b"y", b"z"],
                                     [t0 + 2 * ms, t0 + 3 * ms, t0 + 4 * ms]))
    damaged[16 + 24 + 3] = 2  # the first body "is" 2 bytes: the sizes no longer fill the block
    folder = tmp_path / "n" / f"{topic}.history"
    folder.mkdir(parents=True)
    sealed = good + bytes(damaged)
    (folder / f"{1:020d}.seg").write_bytes(sealed)
    (folder / f"{1:020d}.idx").write_bytes(orjson.dumps({
        "size": len(sealed), "count": 5, "first": t0, "last": t0 + 4 * ms, "min": t0,
        "max": t0 + 4 * ms, "off": [0], "pmax": [-1]}))
    (folder / f"{2:020d}.seg").write_bytes(encode_block([b"f" * 16], [b"later"], [t0 + 10 * ms]))
    node = nsqd_factory("--retention=1h", data_path=tmp_path / "n")
    splitter = BlockSplitter()
    splitter.feed(read_blocks(node, topic, f"&from={(t0 + 3 * ms) // ms}"))
    with pytest.raises(FramingError, match="ended inside a block"):
        splitter.take()
        splitter.close()
    assert read_records(node, topic, f"&from={(t0 + 10 * ms) // ms}") == [(b"f" * 16, b"later", t0 + 10 * ms)]
    assert call(node, "GET", "/ping") == (200, b"OK")
