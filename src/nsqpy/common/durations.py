"""Go's ``time.Duration`` as text: ``time.ParseDuration`` and ``Duration.String``.

Flags, config files, log lines and JSON answers all spell durations Go's way; this module is
the one place that knows how (the flag package and the request log both stand on it).
"""

from __future__ import annotations

import re

_DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Go ``time.ParseDuration`` → seconds."""
    s = text.strip()
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Go's ``Duration.String`` for the values our defaults use (``1h0m0s``, ``250ms``, ``2s``)."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    neg = ns < 0
    ns = abs(ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                val = ns / size
                txt = f"{val:.9f}".rstrip("0").rstrip(".")
                return ("-" if neg else "") + txt + unit
    secs = ns / 1e9
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    s_txt = f"{s:.9f}".rstrip("0").rstrip(".")
    out = ""
    if h:
        out = f"{int(h)}h{int(m)}m{s_txt}s"
    elif m:
        out = f"{int(m)}m{s_txt}s"
    else:
        out = f"{s_txt}s"
    return ("-" if neg else "") + out
