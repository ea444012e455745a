"""Fixed-layout records unpacked a power-of-two block at a time: every count, any offset."""

from __future__ import annotations

import pytest

from nsqpy.protocol.repeated import RepeatedRecords

pytestmark = pytest.mark.timeout(60)


def test_every_count_gives_the_fields_in_order():
    lines = RepeatedRecords("4x16sx")
    assert lines.stride == 21
    ids = [b"%016x" % (i * 104729) for i in range(700)]
    buf = b"xx" + b"".join(b"FIN " + i + b"\n" for i in ids)
    for count in list(range(0, 70)) + [255, 256, 257, 511, 512, 513, 700]:
        out: list = [b"before"]
        lines.unpack_into(out, buf, 2, count)
        assert out == [b"before"] + ids[:count]


def test_only_power_of_two_blocks():
    with pytest.raises(ValueError):
        RepeatedRecords("16s", largest=100)
