"""nsqpy-only nsqd /stats fields that nsqadmin passes on, each only when some nsqd reports it.

nsqd adds ``dead_letter_count``/``expired_count``/``dropped_count`` to a channel (and
``dropped_count`` to a topic) only when that entity uses a lifecycle control, the ``lease_*``
keys to a channel only while it has leases, and the
``replication``/``replicas`` top-level keys only with replication on (docs/operations.md,
docs/replication.md). nsqadmin follows the same rule so that, with no feature in use, its API
JSON stays upstream v1.3.0's key for key: a count is summed over the nodes that report it and
appears in the aggregate only when at least one of them did.
"""

from __future__ import annotations

from typing import Any

LIFECYCLE_KEYS = ("dead_letter_count", "expired_count", "dropped_count")
#: a channel's consumption leases (nsqd ``--leases``, docs/leases.md): count, messages held, age
#: of the oldest in ms; summed over nodes like the counters, except the age (the largest)
LEASE_KEYS = ("lease_count", "lease_held_count", "lease_oldest_ms")
_LARGEST = frozenset({"lease_oldest_ms"})
REPLICATION_KEYS = ("replication", "replicas")


def read_history(raw: dict[str, Any]) -> dict[str, int] | None:
    """A topic's retained history on one nsqd (its ``history`` key, docs/history.md), or None
    for a topic without retention (and every topic of upstream's nsqd)."""
    h = raw.get("history")
    if not isinstance(h, dict):
        return None
    return {k: int(h.get(k) or 0) for k in ("messages", "bytes", "segments", "oldest_timestamp")}


def add_history(mine: dict[str, int] | None, theirs: dict[str, int] | None) -> dict[str, int] | None:
    """Summed over nodes; the oldest is the oldest any node retains (0: none)."""
    if theirs is None:
        return mine
    if mine is None:
        return dict(theirs)
    out = {k: mine[k] + theirs[k] for k in ("messages", "bytes", "segments")}
    olds = [t for t in (mine["oldest_timestamp"], theirs["oldest_timestamp"]) if t]
    out["oldest_timestamp"] = min(olds) if olds else 0
    return out


def read_lifecycle(raw: dict[str, Any]) -> dict[str, int]:
    """The lifecycle and lease counters one nsqd reported for a topic or channel (often none)."""
    return {k: int(raw[k]) for k in LIFECYCLE_KEYS + LEASE_KEYS if k in raw}


def add_lifecycle(mine: dict[str, int], theirs: dict[str, int]) -> None:
    """Sum ``theirs`` into ``mine`` (the oldest lease: the larger age); a key absent everywhere
    stays absent."""
    for key, value in theirs.items():
        mine[key] = max(mine.get(key, 0), value) if key in _LARGEST else mine.get(key, 0) + value


def read_replication(doc: dict[str, Any]) -> dict[str, Any]:
    """The replication keys of one nsqd's /stats document, as nsqd wrote them."""
    return {k: doc[k] for k in REPLICATION_KEYS if k in doc}
