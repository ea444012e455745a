"""Runs of FINs parsed in one step: the same commands, in the same order, as line by line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol.commands import CommandParser, encode_command
from nsqpy.protocol.errors import FatalError
from nsqpy.protocol.fin_run import FIN_RUN, match_fin_run

pytestmark = pytest.mark.timeout(60)


def expand(items: list) -> list:
    """Runs turned back into the single FIN commands they stand for."""
    out = []
    for item in items:
        if not isinstance(item, FatalError) and item[0] == FIN_RUN:
            assert item[1] == [b"FIN"] and len(item[2]) >= 2
            out.extend((b"FIN", [b"FIN", mid], None) for mid in item[2])
        else:
            out.append(item)
    return out


def parse(chunks: list[bytes], fin_runs: bool) -> list:
    p = CommandParser()
    p.fin_runs = fin_runs
    out = []
    for chunk in chunks:
        out.extend(p.feed(chunk))
    return out


def test_a_run_is_one_command_with_the_ids_in_order():
    ids = [b"%016x" % i for i in range(5)]
    data = b"".join(b"FIN " + i + b"\n" for i in ids) + b"NOP\n"
    out = parse([data], True)
    assert out == [(FIN_RUN, [b"FIN"], ids), (b"NOP", [b"NOP"], None)]
    assert all(type(i) is bytes for i in out[0][2])


@pytest.mark.parametrize("count", [255, 256, 257, 600])
def test_long_runs_cross_the_unpack_blocks_in_order(count):
    ids = [b"%016x" % (i * 7919) for i in range(count)]
    data = b"".join(b"FIN " + i + b"\n" for i in ids) + b"FIN 01"
    end, item = match_fin_run(data, 0)
    assert end == count * 21 and item[2] == ids


def test_only_exact_fin_lines_join_a_run():
    assert match_fin_run(b"FIN 0123456789abcdef\n", 0) is None  # a single FIN: the line parser
    assert match_fin_run(b"FIN 0123456789abcdef\r\nFIN 0123456789abcdef\n", 0) is None
    assert match_fin_run(b"FIN 0123456789abcde\nFIN 0123456789abcdef\n", 0) is None
    assert match_fin_run(b"FIN 0123456789 bcdef\nFIN 0123456789abcdef\n", 0) is None
    end, item = match_fin_run(b"xxFIN 0123456789abcdef\nFIN fedcba9876543210\nFIN 01", 2)
    assert end == 2 + 42 and item[2] == [b"0123456789abcdef", b"fedcba9876543210"]


def test_off_by_default():
    data = b"FIN 0123456789abcdef\nFIN fedcba9876543210\n"
    assert parse([data], False) == [(b"FIN", [b"FIN", b"0123456789abcdef"], None),
                                    (b"FIN", [b"FIN", b"fedcba9876543210"], None)]


_id = st.one_of(
    st.binary(min_size=16, max_size=16),  # any bytes, spaces and CR/LF included
    st.sampled_from([b"0123456789abcdef", b"fedcba9876543210"]),
    st.binary(min_size=0, max_size=20),
)
_line = st.one_of(
    _id.map(lambda i: b"FIN " + i + b"\n"),
    _id.map(lambda i: b"FIN " + i + b"\r\n"),
    st.just(b"NOP\n"),
    st.just(b"RDY 10\n"),
    st.just(encode_command(b"PUB", "t", body=b"FIN 0123456789abcdef\nFIN 0123456789abcdef\n")),
    st.just(b"FIN\n"),
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_line, max_size=40), cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_same_commands_as_line_by_line_however_the_bytes_arrive(lines, cuts):
    data = b"".join(lines)
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    slow = parse(chunks, False)
    fast = parse(chunks, True)
    assert [repr(x) for x in expand(fast)] == [repr(x) for x in slow]
