"""Synthetic click events, deterministic for a seed, with a known set of spammers.

Every event is a JSON object::

    {"type": "click", "event_id": "s7-123", "ts": 1767225600123, "user_id": "u0042",
     "url": "/products/17", "user_agent": "Mozilla/5.0 (Windows NT 10.0) Chrome/131.0"}

``event_id`` is assigned by the producer, so consumers can deduplicate NSQ's at-least-once
deliveries on it (better than the nsqd message id: it also survives producer retries).
``ts`` (ms) is *event time*, on a synthetic timeline of ``events_per_minute`` starting at
``start_ms``: the jobs' per-minute windows do not depend on how fast the events are published.

Interleaved ``{"type": "heartbeat", "event_id": ..., "ts": ...}`` events carry the timeline
forward when clicks stop (the last one lies past every window), so the streaming jobs'
event-time watermark moves and their final windows are emitted, as a busy real stream would
do by itself. The jobs count only clicks, after the watermark (a filter on ``type`` before the
aggregation would be pushed below the watermark by Spark's optimizer and hide the heartbeats).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterator

import orjson

URLS = ["/", "/search", "/cart", "/checkout", "/login"] + [f"/products/{i}" for i in range(1, 16)]
USER_AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/131.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) Safari/605.1",
    "Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) Mobile/15E148",
    "Mozilla/5.0 (Linux; Android 15) Chrome/131.0 Mobile",
]
BOT_AGENT = "python-requests/2.32"
MINUTE_MS = 60_000


@dataclass
class ClickStream:
    """``count`` clicks by ``users`` users; ``spammers`` of them click ``spam_factor`` times as
    often as everybody else together would suggest, during ``spam_minutes`` minutes each."""

    count: int
    seed: int = 7
    users: int = 200
    events_per_minute: int = 3000
    start_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a minute boundary
    spammers: int = 3
    spam_share: float = 0.05  # of all clicks
    heartbeat_every: int = 500
    final_heartbeat_gap_ms: int = 30 * MINUTE_MS
    spam_users: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        self.spam_users = sorted(f"u{i:04d}" for i in rng.sample(range(self.users), self.spammers))

    def ts(self, i: int) -> int:
        return self.start_ms + i * MINUTE_MS // self.events_per_minute

    def events(self) -> Iterator[dict[str, Any]]:
        """Clicks (and heartbeats) in event-time order."""
        rng = random.Random(self.seed * 1_000_003)
        normal = [f"u{i:04d}" for i in range(self.users) if f"u{i:04d}" not in self.spam_users]
        minutes = (self.ts(max(0, self.count - 1)) - self.start_ms) // MINUTE_MS + 1  # minutes with clicks
        # each spammer is active in one minute of the timeline
        active = {u: rng.randrange(minutes) for u in self.spam_users}
        last_ts = self.start_ms
        for i in range(self.count):
            ts = last_ts = self.ts(i)
            minute = (ts - self.start_ms) // MINUTE_MS
            spammers_now = [u for u, m in active.items() if m == minute]
            if spammers_now and rng.random() < self.spam_share * len(active):
                user, agent = rng.choice(spammers_now), BOT_AGENT
                url = "/login" if rng.random() < 0.5 else rng.choice(URLS)
            else:
                user, agent, url = rng.choice(normal), rng.choice(USER_AGENTS), rng.choice(URLS)
            yield {"type": "click", "event_id": f"s{self.seed}-{i}", "ts": ts, "user_id": user,
                   "url": url, "user_agent": agent}
            if self.heartbeat_every and (i + 1) % self.heartbeat_every == 0:
                yield {"type": "heartbeat", "event_id": f"hb{self.seed}-{i}", "ts": ts}
        yield {"type": "heartbeat", "event_id": f"hb{self.seed}-end", "ts": last_ts + self.final_heartbeat_gap_ms}

    def bodies(self) -> Iterator[bytes]:
        for event in self.events():
            yield orjson.dumps(event)
