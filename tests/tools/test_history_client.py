"""The history client's sans-I/O parts: points (the /history/read framing: tests/protocol/
test_history_block.py)."""

from __future__ import annotations

import pytest

from nsqpy.client.history import (
    EARLIEST, LATEST, FramingError, check_framing, format_point, parse_point, resolve_end, TopicHistory,
)


def test_points() -> None:
    assert parse_point("earliest") == EARLIEST and parse_point(" LATEST ") == LATEST
    assert parse_point("1700000000123") == 1_700_000_000_123_000_000
    assert parse_point("2026-11-28T03:00:00Z") == 1_795_834_800 * 10**9
    assert parse_point("2026-11-28T03:00:00.5Z") == 1_795_834_800 * 10**9 + 500_000_000
    assert parse_point("2026-11-28T04:00:00.000000001+01:00") == 1_795_834_800 * 10**9 + 1
    for bad in ("yesterday", "2026-13-01T00:00:00Z", "2026-11-28 03:00", "1.5", ""):
        with pytest.raises(ValueError, match="invalid from"):
            parse_point(bad, "from")


def test_a_number_that_can_only_be_seconds_is_refused_naming_both_units() -> None:
    """Issue #43: from=1795927286 (seconds) was read as ms, January 1970: everything."""
    assert parse_point("100000000000") == 10**17  # 1973-03-03 in ms: the smallest accepted
    for text in ("1795927286", 1795927286, "99999999999"):
        with pytest.raises(ValueError) as err:
            parse_point(text, "from")
        message = str(err.value)
        assert "milliseconds, not seconds" in message and f"give {int(text) * 1000} " in message, message
    assert "2026-11-29T04:41:26Z" in _refusal("1795927286")  # what it means as seconds
    for text in ("0", "-5"):
        assert "give earliest" in _refusal(text)


def _refusal(text: str) -> str:
    with pytest.raises(ValueError) as err:
        parse_point(text, "from")
    return str(err.value)


def test_format_point_round_trips_to_the_nanosecond() -> None:
    for ns in (0, 1_795_834_800 * 10**9, 1_795_834_800 * 10**9 + 1, 1_700_000_000_123_456_789):
        assert parse_point(format_point(ns)) == ns
    assert format_point(1_795_834_800 * 10**9) == "2026-11-28T03:00:00Z"
    assert format_point(EARLIEST) == "earliest"


def test_resolve_end() -> None:
    h = TopicHistory("http://x", "t", 1, 0, 10, 20, 2, 100, ())
    assert resolve_end(h, LATEST) == 21 and resolve_end(h, EARLIEST) == 10 and resolve_end(h, 15) == 15
    empty = TopicHistory("http://x", "t", 1, 0, 0, 0, 0, 0, ())
    assert resolve_end(empty, LATEST) == 0


def test_only_the_block_framing_is_read() -> None:
    check_framing("http://h:4151", "application/vnd.nsqpy.history-blocks")
    check_framing("http://h:4151", "application/vnd.nsqpy.history-blocks; charset=binary")
    for other in ("application/octet-stream", None):  # an older nsqpy's record framing, or none
        with pytest.raises(FramingError, match=r"nsqd http://h:4151 answered /history/read with "
                                               r".*not application/vnd.nsqpy.history-blocks"):
            check_framing("http://h:4151", other)
