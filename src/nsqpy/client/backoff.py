"""Backoff arithmetic, without timers or I/O (the caller schedules what these return).

Two different things back off:

* a whole *consumer* when its handler fails (:class:`ConsumerBackoff`): go-nsq's
  ``startStopContinueBackoff`` state machine, so a fleet of nsqpy and go-nsq consumers slow down
  and recover the same way;
* a *connection attempt* after a refused or dropped connection (:class:`ReconnectBackoff`), so a
  restarting nsqd is not hammered by every client at once.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field


def exponential(level: int, multiplier: float) -> float:
    """go-nsq ``ExponentialStrategy``: ``multiplier × 2^level`` seconds."""
    return multiplier * (2.0**level)


def full_jitter(level: int, multiplier: float, rng: random.Random) -> float:
    """go-nsq ``FullJitterStrategy``: uniform in ``[0, multiplier × 2^level)``.

    Spreads many consumers that failed at the same moment so they do not all retry together.
    """
    return rng.random() * multiplier * (2.0**level)


class Signal(enum.Enum):
    """What a message outcome means for the consumer's pace (go-nsq's backoff signals)."""

    SUCCESS = "success"  # FIN: one step towards full speed
    FAILURE = "failure"  # REQ with backoff: one step slower
    CONTINUE = "continue"  # REQ without backoff: neither


class Step(enum.Enum):
    """What the consumer must do after a signal."""

    NONE = 0  # nothing changes
    BACKOFF = 1  # RDY 0 everywhere, wait ``duration``, then RDY 1 on one connection
    RESUME = 2  # backoff is over: normal RDY on every connection


@dataclass
class ConsumerBackoff:
    """The backoff level of one consumer.

    While a backoff timer runs (``in_timeout``) every signal is ignored: messages that were
    already in flight when trouble started must not push the level to the maximum (or back to
    zero) on their own; one result per backoff window counts, as in go-nsq.
    """

    multiplier: float = 1.0
    max_duration: float = 120.0
    strategy: str = "exponential"
    rng: random.Random = field(default_factory=random.Random)
    level: int = 0
    in_timeout: bool = False
    last_duration: float = 0.0

    def __post_init__(self) -> None:
        if self.strategy not in ("exponential", "full_jitter"):
            raise ValueError(f"unknown backoff strategy {self.strategy!r}")

    def duration(self, level: int) -> float:
        if self.strategy == "full_jitter":
            return full_jitter(level, self.multiplier, self.rng)
        return exponential(level, self.multiplier)

    @property
    def active(self) -> bool:
        """True while the consumer runs below full speed (level > 0 or a timer pending)."""
        return self.level > 0 or self.in_timeout

    def signal(self, sig: Signal) -> Step:
        """Apply one message outcome; returns what the consumer must do now."""
        if self.in_timeout:
            return Step.NONE
        updated = False
        if sig is Signal.SUCCESS:
            if self.level > 0:
                self.level -= 1
                updated = True
        elif sig is Signal.FAILURE:
            # the level only grows while its duration still fits under the cap, so recovery
            # from a long outage takes at most as many successes as it took to reach the cap
            if self.max_duration > 0 and exponential(self.level + 1, self.multiplier) <= self.max_duration:
                self.level += 1
                updated = True
        if self.level == 0:
            return Step.RESUME if updated else Step.NONE
        # level > 0: start or continue backing off, even on CONTINUE (go-nsq does the same)
        self.last_duration = min(self.duration(self.level), self.max_duration)
        self.in_timeout = True
        return Step.BACKOFF

    def timeout_expired(self) -> None:
        """The backoff timer fired: the next result (of the RDY 1 probe) counts again."""
        self.in_timeout = False


@dataclass
class ReconnectBackoff:
    """Delays between connection attempts: ``initial × 2^n`` capped, with ±``jitter`` spread."""

    initial: float = 1.0
    maximum: float = 60.0
    jitter: float = 0.25
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0

    def next_delay(self) -> float:
        base = min(self.initial * (2.0**self.attempts), self.maximum)
        self.attempts += 1
        if self.jitter:
            base *= 1.0 + self.jitter * (2.0 * self.rng.random() - 1.0)
        return max(0.0, base)

    def reset(self) -> None:
        self.attempts = 0
