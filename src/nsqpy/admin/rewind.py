"""What a channel's rewind would replay (nsqpy; docs/nsqadmin.md, docs/history.md).

A rewind points a channel back into its topic's history: possibly millions of messages go again
to every subscriber. Before the page asks for confirmation, nsqadmin asks every nsqd of the
topic what it retains from that point (``/history/segments?from=``) and sums it here, so the
question can say how many messages and from when. Loaded with the first preview asked for: the
point syntax is the history client's (``earliest`` | ``latest`` | RFC 3339 | unix ms)."""

from __future__ import annotations

from typing import Any

from ..client.history import LATEST, Point, format_point, parse_point

__all__ = ["format_point", "parse_rewind_point", "summary"]


def parse_rewind_point(text: str) -> Point:
    """The rewind point; ValueError (with the reader's words) when nsqd would refuse it."""
    return parse_point(text, "rewind point")


def summary(point: Point, answers: list[dict[str, Any]]) -> dict[str, Any]:
    """The nsqd ``/history/segments?from=`` answers summed: ``messages`` (every message of the
    segments at or after the point, so ``exact`` is False when a segment straddles it and the
    count is an upper bound), ``from`` (the first replayed message's time, or the point when a
    segment straddles it; None when nothing would be replayed) and ``nodes``."""
    segments = [] if point == LATEST else [s for doc in answers for s in doc.get("segments") or ()]
    messages = sum(int(s.get("count") or 0) for s in segments)
    firsts = [int(s.get("first_timestamp") or 0) for s in segments]
    straddles = isinstance(point, int) and any(first < point for first in firsts)
    start = point if straddles else min(firsts, default=None)
    return {"messages": messages, "exact": not straddles,
            "from": format_point(start) if messages and start is not None else None,
            "nodes": len(answers)}
