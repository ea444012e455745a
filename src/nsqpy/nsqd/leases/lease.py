"""One lease: the connections reading under a name and the in-flight messages it holds.

A lease owns no message table of its own. Every connection that SUBs under it keeps receiving
into its own in-flight dict (``client.in_flight``, the core's table, so timeouts, ``/stats``,
peek, shutdown and replication see leased messages as the in-flight messages they are); the
lease keeps a reference to each of those dicts, also after the connection closed and the core
moved the dict to the channel's orphans. What the lease holds is the union of those dicts.

Entries are the core's: ``(id, body, timestamp, attempts, deadline, delivered_at)``. Within a dict
they are in delivery order, since a TOUCH on a lease renews its entries in place (the core's
per-message TOUCH re-inserts, which would reorder them); across dicts ``delivered_at`` orders
them. That order is what a replay reproduces.
"""

from __future__ import annotations

import time
from itertools import chain
from typing import TYPE_CHECKING, Any, Iterator

from ...protocol.message import FRAME_HEAD_BEFORE_ID
from .names import LeaseName

if TYPE_CHECKING:
    from ..channel import Channel

_pack_head_before_id = FRAME_HEAD_BEFORE_ID.pack
_monotonic = time.monotonic


def _delivered_at(entry: tuple) -> float:
    return entry[5]


class Lease:
    __slots__ = ("name", "parts", "timeout", "channel", "clients", "tables", "closed", "created",
                 "closed_at", "replayed")

    def __init__(self, name: str, parts: LeaseName, timeout: float) -> None:
        self.name = name
        self.parts = parts
        self.timeout = timeout  # seconds: msg_timeout of every connection under the lease
        self.channel: Channel | None = None  # bound by the first SUB
        self.clients: list[Any] = []  # live connections (ClientV2)
        self.tables: list[dict[bytes, tuple]] = []  # in-flight dicts of every connection it had
        self.closed = False  # its last connection closed (or it was taken over): replay only
        self.created = _monotonic()
        self.closed_at = 0.0
        self.replayed: set[int] = set()  # ids of connections that already got the replay

    # --- what it holds ----------------------------------------------------------------------

    @property
    def held(self) -> int:
        return sum(map(len, self.tables))

    def entries(self) -> Iterator[tuple]:
        return chain.from_iterable(t.values() for t in self.tables)

    def pop(self, mid: bytes) -> tuple | None:
        """Take message ``mid`` out of whichever connection of the lease holds it (a FIN or REQ
        on another connection of the same lease)."""
        for table in self.tables:
            entry = table.pop(mid, None)
            if entry is not None:
                return entry
        return None

    def holds(self, mid: bytes) -> bool:
        return any(mid in table for table in self.tables)

    def take_all(self) -> list[tuple]:
        """Every entry, removed from the tables (the group FIN and requeue)."""
        out = list(self.entries())
        for table in self.tables:
            table.clear()
        return out

    def renew(self, max_msg_timeout: float) -> int:
        """TOUCH on the lease: every held message's deadline moves to ``now + timeout``, capped at
        ``--max-msg-timeout`` after its delivery. In place, so the delivery order stays; the
        deadlines stay ascending in each table because the cap grows with the delivery time."""
        now = _monotonic()
        renewed = now + self.timeout
        for table in self.tables:
            for mid, e in list(table.items()):
                table[mid] = (e[0], e[1], e[2], e[3], min(renewed, e[5] + max_msg_timeout), e[5])
        return self.held

    def drop_empty_tables(self) -> None:
        """Forget the dicts of closed connections that hold nothing any more."""
        live = {id(c.in_flight) for c in self.clients}
        self.tables = [t for t in self.tables if t or id(t) in live]

    # --- replay ------------------------------------------------------------------------------

    def replay(self, client: Any) -> int:
        """Send ``client`` every message the lease holds elsewhere, in delivery order, moving
        them into its own in-flight dict (attempts, timestamp and deadline unchanged: a replay
        is the same delivery again, not a new attempt)."""
        own = client.in_flight
        others = [t for t in self.tables if t is not own]
        entries = sorted(chain.from_iterable(t.values() for t in others), key=_delivered_at)
        for table in others:
            table.clear()
        append = client.out.append
        for entry in entries:
            mid, body = entry[0], entry[1]
            append(_pack_head_before_id(len(body) + 30, 2, entry[2], entry[3] & 0xFFFF))
            append(mid)
            append(body)
            own[mid] = entry
        client.message_count += len(entries)
        self.replayed.add(client.id)
        self.drop_empty_tables()
        if entries:
            client.schedule_flush()
        return len(entries)

    # --- description -------------------------------------------------------------------------

    def describe(self, now: float) -> dict[str, Any]:
        channel = self.channel
        return {
            "name": self.name,
            "topic": channel.topic_name if channel is not None else "",
            "channel": channel.name if channel is not None else "",
            "state": "closed" if self.closed else "open",
            "connections": len(self.clients),
            "held": self.held,
            "age_ms": int((now - self.created) * 1000),
            "msg_timeout": int(self.timeout * 1000),
        }
