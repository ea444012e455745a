"""The power-cut file system (helpers.powercut) keeps exactly what a real disk would keep.

Each test writes through the mount with ordinary system calls, cuts the power, mounts again and
reads what survived. POSIX's rules (strict) and an ordered metadata journal's (journal: ext4,
XFS) differ only for directory entries.
"""

from __future__ import annotations

import errno
import os
import random

import pytest

from helpers.powercut.disk import PAGE, SECTOR

pytestmark = pytest.mark.timeout(120)


def _write(path, data: bytes, sync: bool = False, flags: int = os.O_CREAT | os.O_WRONLY) -> None:
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("mode", ["journal", "strict"])
def test_fsynced_data_survives_and_unsynced_data_is_dropped(power_cut_fs, mode):
    fs = power_cut_fs(mode)
    root = fs.mount()
    fd = os.open(root / "log", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"a" * 5000)
    os.fsync(fd)
    _fsync_dir(root)  # the name is durable in both modes from here on
    os.write(fd, b"b" * 3000)
    os.fdatasync(fd)  # fdatasync keeps data and size as fsync does
    os.write(fd, b"c" * 9000)  # never synced
    os.pwrite(fd, b"X", 10)  # an overwrite of synced data, never synced
    os.close(fd)
    assert (root / "log").read_bytes()[:11] == b"a" * 10 + b"X"  # the mount shows everything
    assert (root / "log").stat().st_size == 17000
    report = fs.cut()
    assert report["lost_pages"] >= 3
    root = fs.mount()
    assert (root / "log").read_bytes() == b"a" * 5000 + b"b" * 3000


def test_a_clean_stop_keeps_everything(power_cut_fs):
    fs = power_cut_fs("strict")
    root = fs.mount()
    (root / "d").mkdir()
    _write(root / "d" / "f", b"unsynced but shut down cleanly")
    fs.stop()
    root = fs.mount()
    assert (root / "d" / "f").read_bytes() == b"unsynced but shut down cleanly"


def test_strict_a_new_file_needs_its_directory_fsynced(power_cut_fs):
    fs = power_cut_fs("strict")
    root = fs.mount()
    (root / "dir").mkdir()
    _fsync_dir(root)
    _write(root / "dir" / "kept", b"data and name fsynced", sync=True)
    _fsync_dir(root / "dir")
    _write(root / "dir" / "lost", b"data fsynced, name not", sync=True)
    fs.cut()
    root = fs.mount()
    assert sorted(os.listdir(root / "dir")) == ["kept"]
    assert (root / "dir" / "kept").read_bytes() == b"data and name fsynced"


def test_strict_a_new_directory_needs_its_parent_fsynced(power_cut_fs):
    fs = power_cut_fs("strict")
    root = fs.mount()
    (root / "sub").mkdir()
    _write(root / "sub" / "f", b"x", sync=True)
    _fsync_dir(root / "sub")  # the entry is in sub, but sub is not in the root yet
    fs.cut()
    root = fs.mount()
    assert os.listdir(root) == []


def test_strict_rename_and_unlink_are_undone_without_a_directory_fsync(power_cut_fs):
    fs = power_cut_fs("strict")
    root = fs.mount()
    _write(root / "meta", b"old", sync=True)
    _write(root / "gone", b"still here after the cut", sync=True)
    _fsync_dir(root)
    _write(root / "meta.tmp", b"new", sync=True)
    os.replace(root / "meta.tmp", root / "meta")  # the write-temp-then-rename pattern
    os.unlink(root / "gone")
    assert sorted(os.listdir(root)) == ["meta"]
    fs.cut()
    root = fs.mount()
    assert sorted(os.listdir(root)) == ["gone", "meta"]
    assert (root / "meta").read_bytes() == b"old"
    assert (root / "gone").read_bytes() == b"still here after the cut"
    _write(root / "meta.tmp", b"new", sync=True)
    os.replace(root / "meta.tmp", root / "meta")
    _fsync_dir(root)
    fs.cut()
    root = fs.mount()
    assert (root / "meta").read_bytes() == b"new"


def test_journal_any_fsync_commits_every_earlier_directory_change(power_cut_fs):
    fs = power_cut_fs("journal")
    root = fs.mount()
    (root / "a").mkdir()
    _write(root / "a" / "old", b"o", sync=True)
    os.rename(root / "a" / "old", root / "a" / "renamed")
    _write(root / "other", b"an unrelated file's fsync commits the journal", sync=True)
    (root / "late").mkdir()  # after the last commit: lost
    fs.cut()
    root = fs.mount()
    assert sorted(os.listdir(root)) == ["a", "other"]
    assert os.listdir(root / "a") == ["renamed"]
    assert (root / "a" / "renamed").read_bytes() == b"o"


def test_an_unsynced_truncate_is_lost_a_synced_one_kept(power_cut_fs):
    fs = power_cut_fs()
    root = fs.mount()
    _write(root / "f", b"0123456789" * 1000, sync=True)
    fd = os.open(root / "f", os.O_RDWR)
    os.ftruncate(fd, 5)
    os.ftruncate(fd, 20)  # grows again: the bytes past 5 read zeros, not the old data
    assert os.pread(fd, 20, 0) == b"01234" + bytes(15)
    os.close(fd)
    fs.cut()
    root = fs.mount()
    assert (root / "f").read_bytes() == b"0123456789" * 1000
    fd = os.open(root / "f", os.O_RDWR)
    os.ftruncate(fd, 5)
    os.ftruncate(fd, 20)
    os.fsync(fd)
    os.close(fd)
    fs.cut()
    root = fs.mount()
    assert (root / "f").read_bytes() == b"01234" + bytes(15)


def _torn(power_cut_fs, seed: int) -> tuple[bytes, dict]:
    fs = power_cut_fs()
    root = fs.mount()
    synced = b"S" * (PAGE + 100)
    fd = os.open(root / "f", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, synced)
    os.fsync(fd)
    for i in range(5):  # five pages' worth of appends, never synced
        os.write(fd, bytes([ord("a") + i]) * PAGE)
    os.close(fd)
    report = fs.cut(tear=True, seed=seed)
    root = fs.mount()
    data = (root / "f").read_bytes()
    fs.stop()
    return data, report


def test_a_torn_writeback_keeps_a_prefix_of_the_pages_and_part_of_the_last(power_cut_fs):
    """With ``tear`` the dirty pages reach the disk in the order they were dirtied, up to a
    seeded point; the last one is torn at a sector boundary and the rest of it is old bytes
    (zeros past the old end), so a reader sees a prefix of the writes, then zeros."""
    synced = b"S" * (PAGE + 100)
    appended = b"".join(bytes([ord("a") + i]) * PAGE for i in range(5))
    everything = synced + appended
    shapes = set()
    for seed in range(12):
        data, report = _torn(power_cut_fs, seed)
        assert data.startswith(synced), seed
        assert len(data) % PAGE == 0 or len(data) == len(synced) or len(data) == len(everything)
        written = len(data.rstrip(b"\0"))
        assert data[:written] == everything[:written], seed  # a prefix of what was written
        assert set(data[written:]) <= {0}, seed  # then zeros: the torn page's missing sectors
        if report["torn"]:
            torn = report["torn"][0]
            cut_at = (torn["pages"] - 1) * PAGE + PAGE + torn["sectors"] * SECTOR
            assert written == max(len(synced), min(cut_at, len(everything))), (seed, report)
        else:
            assert data == synced
        shapes.add(len(data))
    assert len(shapes) >= 3  # the seeds tear in different places
    assert _torn(power_cut_fs, 5) == _torn(power_cut_fs, 5)  # the same seed, the same disk


def test_the_mount_reads_back_every_write_exactly(power_cut_fs, tmp_path):
    """Random writes, overwrites, truncates and fsyncs against a file on the real disk beside
    it: the mount always reads the same bytes, and after a cut the file is exactly what it
    was at its last fsync."""
    rng = random.Random(44)
    fs = power_cut_fs()
    root = fs.mount()
    fd = os.open(root / "f", os.O_CREAT | os.O_RDWR, 0o644)
    twin = os.open(tmp_path / "twin", os.O_CREAT | os.O_RDWR, 0o644)
    at_sync = b""
    for step in range(400):
        size = os.fstat(twin).st_size
        roll = rng.random()
        if roll < 0.6:
            off = rng.randrange(0, size + 3 * PAGE)
            data = rng.randbytes(rng.choice([1, 7, 100, PAGE - 1, PAGE, 3 * PAGE + 5]))
            assert os.pwrite(fd, data, off) == len(data)
            os.pwrite(twin, data, off)
        elif roll < 0.75:
            length = rng.randrange(0, size + 2 * PAGE)
            os.ftruncate(fd, length)
            os.ftruncate(twin, length)
        elif roll < 0.85:
            os.fsync(fd)
            at_sync = os.pread(twin, size, 0)
        else:
            off = rng.randrange(0, size + 1)
            n = rng.randrange(0, 3 * PAGE)
            assert os.pread(fd, n, off) == os.pread(twin, n, off), step
        assert os.fstat(fd).st_size == os.fstat(twin).st_size, step
    size = os.fstat(twin).st_size
    assert os.pread(fd, size + 1, 0) == os.pread(twin, size + 1, 0)
    os.close(fd)
    os.close(twin)
    fs.cut()
    root = fs.mount()
    assert (root / "f").read_bytes() == at_sync


def test_a_full_disk_writes_what_fits_then_refuses_until_space_is_freed(power_cut_fs):
    """With a limit the disk is full at that many bytes of files: a write that passes it is
    short, the next one fails with ENOSPC (a ``pwritev`` sees the short write, as on a full
    ext4); overwriting inside a file costs nothing; a truncate or an unlink frees space."""
    fs = power_cut_fs()
    root = fs.mount()
    _write(root / "other", b"o" * 3000, sync=True)
    assert fs.limit(10_000) == 3000
    fd = os.open(root / "f", os.O_CREAT | os.O_RDWR, 0o644)
    assert os.pwrite(fd, b"a" * 5000, 0) == 5000
    assert os.pwritev(fd, [b"b" * 1500, b"c" * 1500], 5000) == 2000  # 7,000 used: 2,000 fit
    with pytest.raises(OSError) as err:
        os.pwrite(fd, b"d", 7000)
    assert err.value.errno == errno.ENOSPC
    assert os.pwrite(fd, b"X" * 100, 0) == 100  # inside the file: no new space
    os.ftruncate(fd, 6000)
    assert os.pwrite(fd, b"e" * 1000, 6000) == 1000
    os.unlink(root / "other")
    assert os.pwrite(fd, b"f" * 3000, 7000) == 3000
    assert fs.stats()["enospc"] == 1
    fs.limit(None)
    assert os.pwrite(fd, b"g" * 50_000, 10_000) == 50_000
    os.close(fd)


def test_a_failed_fsync_makes_nothing_durable(power_cut_fs):
    fs = power_cut_fs()
    root = fs.mount()
    fd = os.open(root / "f", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"kept")
    os.fsync(fd)
    os.write(fd, b"-lost")
    fs.fail_fsyncs(1)
    with pytest.raises(OSError) as err:
        os.fdatasync(fd)
    assert err.value.errno == errno.EIO
    os.close(fd)
    fs.cut()
    root = fs.mount()
    assert (root / "f").read_bytes() == b"kept"


@pytest.mark.parametrize("on", ["write", "fsync"])
def test_an_armed_cut_goes_off_at_the_chosen_call(power_cut_fs, on):
    """``arm`` cuts the power at the k-th write (or fsync) of a matching path, before it is
    applied: that call fails with EIO, the disk keeps what the fsyncs before it made durable."""
    fs = power_cut_fs()
    root = fs.mount()
    fd = os.open(root / "log", os.O_CREAT | os.O_WRONLY, 0o644)
    side = os.open(root / "side", os.O_CREAT | os.O_WRONLY, 0o644)
    fs.arm(on, after=3, match="log")
    done = []
    with pytest.raises(OSError) as err:
        for i in range(10):
            os.write(side, b"s")  # never counted: its path does not match
            os.fsync(side)
            os.write(fd, b"%d" % i)
            os.fsync(fd)
            done.append(i)
    assert err.value.errno == errno.EIO
    assert done == [0, 1]  # the third write (or fsync) of "log" never happened
    report = fs.tripped()
    assert report["op"] == on and report["path"].endswith("log")
    os.close(fd)
    os.close(side)
    fs.unplug()
    root = fs.mount()
    assert (root / "log").read_bytes() == b"01"
    assert (root / "side").read_bytes() == b"sss"
