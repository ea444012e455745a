"""nsqlookupd's registration DB: ``Registration(category, key, subkey)`` → producers by peer id.

Semantics follow upstream's ``registration_db.go``: a registration may exist with no producers
(removing the last producer keeps the key), ``"*"`` as key or subkey is a wildcard in the find
methods, and a producer is per (registration, peer), so a tombstone on ``topic:T`` belongs to that
pair only. Upstream scans the whole map for every wildcard query; we keep three indexes
((category, key), category, peer id) so ``/lookup`` and disconnects cost O(what they touch).
Single-threaded (one asyncio loop), so no locks.
"""

from __future__ import annotations

import time
from typing import Iterable, Iterator

#: (category, key, subkey): ("client", "", ""), ("topic", T, ""), ("channel", T, C)
Registration = tuple[str, str, str]

#: Go's ``time.Time{}.UnixNano()`` (an int64 overflow), what /debug shows for "never tombstoned"
GO_ZERO_TIME_UNIX_NANO = ((-62135596800 * 10**9 + 2**63) % 2**64) - 2**63


class PeerInfo:
    """One identified TCP client (an nsqd), shared by all of its producers."""

    __slots__ = ("id", "remote_address", "hostname", "broadcast_address", "tcp_port",
                 "http_port", "version", "topology_zone", "topology_region", "last_update",
                 "json")

    def __init__(self, peer_id: str, remote_address: str = "", hostname: str = "",
                 broadcast_address: str = "", tcp_port: int = 0, http_port: int = 0,
                 version: str = "", topology_zone: str = "", topology_region: str = "",
                 last_update: int = 0) -> None:
        self.id = peer_id
        self.remote_address = remote_address
        self.hostname = hostname
        self.broadcast_address = broadcast_address
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.version = version
        self.topology_zone = topology_zone
        self.topology_region = topology_region
        self.last_update = last_update  # unix ns of the last IDENTIFY/PING
        #: encoded :meth:`to_json`, cached by the HTTP layer (the fields never change after
        #: IDENTIFY, and /lookup would otherwise re-encode every producer on every request)
        self.json: bytes | None = None

    def to_json(self) -> dict:
        """Upstream's ``PeerInfo`` JSON (field order as Go's struct)."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
            **self.topology(),
        }

    def topology(self) -> dict:
        """The post-1.3.0 topology fields, only for an nsqd whose operator set one of them
        (v1.3.0's ``PeerInfo`` has none; upstream master's sends them, empty, always)."""
        if self.topology_zone or self.topology_region:
            return {"topology_zone": self.topology_zone, "topology_region": self.topology_region}
        return {}


class Producer:
    """A peer's membership in one registration, with that membership's tombstone."""

    __slots__ = ("peer", "tombstoned", "tombstoned_at")

    def __init__(self, peer: PeerInfo) -> None:
        self.peer = peer
        self.tombstoned = False
        self.tombstoned_at = 0  # unix ns; 0 means Go's zero time

    def tombstone(self, now_ns: int | None = None) -> None:
        self.tombstoned = True
        self.tombstoned_at = time.time_ns() if now_ns is None else now_ns

    def is_tombstoned(self, lifetime_ns: int, now_ns: int) -> bool:
        """The flag is never cleared; it simply stops counting after the lifetime."""
        return self.tombstoned and now_ns - self.tombstoned_at < lifetime_ns


def _match(reg: Registration, category: str, key: str, subkey: str) -> bool:
    return (reg[0] == category and (key == "*" or reg[1] == key)
            and (subkey == "*" or reg[2] == subkey))


class RegistrationDB:
    """Registrations and their producers. ``version`` changes with every change a reader could
    see (a producer added or removed, a registration added or removed, a tombstone, a PING),
    so answers computed from the DB can be reused until it moves."""

    __slots__ = ("_map", "_by_key", "_by_category", "_by_peer", "churn", "version")

    def __init__(self) -> None:
        self._map: dict[Registration, dict[str, Producer]] = {}
        # ordered sets (dicts with None values): insertion order gives stable listings
        self._by_key: dict[tuple[str, str], dict[Registration, None]] = {}
        self._by_category: dict[str, dict[Registration, None]] = {}
        self._by_peer: dict[str, dict[Registration, None]] = {}
        #: (category, "register" | "unregister") -> producer changes, for /metrics
        self.churn: dict[tuple[str, str], int] = {}
        self.version = 0

    def touch(self) -> None:
        """A producer's state changed outside the maps (tombstoned, pinged)."""
        self.version += 1

    def __len__(self) -> int:
        return len(self._map)

    def _ensure(self, k: Registration) -> dict[str, Producer]:
        producers = self._map.get(k)
        if producers is None:
            self.version += 1
            producers = self._map[k] = {}
            self._by_key.setdefault((k[0], k[1]), {})[k] = None
            self._by_category.setdefault(k[0], {})[k] = None
        return producers

    def add_registration(self, k: Registration) -> None:
        self._ensure(k)

    def add_producer(self, k: Registration, producer: Producer) -> bool:
        """True when the peer was not yet a producer of ``k`` (an existing one is kept as is)."""
        producers = self._ensure(k)
        pid = producer.peer.id
        if pid in producers:
            return False
        producers[pid] = producer
        self.version += 1
        self._by_peer.setdefault(pid, {})[k] = None
        self.churn[(k[0], "register")] = self.churn.get((k[0], "register"), 0) + 1
        return True

    def remove_producer(self, k: Registration, peer_id: str) -> tuple[bool, int]:
        """(was it there, producers left); the registration itself stays."""
        producers = self._map.get(k)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        if removed:
            self.version += 1
            self._unindex_peer(peer_id, k)
            self.churn[(k[0], "unregister")] = self.churn.get((k[0], "unregister"), 0) + 1
        return removed, len(producers)

    def _unindex_peer(self, peer_id: str, k: Registration) -> None:
        regs = self._by_peer.get(peer_id)
        if regs is not None:
            regs.pop(k, None)
            if not regs:
                del self._by_peer[peer_id]

    def remove_registration(self, k: Registration) -> None:
        producers = self._map.pop(k, None)
        if producers is None:
            return
        self.version += 1
        for pid in producers:
            self._unindex_peer(pid, k)
        ck = (k[0], k[1])
        regs = self._by_key[ck]
        del regs[k]
        if not regs:
            del self._by_key[ck]
        regs = self._by_category[k[0]]
        del regs[k]
        if not regs:
            del self._by_category[k[0]]

    def _candidates(self, category: str, key: str) -> Iterable[Registration]:
        if key == "*":
            return self._by_category.get(category, ())
        return self._by_key.get((category, key), ())

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if key != "*" and subkey != "*":
            k = (category, key, subkey)
            return [k] if k in self._map else []
        if subkey == "*":
            return list(self._candidates(category, key))
        return [k for k in self._candidates(category, key) if k[2] == subkey]

    def has_registration(self, k: Registration) -> bool:
        return k in self._map

    def producers_of(self, k: Registration) -> dict[str, Producer]:
        """The live producer map of one registration (empty if absent); do not mutate."""
        return self._map.get(k) or {}

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """Producers of the matching registrations, one per peer id (first found wins)."""
        if key != "*" and subkey != "*":
            return list(self._map.get((category, key, subkey), {}).values())
        seen: dict[str, Producer] = {}
        for k in self.find_registrations(category, key, subkey):
            for pid, producer in self._map[k].items():
                if pid not in seen:
                    seen[pid] = producer
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        return list(self._by_peer.get(peer_id, ()))

    def topic_memberships(self, peer_id: str) -> list[tuple[str, Producer]]:
        """(topic, this peer's producer in ``topic:T``) for every topic the peer is in (/nodes)."""
        m = self._map
        return [(k[1], m[k][peer_id]) for k in self._by_peer.get(peer_id, ())
                if k[0] == "topic" and k[2] == ""]

    def items(self) -> Iterator[tuple[Registration, dict[str, Producer]]]:
        return iter(self._map.items())


def keys(regs: Iterable[Registration]) -> list[str]:
    return [k[1] for k in regs]


def subkeys(regs: Iterable[Registration]) -> list[str]:
    return [k[2] for k in regs]


def next_change(producers: Iterable[Producer], inactive_timeout_ns: int,
                tombstone_lifetime_ns: int, now_ns: int) -> int:
    """When :func:`filter_active` over these producers could next answer differently with no
    change to the DB (unix ns): an active producer going silent, a tombstone expiring. A
    silent producer only comes back with a PING, which changes the DB's version."""
    soonest = 1 << 63
    oldest = now_ns - inactive_timeout_ns
    for p in producers:
        last = p.peer.last_update
        if last >= oldest and last + inactive_timeout_ns < soonest:
            soonest = last + inactive_timeout_ns
        if p.tombstoned:
            ends = p.tombstoned_at + tombstone_lifetime_ns
            if now_ns < ends < soonest:
                soonest = ends
    return soonest


def filter_active(producers: Iterable[Producer], inactive_timeout_ns: int,
                  tombstone_lifetime_ns: int, now_ns: int | None = None) -> list[Producer]:
    """Upstream's ``FilterByActive``: drop producers silent for longer than the timeout, and
    those tombstoned within the lifetime (a lifetime of 0 keeps tombstoned ones)."""
    now = time.time_ns() if now_ns is None else now_ns
    oldest = now - inactive_timeout_ns
    return [p for p in producers
            if p.peer.last_update >= oldest
            and not (p.tombstoned and now - p.tombstoned_at < tombstone_lifetime_ns)]
