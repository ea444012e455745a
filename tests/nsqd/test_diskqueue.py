"""DiskQueue: go-diskqueue's on-disk format, sync policy, recovery, disk-full behaviour."""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy.nsqd import diskqueue as dqmod
from nsqpy.nsqd.diskqueue import DiskQueue, DummyQueue, scan_records

pytestmark = pytest.mark.timeout(60)

MIN = 26  # what nsqd passes: the message header size
MAX = 1024 + 26
LOG = logging.getLogger("test.diskqueue")


# --- helpers ------------------------------------------------------------------------------------

def msg(i: int, size: int = 100) -> bytes:
    """A distinct record of ``size`` bytes (>= 26) that encodes its index."""
    head = b"%026d" % i
    return head + bytes((i + k) % 251 for k in range(size - 26))


def rec(data: bytes) -> bytes:
    """One record exactly as go-diskqueue writes it."""
    return struct.pack(">i", len(data)) + data


def meta_text(depth: int, rfn: int, rpos: int, wfn: int, wpos: int) -> bytes:
    return b"%d\n%d,%d\n%d,%d\n" % (depth, rfn, rpos, wfn, wpos)


def open_q(path: Path, name: str = "t", max_bytes: int = 100 * 1024 * 1024,
           sync_every: int = 2500, sync_timeout: float = 2.0,
           min_size: int = MIN, max_size: int = MAX) -> DiskQueue:
    return DiskQueue(name, str(path), max_bytes, min_size, max_size, sync_every, sync_timeout, LOG)


def data_file(path: Path, num: int, name: str = "t") -> Path:
    return path / f"{name}.diskqueue.{num:06d}.dat"


def meta_file(path: Path, name: str = "t") -> Path:
    return path / f"{name}.diskqueue.meta.dat"


def files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def bad_files(path: Path) -> list[str]:
    return [f for f in files(path) if f.endswith(".bad")]


def drain(q: DiskQueue, batch: int = 7, get=None) -> list:
    out: list = []
    for _ in range(100000):
        got = (get or q.get_many)(batch)
        if not got:
            return out
        out.extend(got)
    raise AssertionError("drain did not terminate")


def as_message(record: bytes) -> tuple[bytes, bytes, int, int]:
    """What get_messages makes of a record, by an independent decoder of the NSQ header."""
    ts, attempts = struct.unpack(">qH", record[:10])
    return record[10:26], record[26:], ts, attempts


def drain_messages(q: DiskQueue, batch: int = 7) -> list[tuple[bytes, bytes, int, int]]:
    return drain(q, batch, q.get_messages)


def crash(q: DiskQueue) -> None:
    """Forget the queue the way kill -9 would: close its fds without syncing anything.
    A group commit already running on the sync thread is let finish first (a kill stops that
    thread too; one outliving the "crash" could rewrite the metadata under the reopened queue)."""
    q.wait_background()
    q._close_fds()
    q._closed = True


def parse_file(p: Path) -> list[bytes]:
    """An independent reader of go-diskqueue data files (no shared code with the module)."""
    raw = p.read_bytes()
    out, off = [], 0
    while off < len(raw):
        (n,) = struct.unpack(">i", raw[off:off + 4])
        out.append(raw[off + 4:off + 4 + n])
        off += 4 + n
    assert off == len(raw)
    return out


# --- basics -------------------------------------------------------------------------------------

def test_round_trip(tmp_path: Path) -> None:
    q = open_q(tmp_path)
    assert q.depth == 0 and q.get() is None and q.get_many(10) == []
    msgs = [msg(i, 26 + i) for i in range(50)]
    q.put(msgs[0])
    q.put_many(msgs[1:40])
    for m in msgs[40:]:
        q.put(m)
    assert q.depth == 50
    assert q.get() == msgs[0]
    assert q.get_many(3) == msgs[1:4]
    assert q.depth == 46
    assert q.get_many(1000) == msgs[4:]
    assert q.depth == 0 and q.get() is None
    q.put(msgs[0])
    assert q.get() == msgs[0]
    q.close()


def test_size_limits(tmp_path: Path) -> None:
    q = open_q(tmp_path)
    with pytest.raises(ValueError):
        q.put(b"x" * (MIN - 1))
    with pytest.raises(ValueError):
        q.put(b"x" * (MAX + 1))
    with pytest.raises(ValueError):
        q.put_many([msg(1), b"short", msg(2)])
    assert q.depth == 0 and q.write_pos == 0
    q.put(b"x" * MIN)
    q.put(b"y" * MAX)
    assert q.get_many(5) == [b"x" * MIN, b"y" * MAX]
    q.put_many([])
    q.close()


def test_exact_bytes_written(tmp_path: Path) -> None:
    """What we write is byte-for-byte go-diskqueue's record format."""
    q = open_q(tmp_path)
    msgs = [msg(i, 30 + i) for i in range(5)]
    q.put(msgs[0])
    q.put_many(msgs[1:])
    q.sync()
    assert data_file(tmp_path, 0).read_bytes() == b"".join(rec(m) for m in msgs)
    q.close()


def test_metadata_format_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renames: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src, dst):
        renames.append((str(src), str(dst)))
        return real_replace(src, dst)

    q = open_q(tmp_path, name="topic:chan")
    q.put_many([b"a" * 26, b"b" * 26, b"c" * 26])
    assert q.get() == b"a" * 26
    monkeypatch.setattr(os, "replace", spy)
    q.sync()
    meta = meta_file(tmp_path, "topic:chan")
    assert meta.read_bytes() == b"2\n0,30\n0,90\n"
    (src, dst), = renames
    assert dst == str(meta)
    assert re.fullmatch(re.escape(str(meta)) + r"\.\d+\.tmp", src)
    assert files(tmp_path) == ["topic:chan.diskqueue.000000.dat", "topic:chan.diskqueue.meta.dat"]
    q.close()


def test_channel_style_names_do_not_collide(tmp_path: Path) -> None:
    a = open_q(tmp_path, name="t")
    b = open_q(tmp_path, name="t:c")
    c = open_q(tmp_path, name="t.diskqueue.000001")
    a.put(msg(1))
    b.put(msg(2))
    c.put(msg(3))
    a.delete()
    assert b.get() == msg(2) and c.get() == msg(3)
    assert not data_file(tmp_path, 0, "t").exists()
    assert data_file(tmp_path, 0, "t:c").exists()
    assert data_file(tmp_path, 0, "t.diskqueue.000001").exists()
    b.close()
    c.close()


# --- rolling and deletion -----------------------------------------------------------------------

def test_roll_rule_matches_upstream(tmp_path: Path) -> None:
    """go-diskqueue TestDiskQueueRoll: 10 records fill a file exactly, the 11th rolls."""
    m = bytes(range(1, 10)) + b"\x00"
    q = open_q(tmp_path, max_bytes=10 * (len(m) + 4), min_size=len(m))
    for i in range(11):
        q.put(m)
        assert q.depth == i + 1
    assert (q.write_file_num, q.write_pos) == (1, len(m) + 4)
    assert data_file(tmp_path, 0).stat().st_size == 10 * (len(m) + 4)
    # the roll synced metadata by itself (after writing the record that rolled; upstream
    # syncs just before writing it, i.e. "10\n0,0\n1,0\n")
    assert meta_file(tmp_path).read_bytes() == meta_text(11, 0, 0, 1, len(m) + 4)
    for i in range(11, 0, -1):
        assert q.get() == m
        assert q.depth == i - 1
    q.close()


@pytest.mark.parametrize("batch", [1, 3, 50])
def test_rolling_across_files(tmp_path: Path, batch: int) -> None:
    max_bytes = 1000
    q = open_q(tmp_path, max_bytes=max_bytes)
    msgs = [msg(i, 26 + (i * 37) % 300) for i in range(200)]
    for i in range(0, len(msgs), batch):
        q.put_many(msgs[i:i + batch])
    q.sync()
    # every file obeys "roll before a write when pos > 0 and pos + 4 + len > max"
    got: list[bytes] = []
    nums = sorted(int(f.split(".")[2]) for f in files(tmp_path) if f.endswith(".dat")
                  and "meta" not in f)
    assert nums == list(range(q.write_file_num + 1))
    for n in nums:
        recs = parse_file(data_file(tmp_path, n))
        size = sum(4 + len(r) for r in recs)
        assert size <= max_bytes
        if n < q.write_file_num:
            nxt = parse_file(data_file(tmp_path, n + 1))[0]
            assert size + 4 + len(nxt) > max_bytes  # the next record really did not fit
        got.extend(recs)
    assert got == msgs
    assert drain(q, batch=11) == msgs
    q.close()


def test_record_larger_than_file_limit(tmp_path: Path) -> None:
    q = open_q(tmp_path, max_bytes=100, max_size=5000)
    big = [msg(i, 300) for i in range(4)]
    q.put(big[0])
    q.put_many(big[1:3])
    q.put(big[3])
    assert q.write_file_num == 3
    assert [len(parse_file(data_file(tmp_path, n))) for n in range(4)] == [1, 1, 1, 1]
    assert drain(q) == big
    q.close()


def test_record_larger_than_read_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dqmod, "READ_CHUNK", 64)
    q = open_q(tmp_path, max_bytes=1 << 20, max_size=1 << 20)
    msgs = [msg(i, 26 + (i * 131) % 700) for i in range(40)]
    q.put_many(msgs)
    assert q.get() == msgs[0]
    assert q.get_many(5) == msgs[1:6]
    assert drain(q, 3) == msgs[6:]
    q.close()


def test_get_messages_decodes_in_the_same_pass(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """nsqd's read path: records come out as (id, body, timestamp, attempts), FIFO with
    get/get_many, also when records straddle read chunks and files."""
    monkeypatch.setattr(dqmod, "READ_CHUNK", 97)
    q = open_q(tmp_path, max_bytes=700, max_size=1 << 20)
    msgs = [struct.pack(">qH", 10**18 + i, i % 65536) + b"%016x" % i + bytes([i % 251]) * (i * 37 % 300)
            for i in range(60)]
    q.put_many(msgs)
    assert q.get_messages(0) == []
    assert q.get_messages(1) == [as_message(msgs[0])]
    assert q.get() == msgs[1]
    assert q.get_messages(5) == [as_message(m) for m in msgs[2:7]]
    assert q.depth == 53
    assert drain_messages(q, 4) == [as_message(m) for m in msgs[7:]]
    assert q.depth == 0 and q.get_messages(10) == []
    assert DummyQueue().get_messages(5) == []
    q.close()


@pytest.mark.parametrize("batch", [8, 64, 100, 1000])
def test_get_messages_same_size_runs_across_files(tmp_path: Path, batch: int) -> None:
    # runs of one size are decoded in blocks: across file rolls, read chunks and size changes
    q = open_q(tmp_path, max_bytes=10_000)
    msgs = [msg(i, 120 if i < 300 or i >= 340 else 60) for i in range(700)]
    q.put_many(msgs)
    assert drain_messages(q, batch) == [as_message(m) for m in msgs]
    assert q.depth == 0
    q.close()


def test_get_messages_truncated_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    q, msgs = _three_files(tmp_path)
    os.truncate(data_file(tmp_path, 1), 400 + 10)  # 3 valid records, then 10 bytes of a 4th
    assert drain_messages(q, 5) == [as_message(m) for m in msgs[:11] + msgs[16:]]
    assert bad_files(tmp_path) == [data_file(tmp_path, 1).name + ".bad"]
    assert "truncated record" in caplog.text
    q.close()


def test_get_messages_refuses_records_shorter_than_a_message(tmp_path: Path) -> None:
    """A queue opened with a smaller minimum still never hands out a header-less message."""
    q = open_q(tmp_path, min_size=1)
    q.put_many([msg(0), b"short", msg(1)])
    assert q.get_messages(10) == [as_message(msg(0))]
    assert q.get_messages(10) == []
    assert bad_files(tmp_path) == [data_file(tmp_path, 0).name + ".bad"]
    q.close()


def test_file_deleted_once_consumed(tmp_path: Path) -> None:
    q = open_q(tmp_path, max_bytes=1000)
    msgs = [msg(i, 120) for i in range(20)]  # 124 bytes: 8 per file
    q.put_many(msgs)
    assert data_file(tmp_path, 0).exists()
    assert q.get_many(7) == msgs[:7]
    assert data_file(tmp_path, 0).exists()  # not yet fully consumed
    assert q.get() == msgs[7]
    # consumed and moved past: deleted right away, and the move is in the metadata
    assert not data_file(tmp_path, 0).exists()
    assert meta_file(tmp_path).read_bytes() == meta_text(12, 1, 0, 2, 4 * 124)
    assert q.get_many(8) == msgs[8:16]
    assert not data_file(tmp_path, 1).exists()
    assert q.get_many(100) == msgs[16:]
    assert data_file(tmp_path, 2).exists()  # the write file stays
    assert bad_files(tmp_path) == []
    q.close()


def test_reader_caught_up_when_writer_rolls(tmp_path: Path) -> None:
    """Alternate put/get across rolls: no spurious .bad (go-diskqueue issue #42)."""
    q = open_q(tmp_path, max_bytes=1000)
    for i in range(60):
        m = msg(i, 26 + (i * 53) % 200)
        q.put(m)
        assert q.get() == m
        assert q.depth == 0
    assert q.write_file_num > 5
    assert bad_files(tmp_path) == []
    assert [f for f in files(tmp_path) if f.endswith(".dat") and "meta" not in f] == \
        [data_file(tmp_path, q.write_file_num).name]
    q.close()


# --- sync policy --------------------------------------------------------------------------------

def test_sync_every(tmp_path: Path) -> None:
    q = open_q(tmp_path, sync_every=3)
    q.put(msg(0))
    q.put(msg(1))
    assert not meta_file(tmp_path).exists() or meta_file(tmp_path).read_bytes() == \
        meta_text(0, 0, 0, 0, 0)
    q.put(msg(2))
    q.wait_background()  # the group commit runs on the sync thread
    assert meta_file(tmp_path).read_bytes() == meta_text(3, 0, 0, 0, 3 * 104)
    q.get()
    q.get()
    assert meta_file(tmp_path).read_bytes() == meta_text(3, 0, 0, 0, 3 * 104)
    q.get()  # reads count too
    q.wait_background()
    assert meta_file(tmp_path).read_bytes() == meta_text(0, 0, 312, 0, 312)
    q.close()


def test_sync_every_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = dqmod._fdatasync
    monkeypatch.setattr(dqmod, "_fdatasync", lambda fd: (calls.append(fd), real(fd)))
    q = open_q(tmp_path, sync_every=1)
    for i in range(5):
        q.put(msg(i))
        assert meta_file(tmp_path).read_bytes() == meta_text(i + 1, 0, 0, 0, (i + 1) * 104)
    assert len(calls) == 5
    q.put_many([msg(i) for i in range(100)])  # group commit: one fsync for the batch
    assert len(calls) == 6
    q.close()


def test_tick_syncs_after_timeout(tmp_path: Path) -> None:
    q = open_q(tmp_path, sync_every=10000, sync_timeout=5.0)
    q.put(msg(1))
    now = time.monotonic()
    q.tick(now)
    assert not meta_file(tmp_path).exists()
    q.tick(now + 5.1)
    q.wait_background()
    assert meta_file(tmp_path).read_bytes() == meta_text(1, 0, 0, 0, 104)
    # no activity: no sync
    os.unlink(meta_file(tmp_path))
    q.tick(now + 100)
    assert not meta_file(tmp_path).exists()
    q.get()
    q.tick(time.monotonic() + 5.1)
    q.wait_background()
    assert meta_file(tmp_path).read_bytes() == meta_text(0, 0, 104, 0, 104)
    q.close()


# --- reopen and crash ---------------------------------------------------------------------------

def test_reopen_after_close_resumes_exactly(tmp_path: Path) -> None:
    msgs = [msg(i, 26 + i % 90) for i in range(300)]
    q = open_q(tmp_path, max_bytes=2000)
    q.put_many(msgs[:200])
    assert q.get_many(50) == msgs[:50]
    state = (q.depth, q.read_file_num, q.read_pos, q.write_file_num, q.write_pos)
    q.close()
    q2 = open_q(tmp_path, max_bytes=2000)
    assert (q2.depth, q2.read_file_num, q2.read_pos, q2.write_file_num, q2.write_pos) == state
    q2.put_many(msgs[200:])
    assert q2.get() == msgs[50]
    q2.close()
    q3 = open_q(tmp_path, max_bytes=2000)
    assert q3.depth == 249
    assert drain(q3) == msgs[51:]
    assert bad_files(tmp_path) == []
    q3.close()


def test_reopen_after_crash_no_loss(tmp_path: Path) -> None:
    msgs = [msg(i) for i in range(100)]
    q = open_q(tmp_path, sync_every=10000)
    q.put_many(msgs[:40])
    assert q.get_many(10) == msgs[:10]
    q.sync()  # durable: 30 pending from index 10
    q.put_many(msgs[40:70])  # unsynced writes past metadata writePos
    assert q.get_many(5) == msgs[10:15]  # unsynced reads
    crash(q)
    q2 = open_q(tmp_path, sync_every=10000)
    # upstream semantics: writes move to a new file; the stale tail is salvaged
    assert q2.write_file_num == 1 and q2.write_pos == 0
    assert q2.depth == 60  # 30 synced + 30 salvaged (upstream would report 30)
    q2.put_many(msgs[70:])
    # every record arrives; only the 5 unsynced reads are delivered again
    assert drain(q2) == msgs[10:]
    assert q2.depth == 0
    assert bad_files(tmp_path) == []
    q2.close()


def test_reopen_after_crash_with_unsynced_roll_files(tmp_path: Path) -> None:
    """Metadata older than the data (write file and later files written after the sync)."""
    msgs = [msg(i, 120) for i in range(40)]
    q = open_q(tmp_path, max_bytes=1000, sync_every=10000)
    q.put_many(msgs[:5])
    q.sync()
    stale_meta = meta_file(tmp_path).read_bytes()
    q.put_many(msgs[5:30])  # rolls (and syncs) twice
    crash(q)
    meta_file(tmp_path).write_bytes(stale_meta)  # as if those syncs never happened
    q2 = open_q(tmp_path, max_bytes=1000)
    assert q2.write_file_num == 4
    assert q2.depth == 30
    q2.put_many(msgs[30:])
    assert drain(q2) == msgs
    assert bad_files(tmp_path) == []
    q2.close()


KILL_WRITER = textwrap.dedent("""
    import logging, sys
    from nsqpy.nsqd.diskqueue import DiskQueue
    path, sync_every = sys.argv[1], int(sys.argv[2])
    q = DiskQueue("t", path, 20000, 26, 1050, sync_every, 2.0, logging.getLogger("w"))
    i = 0
    acked = 0
    while True:
        batch = [b"%026d" % (i + k) + b"x" * ((i + k) % 120) for k in range(7)]
        q.put_many(batch)
        i += 7
        if i % 21 == 0:
            got = q.get_many(5)
            acked += len(got)
        sys.stdout.write("%d %d\\n" % (i, acked))
        sys.stdout.flush()
""")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sync_every", [1, 50, 2500])
def test_kill_9_during_writes(tmp_path: Path, sync_every: int) -> None:
    """Fault matrix row 1: SIGKILL mid-stream; nothing written is lost, no .bad, depth right."""
    proc = subprocess.Popen([sys.executable, "-c", KILL_WRITER, str(tmp_path), str(sync_every)],
                            stdout=subprocess.PIPE, text=True)
    try:
        last = None
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        for line in proc.stdout:
            last = line
            written = int(line.split()[0])
            if written >= 3000 or time.monotonic() > deadline:
                break
        os.kill(proc.pid, signal.SIGKILL)
        # the writer ran on while its lines waited in the pipe: its last whole line is the
        # state it was killed in (give or take the one step it had no time to print)
        for line in proc.stdout:
            if line.endswith("\n"):
                last = line
    finally:
        proc.kill()
        proc.wait(10)
    assert last is not None
    acked_writes, handed_out = map(int, last.split())
    q = open_q(tmp_path, max_bytes=20000, max_size=1050)
    rest = drain(q, 100)
    ids = [int(r[:26]) for r in rest]
    # a suffix of the write sequence, in order, without gaps, covering every acked write;
    # it starts no later than the first record not yet handed out (the unprinted step may
    # have handed out 5 more)
    assert ids == list(range(ids[0], ids[0] + len(ids)))
    assert ids[0] <= handed_out + 5
    assert ids[-1] + 1 >= acked_writes
    # a SIGKILL can land inside a write() that crosses a page (the kernel stops copying at a
    # page boundary for a fatal signal): the file written at the kill may then end in a torn
    # record, never acknowledged, which the reader moves aside after its whole records
    for name in bad_files(tmp_path):
        fd = os.open(tmp_path / name, os.O_RDONLY)
        try:
            end = os.fstat(fd).st_size
            count, stop, error = scan_records(fd, 0, end, 26, 1050)
        finally:
            os.close(fd)
        assert error in ("truncated record", "truncated record header"), (name, error)
        assert end - stop < 4 + 1050, (name, stop, end)
    assert len(bad_files(tmp_path)) <= 1
    assert q.depth == 0
    q.close()


# --- interop with files written by upstream -----------------------------------------------------

def test_reads_upstream_written_files(tmp_path: Path) -> None:
    """Files built byte by byte in go-diskqueue's format, as Go nsqd leaves them."""
    msgs = [msg(i, 26 + i * 3) for i in range(12)]
    # file 3: partly consumed (readPos after 2 records); file 4: complete; file 5: write file.
    # file 4 is larger than max_bytes_per_file (pre-1.1 roll-after-write) and smaller files
    # end early: the reader must use each complete file's real size.
    f3 = b"".join(rec(m) for m in msgs[:4])
    f4 = b"".join(rec(m) for m in msgs[4:9])
    f5 = b"".join(rec(m) for m in msgs[9:])
    data_file(tmp_path, 3, "topic:ch").write_bytes(f3)
    data_file(tmp_path, 4, "topic:ch").write_bytes(f4)
    data_file(tmp_path, 5, "topic:ch").write_bytes(f5)
    rpos = len(rec(msgs[0])) + len(rec(msgs[1]))
    meta_file(tmp_path, "topic:ch").write_bytes(meta_text(10, 3, rpos, 5, len(f5)))
    q = open_q(tmp_path, name="topic:ch", max_bytes=200)
    assert q.depth == 10
    assert (q.write_file_num, q.write_pos) == (5, len(f5))  # sizes agree: keep appending
    assert q.get_many(3) == msgs[2:5]
    assert not data_file(tmp_path, 3, "topic:ch").exists()
    q.put(msgs[0])  # does not fit in 200 bytes after f5: rolls to file 6
    assert (q.write_file_num, q.write_pos) == (6, 30)
    assert drain(q) == msgs[5:] + [msgs[0]]
    assert bad_files(tmp_path) == []
    q.close()
    assert meta_file(tmp_path, "topic:ch").read_bytes() == meta_text(0, 6, 30, 6, 30)
    assert files(tmp_path) == ["topic:ch.diskqueue.000006.dat", "topic:ch.diskqueue.meta.dat"]


def test_upstream_meta_without_trailing_newline_and_new_queue(tmp_path: Path) -> None:
    data_file(tmp_path, 0).write_bytes(rec(msg(1)) + rec(msg(2)))
    meta_file(tmp_path).write_bytes(b"2\n0,0\n0,208")
    q = open_q(tmp_path)
    assert drain(q) == [msg(1), msg(2)]
    q.close()


def test_upstream_unsynced_tail_skips_to_new_file(tmp_path: Path) -> None:
    """go-diskqueue #28/#31: file longer than writePos -> write to a new file, salvage."""
    msgs = [msg(i) for i in range(6)]
    data_file(tmp_path, 0).write_bytes(b"".join(rec(m) for m in msgs))
    meta_file(tmp_path).write_bytes(meta_text(3, 0, 0, 0, 3 * 104))
    q = open_q(tmp_path)
    assert (q.write_file_num, q.write_pos, q.depth) == (1, 0, 6)
    q.put(msg(99))
    assert drain(q) == msgs + [msg(99)]
    assert bad_files(tmp_path) == []
    q.close()


# --- corruption ---------------------------------------------------------------------------------

def _three_files(tmp_path: Path) -> tuple[DiskQueue, list[bytes]]:
    """25 records of 120 bytes, 8 per file (go-diskqueue TestDiskQueueCorruption's layout)."""
    q = open_q(tmp_path, max_bytes=1000, sync_every=5)
    msgs = [msg(i, 120) for i in range(25)]
    q.put_many(msgs)
    assert q.write_file_num == 3
    return q, msgs


def test_corrupt_truncated_record_in_middle_file(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    q, msgs = _three_files(tmp_path)
    os.truncate(data_file(tmp_path, 1), 400)  # 3 valid records then a torn one
    got = drain(q)
    assert got == msgs[:8] + msgs[8:11] + msgs[16:]
    assert bad_files(tmp_path) == [data_file(tmp_path, 1).name + ".bad"]
    assert q.depth == 0
    assert "truncated record" in caplog.text
    assert "positive depth at tail (5)" in caplog.text
    q.put(msg(77, 120))
    assert q.get() == msg(77, 120)
    q.close()


def test_corrupt_truncated_final_record_of_write_file(tmp_path: Path) -> None:
    """The torn record is the last thing written: on restart the file is shorter than
    writePos; the reader takes what is whole and moves on."""
    q, msgs = _three_files(tmp_path)
    q.close()
    size = data_file(tmp_path, 3).stat().st_size
    os.truncate(data_file(tmp_path, 3), size - 10)
    q2 = open_q(tmp_path, max_bytes=1000)
    assert q2.write_file_num == 4
    got = drain(q2)
    assert got == msgs[:24]
    assert bad_files(tmp_path) == [data_file(tmp_path, 3).name + ".bad"]
    assert q2.depth == 0
    q2.put(msgs[0])
    assert q2.get() == msgs[0]
    q2.close()


@pytest.mark.parametrize("decoded", [False, True], ids=["get_many", "get_messages"])
@pytest.mark.parametrize("length", [0x7FFFFFFF, -1, 0, MIN - 1, MAX + 1])
def test_corrupt_length_prefix(tmp_path: Path, length: int, decoded: bool) -> None:
    q, msgs = _three_files(tmp_path)
    with open(data_file(tmp_path, 1), "r+b") as f:
        f.seek(2 * 124)
        f.write(struct.pack(">i", length))
    if decoded:  # in batches the same-size blocks could take whole (they must not)
        assert drain_messages(q, 50) == [as_message(m) for m in msgs[:10] + msgs[16:]]
    else:
        assert drain(q) == msgs[:10] + msgs[16:]
    assert bad_files(tmp_path) == [data_file(tmp_path, 1).name + ".bad"]
    assert q.depth == 0
    q.close()


def test_corrupt_write_file_moves_writer(tmp_path: Path) -> None:
    q = open_q(tmp_path)
    msgs = [msg(i) for i in range(5)]
    q.put_many(msgs)
    with open(data_file(tmp_path, 0), "r+b") as f:
        f.seek(104 * 2)
        f.write(b"\0\0\0\0")  # zero-length record
    assert drain(q) == msgs[:2]
    assert (q.read_file_num, q.write_file_num, q.depth) == (1, 1, 0)
    assert bad_files(tmp_path) == [data_file(tmp_path, 0).name + ".bad"]
    q.put_many(msgs)
    assert drain(q) == msgs
    q.close()


def test_record_past_write_position(tmp_path: Path) -> None:
    """A length that is in range but runs past writePos is corruption, not a wait."""
    q = open_q(tmp_path)
    q.put_many([msg(1), msg(2)])
    with open(data_file(tmp_path, 0), "r+b") as f:
        f.seek(104)
        f.write(struct.pack(">i", 500))
    assert drain(q) == [msg(1)]
    assert q.depth == 0 and bad_files(tmp_path)
    q.close()


def test_missing_segment_in_middle(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    q, msgs = _three_files(tmp_path)
    q.close()
    os.unlink(data_file(tmp_path, 1))
    os.unlink(data_file(tmp_path, 2))
    q2 = open_q(tmp_path, max_bytes=1000)
    assert drain(q2) == msgs[:8] + msgs[24:]
    assert q2.depth == 0
    assert "is missing" in caplog.text
    assert bad_files(tmp_path) == []
    q2.close()


def test_missing_files_with_huge_gap_does_not_loop(tmp_path: Path) -> None:
    data_file(tmp_path, 0).write_bytes(rec(msg(0)))
    data_file(tmp_path, 10**9).write_bytes(rec(msg(1)))
    meta_file(tmp_path).write_bytes(meta_text(2, 0, 0, 10**9, 104))
    q = open_q(tmp_path)
    t0 = time.monotonic()
    assert drain(q) == [msg(0), msg(1)]
    assert time.monotonic() - t0 < 30  # milliseconds; stepping through 10**9 names takes hours
    q.close()


def test_missing_metadata_with_no_files_is_fresh(tmp_path: Path) -> None:
    q = open_q(tmp_path)
    assert (q.depth, q.read_file_num, q.read_pos, q.write_file_num, q.write_pos) == (0, 0, 0, 0, 0)
    q.put(msg(1))
    assert data_file(tmp_path, 0).exists()
    q.close()


def test_missing_metadata_with_data_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Crash before the first sync of a new queue: upstream would start over on file 0 and
    overwrite it; we log an error and recover the records."""
    q, msgs = _three_files(tmp_path)
    q.close()
    os.unlink(meta_file(tmp_path))
    q2 = open_q(tmp_path, max_bytes=1000)
    assert "metadata file" in caplog.text and "missing" in caplog.text
    assert q2.depth == 25
    assert q2.write_file_num == 4
    q2.put(msg(99, 120))
    assert drain(q2) == msgs + [msg(99, 120)]
    q2.close()


@pytest.mark.parametrize("content", [b"", b"garbage", b"5\n0,", b"1\n2,0\n1,0\n",
                                     b"1\n0,500\n0,100\n", b"1\n-1,0\n0,100\n",
                                     b"\xff\xfe\x00"])
def test_corrupt_metadata_rebuilds(tmp_path: Path, content: bytes,
                                   caplog: pytest.LogCaptureFixture) -> None:
    q, msgs = _three_files(tmp_path)
    assert q.get_many(3) == msgs[:3]
    q.close()
    meta_file(tmp_path).write_bytes(content)
    q2 = open_q(tmp_path, max_bytes=1000)
    assert "rebuilding positions" in caplog.text
    assert (tmp_path / (meta_file(tmp_path).name + ".bad")).read_bytes() == content
    # read position lost with the metadata: the partly read file is delivered again
    assert q2.depth == 25
    assert drain(q2) == msgs
    assert q2.depth == 0
    q2.close()
    assert meta_file(tmp_path).exists()


def test_negative_depth_in_metadata_recounted(tmp_path: Path) -> None:
    q, msgs = _three_files(tmp_path)
    q.close()
    meta_file(tmp_path).write_bytes(meta_text(-7, 0, 0, 3, 124))
    q2 = open_q(tmp_path, max_bytes=1000)
    assert q2.depth == 25
    assert drain(q2) == msgs
    q2.close()


def test_depth_too_high_reset_at_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_file(tmp_path, 0).write_bytes(rec(msg(1)) + rec(msg(2)))
    meta_file(tmp_path).write_bytes(meta_text(40, 0, 0, 0, 208))
    q = open_q(tmp_path)
    assert q.depth == 40
    assert drain(q) == [msg(1), msg(2)]
    assert q.depth == 0
    assert "positive depth at tail (38)" in caplog.text
    q.close()
    assert meta_file(tmp_path).read_bytes() == meta_text(0, 0, 208, 0, 208)


def test_depth_too_low_never_negative(tmp_path: Path) -> None:
    data_file(tmp_path, 0).write_bytes(rec(msg(1)) + rec(msg(2)) + rec(msg(3)))
    data_file(tmp_path, 1).write_bytes(rec(msg(4)))
    meta_file(tmp_path).write_bytes(meta_text(1, 0, 0, 1, 104))
    q = open_q(tmp_path)
    for expect in (msg(1), msg(2), msg(3), msg(4)):
        assert q.get() == expect
        assert q.depth >= 0
    assert q.depth == 0
    q.close()


def test_unreadable_file_goes_bad(tmp_path: Path) -> None:
    q, msgs = _three_files(tmp_path)
    q.close()
    p = data_file(tmp_path, 1)
    p.unlink()
    p.mkdir()  # opening works on Linux, reading fails (EISDIR)
    q2 = open_q(tmp_path, max_bytes=1000)
    assert drain(q2) == msgs[:8] + msgs[16:]
    assert (tmp_path / (p.name + ".bad")).is_dir()
    q2.close()


def test_stale_tmp_metadata_removed(tmp_path: Path) -> None:
    (tmp_path / "t.diskqueue.meta.dat.12345.tmp").write_bytes(b"junk")
    (tmp_path / "other.diskqueue.meta.dat.1.tmp").write_bytes(b"junk")
    q = open_q(tmp_path)
    assert not (tmp_path / "t.diskqueue.meta.dat.12345.tmp").exists()
    assert (tmp_path / "other.diskqueue.meta.dat.1.tmp").exists()
    q.close()


# --- empty / delete / close ---------------------------------------------------------------------

def test_empty(tmp_path: Path) -> None:
    q, msgs = _three_files(tmp_path)
    q.get_many(9)
    q.empty()
    assert q.depth == 0 and q.get() is None
    assert files(tmp_path) == []
    assert (q.read_file_num, q.read_pos, q.write_file_num, q.write_pos) == (4, 0, 4, 0)
    q.put_many(msgs[:2])
    assert data_file(tmp_path, 4).exists()
    q.close()
    q2 = open_q(tmp_path, max_bytes=1000)
    assert drain(q2) == msgs[:2]
    q2.close()


def test_delete_leaves_nothing(tmp_path: Path) -> None:
    q, msgs = _three_files(tmp_path)
    os.truncate(data_file(tmp_path, 0), 300)
    q.get_many(5)  # makes a .bad file
    assert bad_files(tmp_path)
    (tmp_path / "unrelated.txt").write_text("x")
    q.delete()
    assert files(tmp_path) == ["unrelated.txt"]
    with pytest.raises(OSError):
        q.put(msgs[0])
    assert q.get() is None and q.get_many(3) == []
    q.close()
    q.delete()


def test_close_is_idempotent_and_put_after_close_fails(tmp_path: Path) -> None:
    q = open_q(tmp_path)
    q.put(msg(1))
    q.close()
    q.close()
    q.sync()
    q.tick(time.monotonic() + 100)
    with pytest.raises(OSError):
        q.put(msg(2))
    with pytest.raises(OSError):
        q.put_many([msg(2)])
    assert meta_file(tmp_path).read_bytes() == meta_text(1, 0, 0, 0, 104)


def test_dummy_queue() -> None:
    d = DummyQueue("t#ephemeral")
    d.put(b"x" * 30)
    d.put_many([b"y" * 30])
    assert d.depth == 0 and d.get() is None and d.get_many(10) == []
    d.sync()
    d.tick(0.0)
    d.empty()
    d.close()
    d.delete()


def test_scan_records(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(rec(msg(1)) + rec(msg(2, 3000)) + b"\0\0")
    fd = os.open(p, os.O_RDONLY)
    try:
        assert scan_records(fd, 0, os.fstat(fd).st_size, MIN, 5000) == (2, 104 + 3004,
                                                                       "truncated record header")
        assert scan_records(fd, 0, 104 + 3004, MIN, 5000) == (2, 104 + 3004, None)
        assert scan_records(fd, 0, 104 + 3004, MIN, 1000)[2] == "invalid message read size (3000)"
    finally:
        os.close(fd)


# --- disk full ----------------------------------------------------------------------------------

def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_enospc_on_put_leaves_queue_consistent(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    q = open_q(tmp_path, max_bytes=1000)
    msgs = [msg(i, 120) for i in range(40)]
    q.put_many(msgs[:4])
    before = (q.depth, q.write_file_num, q.write_pos)
    monkeypatch.setattr(os, "pwrite", _enospc)
    with pytest.raises(OSError) as ei:
        q.put(msgs[4])
    assert ei.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        q.put_many(msgs[4:20])  # would roll: all or nothing
    assert (q.depth, q.write_file_num, q.write_pos) == before
    assert q.get_many(2) == msgs[:2]  # reading still works
    monkeypatch.undo()
    q.put_many(msgs[4:20])  # fault cleared: recovers
    q.put(msgs[20])
    assert drain(q) == msgs[2:21]
    assert bad_files(tmp_path) == []
    q.close()


def test_partial_write_is_cut_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = open_q(tmp_path)
    q.put(msg(0))
    real = os.pwrite
    calls = {"n": 0}

    def half_then_enospc(fd, data, pos):
        calls["n"] += 1
        if calls["n"] == 1:
            return real(fd, bytes(data[:len(data) // 2]), pos)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", half_then_enospc)
    with pytest.raises(OSError):
        q.put_many([msg(i) for i in range(1, 10)])
    monkeypatch.undo()
    assert data_file(tmp_path, 0).stat().st_size == 104 == q.write_pos
    assert q.depth == 1
    q.put(msg(10))
    assert drain(q) == [msg(0), msg(10)]
    q.close()


def test_enospc_in_second_file_of_a_batch_is_all_or_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = open_q(tmp_path, max_bytes=1000)
    msgs = [msg(i, 120) for i in range(30)]
    q.put_many(msgs[:3])
    real = os.pwrite
    seen: list[int] = []

    def fail_second(fd, data, pos):
        seen.append(fd)
        if len(seen) >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, pos)

    monkeypatch.setattr(os, "pwrite", fail_second)
    with pytest.raises(OSError):
        q.put_many(msgs[3:20])
    monkeypatch.undo()
    assert (q.depth, q.write_file_num, q.write_pos) == (3, 0, 3 * 124)
    assert data_file(tmp_path, 0).stat().st_size == 3 * 124
    assert not data_file(tmp_path, 1).exists()
    q.put_many(msgs[3:])
    assert drain(q) == msgs
    q.close()


def test_fsync_failure_is_logged_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    q = open_q(tmp_path, sync_every=1)

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(dqmod, "_fdatasync", eio)
    q.put(msg(1))  # written; the failed sync must not make the caller retry (duplicate)
    assert q.depth == 1
    assert "failed to sync" in caplog.text
    monkeypatch.undo()
    q.tick(time.monotonic() + 10)  # retried from tick
    assert meta_file(tmp_path).read_bytes() == meta_text(1, 0, 0, 0, 104)
    with pytest.raises(OSError):
        monkeypatch.setattr(dqmod, "_fdatasync", eio)
        q.put(msg(2))
        q.sync()  # an explicit sync does raise
    monkeypatch.undo()
    q.close()


@pytest.mark.timeout(60)
def test_real_disk_full_tmpfs(tmp_path: Path) -> None:
    """Fault matrix row 4 on a real 1 MiB tmpfs: ENOSPC from the kernel, then recovery."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount tmpfs: {r.stderr.decode().strip()}")
    q = q2 = None
    try:
        q = open_q(mnt, max_bytes=200 * 1024, sync_every=100)
        written: list[bytes] = []
        i = 0
        with pytest.raises(OSError) as ei:
            for _ in range(100000):
                batch = [msg(i + k, 500) for k in range(20)]
                q.put_many(batch)
                written.extend(batch)
                i += 20
        assert ei.value.errno == errno.ENOSPC
        assert q.depth == len(written) > 0
        with pytest.raises(OSError):  # a batch failed; single records fill the rest
            for _ in range(100000):
                q.put(msg(i, 500))
                written.append(msg(i, 500))
                i += 1
        with pytest.raises(OSError):
            q.put(msg(10**6, 500))
        assert q.depth == len(written)
        # the consumer frees space by consuming whole files; then writes work again
        first = drain(q, 50)
        assert first == written
        q.put_many([msg(1, 500), msg(2, 500)])
        assert q.get_many(5) == [msg(1, 500), msg(2, 500)]
        q.close()
        q2 = open_q(mnt, max_bytes=200 * 1024)
        assert q2.depth == 0 and q2.get() is None
        q2.close()
        assert bad_files(mnt) == []
    finally:
        for dq in (q, q2):
            if dq is not None:
                crash(dq)  # just release the fds, so the unmount cannot be busy
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


FSIZE_SCRIPT = textwrap.dedent("""
    import errno, logging, resource, signal, sys
    from nsqpy.nsqd.diskqueue import DiskQueue
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    q = DiskQueue("t", sys.argv[1], 1 << 30, 26, 1050, 2500, 2.0, logging.getLogger("f"))
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    n = 0
    try:
        for i in range(10000):
            q.put_many([b"%026d" % (n + k) + b"z" * 200 for k in range(10)])
            n += 10
        raise SystemExit("no error")
    except OSError as e:
        assert e.errno == errno.EFBIG, e
    assert q.depth == n, (q.depth, n)
    assert q.write_pos <= 64 * 1024
    try:
        for i in range(10000):
            q.put(b"%026d" % n + b"z" * 200)
            n += 1
        raise SystemExit("no error 2")
    except OSError as e:
        assert e.errno == errno.EFBIG, e
    assert q.depth == n, (q.depth, n)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    q.put_many([b"%026d" % (n + k) + b"z" * 200 for k in range(10)])
    n += 10
    got = []
    while True:
        b = q.get_many(100)
        if not b:
            break
        got.extend(b)
    assert [int(g[:26]) for g in got] == list(range(n)), len(got)
    q.close()
    print("OK", n)
""")


def test_real_file_size_limit_subprocess(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel refuse writes (EFBIG); lift it and the queue carries on."""
    r = subprocess.run([sys.executable, "-c", FSIZE_SCRIPT, str(tmp_path)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OK")


# --- property test ------------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(26, 300)),
        st.tuples(st.just("put_many"), st.lists(st.integers(26, 300), max_size=25)),
        st.tuples(st.just("get"), st.just(0)),
        st.tuples(st.just("get_many"), st.integers(0, 30)),
        st.tuples(st.just("get_messages"), st.integers(0, 30)),
        st.tuples(st.just("reopen"), st.just(0)),
        st.tuples(st.just("crash"), st.just(0)),
        st.tuples(st.just("sync"), st.just(0)),
        st.tuples(st.just("empty"), st.just(0)),
    ),
    max_size=60,
)


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops, max_bytes=st.sampled_from([300, 1000, 5000]),
       sync_every=st.sampled_from([1, 3, 1000]))
def test_property_fifo_and_depth(tmp_path: Path, ops, max_bytes: int, sync_every: int) -> None:
    path = tmp_path / uuid.uuid4().hex
    path.mkdir()
    q = open_q(path, max_bytes=max_bytes, sync_every=sync_every)
    log: list[bytes] = []  # everything ever put (since the last empty)
    head = 0  # index in log of the next record to hand out
    durable_head = 0  # lowest head a crash may fall back to (last explicit sync)
    serial = 0

    def new(size: int) -> bytes:
        nonlocal serial
        serial += 1
        return b"%026d" % serial + b"p" * (size - 26)

    for op, arg in ops:
        if op == "put":
            m = new(arg)
            q.put(m)
            log.append(m)
        elif op == "put_many":
            ms = [new(s) for s in arg]
            q.put_many(ms)
            log.extend(ms)
        elif op == "get":
            got = q.get()
            if head < len(log):
                assert got == log[head]
                head += 1
            else:
                assert got is None
        elif op == "get_many":
            got = q.get_many(arg)
            n = min(arg, len(log) - head)
            assert got == log[head:head + n]
            head += n
        elif op == "get_messages":
            got = q.get_messages(arg)
            n = min(arg, len(log) - head)
            assert got == [as_message(m) for m in log[head:head + n]]
            head += n
        elif op == "sync":
            q.sync()
            durable_head = head
        elif op == "empty":
            q.empty()
            log, head, durable_head = [], 0, 0
        elif op == "reopen":
            q.close()
            q = open_q(path, max_bytes=max_bytes, sync_every=sync_every)
            durable_head = head
        elif op == "crash":
            crash(q)
            q = open_q(path, max_bytes=max_bytes, sync_every=sync_every)
            # nothing is lost; records handed out since the last sync may come again
            rest = len(log) - q.depth
            assert durable_head <= rest <= head
            head = durable_head = rest
        assert q.depth == len(log) - head
    assert drain(q) == log[head:]
    assert q.depth == 0
    assert bad_files(path) == []
    q.close()
