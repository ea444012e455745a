"""A disk queue's last record torn by a crash (a kill -9 inside a write, a power loss that left
the file longer than its data) is cut in place at start-up: no ``.bad`` file, every whole record
before it is delivered, the next write lands after them (fault matrix row 1)."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from nsqpy.nsqd.diskqueue import DiskQueue

pytestmark = pytest.mark.timeout(60)
LOG = logging.getLogger("test.diskqueue.torn")


def msg(i: int, size: int = 60) -> bytes:
    return b"%026d" % i + b"y" * (size - 26)


def open_q(path: Path) -> DiskQueue:
    return DiskQueue("t", str(path), 1 << 20, 26, 1050, 1000, 2.0, LOG)


def data_file(path: Path, num: int = 0) -> Path:
    return path / f"t.diskqueue.{num:06d}.dat"


@pytest.mark.parametrize("tear", [
    struct.pack(">i", 60) + b"z" * 30,   # a record's write stopped half-way (kill -9)
    b"\0" * 4096,                          # the file grew, its data never came (power loss)
    struct.pack(">i", 60)[:3],             # the length itself cut short
], ids=["half-record", "zero-filled", "half-length"])
def test_a_torn_last_record_is_cut_in_place(tmp_path: Path, tear: bytes, caplog) -> None:
    q = open_q(tmp_path)
    q.put_many([msg(i) for i in range(10)])
    q.close()  # metadata: 10 records
    with open(data_file(tmp_path), "ab") as f:  # after the metadata: 5 more, then the tear
        for i in range(10, 15):
            f.write(struct.pack(">i", 60) + msg(i))
        whole = f.tell()
        f.write(tear)
    with caplog.at_level(logging.WARNING):
        q = open_q(tmp_path)
    assert "cutting a torn tail of %d bytes at offset %d" % (len(tear), whole) in caplog.text
    assert data_file(tmp_path).stat().st_size == whole
    assert q.depth == 15
    q.put(msg(15))
    assert q.get_many(100) == [msg(i) for i in range(16)]
    assert not list(tmp_path.glob("*.bad"))
    q.close()


def test_without_metadata_the_last_file_is_cut_the_others_read(tmp_path: Path) -> None:
    records = b"".join(struct.pack(">i", 60) + msg(i) for i in range(3))
    data_file(tmp_path, 4).write_bytes(records)
    data_file(tmp_path, 5).write_bytes(records + struct.pack(">i", 60) + b"torn")
    q = open_q(tmp_path)
    assert q.depth == 6
    assert data_file(tmp_path, 5).stat().st_size == len(records)
    assert q.get_many(10) == [msg(i) for i in range(3)] * 2
    assert not list(tmp_path.glob("*.bad"))
    q.close()
