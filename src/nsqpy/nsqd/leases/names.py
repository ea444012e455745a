"""Lease names: ``<group>/<seq>`` or ``<group>/<seq>/<part>`` (docs/leases.md, "Lease names").

The group and the sequence number are what the group calls act on ("every lease of group G up to
seq N"), so a name is parsed once, when a lease is named, into its three parts.
"""

from __future__ import annotations

import re

_PART = r"[A-Za-z0-9_.\-]{1,64}"
_NAME = re.compile(rf"({_PART})/([0-9]{{1,19}})(?:/({_PART}))?")
_GROUP = re.compile(_PART)
MAX_SEQ = (1 << 63) - 1


class LeaseName(tuple):
    """``(group, seq, part)``; ``part`` is ``""`` for a two-part name."""

    __slots__ = ()

    @property
    def group(self) -> str:
        return self[0]

    @property
    def seq(self) -> int:
        return self[1]


def parse_name(text: str) -> LeaseName | None:
    """The parts of a valid lease name, or None."""
    m = _NAME.fullmatch(text)
    if m is None:
        return None
    seq = int(m.group(2))
    if seq > MAX_SEQ:
        return None
    return LeaseName((m.group(1), seq, m.group(3) or ""))


def is_valid_group(text: str) -> bool:
    return _GROUP.fullmatch(text) is not None


def parse_seq(text: str) -> int | None:
    """A sequence number as the ``upto`` argument gives it (decimal, no sign), or None."""
    if not text.isdigit() or not text.isascii() or len(text) > 19:
        return None
    value = int(text)
    return value if value <= MAX_SEQ else None
