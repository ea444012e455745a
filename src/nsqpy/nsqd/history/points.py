"""Points in a topic's history as the HTTP API takes them (``from``, ``to``):
``earliest`` | ``latest`` | an RFC 3339 time (fractional seconds to the nanosecond) | unix
milliseconds. A point is a timestamp in nanoseconds; ``EARLIEST``/``LATEST`` are the two ends."""

from __future__ import annotations

import calendar
import re
import time

EARLIEST = -1
LATEST = 1 << 63
#: the smallest unix-ms point (1973-03-03): a smaller number can only be unix seconds
MIN_UNIX_MS = 10**11


class SecondsNotMillis(ValueError):
    """A number below MIN_UNIX_MS: refused with both units named, rather than read as 1970 (which
    reads everything) or guessed to be seconds (which would give one number two meanings)."""

_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
                      r"(?:([Zz])|([+-])(\d\d):(\d\d))")


def parse_point(raw: str) -> int:
    """The point in ns (or EARLIEST/LATEST); ValueError when it is none of the four forms
    (SecondsNotMillis for a number that can only be unix seconds)."""
    text = raw.strip()
    if text == "earliest":
        return EARLIEST
    if text == "latest":
        return LATEST
    if text.isascii() and text.isdigit():
        if len(text) > 15:  # past the year 33658: not a time a log holds
            raise ValueError("out of range")
        ms = int(text)
        if ms < MIN_UNIX_MS:
            raise SecondsNotMillis(f"{ms} ms is before 1973: points are unix milliseconds, not "
                                   f"seconds ({ms} s is {ms * 1000} ms), RFC 3339, or earliest")
        return ms * 1_000_000
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError("not a point")
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        raise ValueError("out of range")
    secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    if m.group(9):
        offset = (int(m.group(10)) * 60 + int(m.group(11))) * 60
        secs -= offset if m.group(9) == "+" else -offset
    frac = (m.group(7) or "").ljust(9, "0")
    return secs * 1_000_000_000 + int(frac or 0)


def rfc3339(ns: int) -> str:
    """``ns`` as RFC 3339 in UTC with nanoseconds (what BEFORE_OLDEST names)."""
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"
