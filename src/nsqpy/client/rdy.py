"""The RDY budget of a consumer, as pure bookkeeping (no sockets, no timers, no clock).

nsqd lets a connection hold at most ``RDY`` unacknowledged messages, so the sum of RDY over all
of a consumer's connections is how many messages it may be handed at once. That sum must never
exceed ``max_in_flight``, or the consumer takes more work than it promised to handle (and more
than a ``max_in_flight`` shared with other processes via lookupd assumes). The rules follow go-nsq
(``consumer.go``) so mixed fleets behave alike:

* each connection gets ``clamp(max_in_flight // n, 1, max_in_flight)``, never more than the
  ``max_rdy_count`` its nsqd announced in IDENTIFY;
* a raise is truncated to what is left of the budget; a connection that gets nothing while at
  RDY 0 is remembered and retried on the next :meth:`RdyBudget.tick`;
* when there are more connections than ``max_in_flight`` (or in backoff with several), RDY 1
  rotates: connections idle for ``low_rdy_idle_timeout`` or holding RDY for ``low_rdy_timeout``
  give it back and random RDY-0 connections receive it.

Two deliberate departures from go-nsq: a *decrease* is always applied (go-nsq refuses any update
once the budget is over-spent, so lowering ``max_in_flight`` never shrank the connections), and
losing a connection re-evaluates the others so its share is not lost until the next reconnect.

Every method returns the ``(key, count)`` pairs the caller must send as ``RDY count``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Hashable

Send = tuple[Hashable, int]


@dataclass(slots=True)
class ConnRdy:
    """RDY state of one connection. The consumer writes ``last_msg`` on every message."""

    key: Hashable
    max_rdy: int
    last_msg: float
    rdy: int = 0
    last_rdy: float = 0.0
    retry: int = 0  # a wanted count that could not be granted (0: none)


@dataclass
class RdyBudget:
    max_in_flight: int
    low_rdy_idle_timeout: float = 10.0
    low_rdy_timeout: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    conns: dict[Hashable, ConnRdy] = field(default_factory=dict)
    total: int = 0
    need_redistribute: bool = False

    def per_conn(self) -> int:
        """The share of one connection: ``clamp(max_in_flight // n, 1, max_in_flight)``."""
        n = len(self.conns)
        mif = self.max_in_flight
        if n == 0:
            return mif
        return min(max(1, mif // n), mif)

    def add(self, key: Hashable, max_rdy: int, now: float) -> ConnRdy:
        """Track a new (subscribed) connection, at RDY 0 as nsqd starts it."""
        state = ConnRdy(key, max_rdy, now)
        self.conns[key] = state
        return state

    def remove(self, key: Hashable, now: float, in_backoff: bool) -> list[Send]:
        """Forget a closed connection and hand its share to the others."""
        state = self.conns.pop(key, None)
        if state is None:
            return []
        self.total -= state.rdy
        had_budget = state.rdy > 0 or state.retry > 0
        if had_budget and (len(self.conns) >= self.max_in_flight or in_backoff):
            self.need_redistribute = True  # RDY 1 rotation: tick() hands it on
        if in_backoff:
            return []
        return self.rebalance(now)

    def update(self, key: Hashable, count: int, now: float) -> list[Send]:
        """Set one connection's RDY as near to ``count`` as the budget allows."""
        state = self.conns.get(key)
        if state is None:
            return []
        count = wanted = max(0, min(count, state.max_rdy))
        state.retry = 0
        available = self.max_in_flight - (self.total - state.rdy)
        if count > state.rdy and count > available:  # a decrease never needs budget
            count = max(0, available)
            if count == 0 and state.rdy == 0:
                # could not leave RDY 0: retry later so this connection does not starve
                state.retry = wanted
                return []
        if count > 0:
            state.last_rdy = now
        if count == state.rdy:
            return []
        self.total += count - state.rdy
        state.rdy = count
        return [(key, count)]

    def rebalance(self, now: float) -> list[Send]:
        """Give every connection its normal share (after a connection change, or backoff ends).

        Decreases go first so the budget they free can fund the increases in the same pass.
        """
        share = self.per_conn()
        sends: list[Send] = []
        order = sorted(self.conns.values(), key=lambda s: s.rdy <= min(share, s.max_rdy))
        for state in order:
            sends += self.update(state.key, share, now)
        # still over budget (max_in_flight lowered below the number of connections): take
        # RDY 1 back from as many as needed; redistribution rotates the rest
        for state in order:
            if self.total <= self.max_in_flight:
                break
            if state.rdy:
                sends += self.update(state.key, 0, now)
        return sends

    def all_zero(self, now: float) -> list[Send]:
        """Backoff starts: stop every delivery."""
        sends: list[Send] = []
        for key in list(self.conns):
            sends += self.update(key, 0, now)
        return sends

    def probe(self, now: float) -> list[Send]:
        """Backoff timer expired: RDY 1 on one random connection to test the waters."""
        if not self.conns:
            return []
        key = self.rng.choice(list(self.conns))
        return self.update(key, 1, now)

    def set_max_in_flight(self, value: int, now: float, in_backoff: bool) -> list[Send]:
        if value < 0:
            raise ValueError("max_in_flight must be >= 0")
        self.max_in_flight = value
        if in_backoff:  # RDY stays at 0/1 until backoff ends, unless now over the new budget
            return self.all_zero(now) if self.total > value else []
        return self.rebalance(now)

    def tick(self, now: float, in_backoff: bool) -> list[Send]:
        """Periodic work (every ``rdy_redistribute_interval``): retries, then redistribution."""
        sends: list[Send] = []
        if not in_backoff:
            for state in list(self.conns.values()):
                if state.retry:
                    sends += self.update(state.key, state.retry, now)
        return sends + self.redistribute(now, in_backoff)

    def redistribute(self, now: float, in_backoff: bool) -> list[Send]:
        """Rotate RDY 1 among connections when there is not enough budget for all of them."""
        n = len(self.conns)
        if n == 0:
            return []
        if n > self.max_in_flight or (in_backoff and n > 1):
            self.need_redistribute = True
        if not self.need_redistribute:
            return []
        self.need_redistribute = False
        sends: list[Send] = []
        for state in list(self.conns.values()):
            if state.rdy > 0 and (
                now - state.last_msg > self.low_rdy_idle_timeout
                or now - state.last_rdy > self.low_rdy_timeout
            ):
                sends += self.update(state.key, 0, now)
        budget = (1 if in_backoff else self.max_in_flight) - self.total
        candidates = [s.key for s in self.conns.values() if s.rdy == 0]
        while candidates and budget > 0:
            key = candidates.pop(self.rng.randrange(len(candidates)))
            got = self.update(key, 1, now)
            if got:
                budget -= 1
                sends += got
        return sends
