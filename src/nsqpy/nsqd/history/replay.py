"""Channels that start in the past: a channel's replay of its topic's log (``channel.feeder``,
the core's ``hooks.Feeder``; docs/history.md §4).

The replay hands the channel retained messages only as the channel drains (``take`` is asked
for as many as its consumers have room for), a chunk of the log at a time, so a rewind of
millions of messages holds one chunk in memory whatever ``--mem-queue-size`` is. Until it has
caught up with the end of the log, live messages at or after its first replayed timestamp are
not queued on the channel (``admit``): they are in the log already, behind the replay, and
would otherwise arrive twice. Once caught up the channel is an ordinary live channel again.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Any

from .log import Cursor, Log, Records

_time_ns = time.time_ns
_seq = itertools.count()


class Replay:
    def __init__(self, channel: Any, log: Log, start_ts: int,
                 resume: dict[str, int] | None = None) -> None:
        self.channel = channel
        self.log = log
        self.start_ts = start_ts
        at = (resume["segment"], resume["offset"]) if resume else log.position(start_ts)
        self.cursor = Cursor(log, *at)
        self.chunk_at = at  # where the records not yet handed out were read from
        # records the cursor has read of the segment it is in (None: it started in the middle
        # of that segment, at a seek or a resumed position, so the count before it is unknown)
        self.seg_sid, self.seg_read = at[0], (0 if at[1] == 0 else None)
        self.pending = Records()  # records read, not yet handed out from ``self.next``
        self.next = 0
        self.caught_up = not self._fill()
        # every live message from here on is in the log at or after the first replayed one
        if resume:
            self.threshold = resume["threshold"]
        else:
            self.threshold = self.pending.tss[0] if self.pending else _time_ns()
        self.replayed = 0

    def state(self) -> dict[str, int]:
        """Where to go on after a restart (records of the current chunk may come twice)."""
        return {"start": self.start_ts, "threshold": self.threshold,
                "segment": self.chunk_at[0], "offset": self.chunk_at[1]}

    def _fill(self) -> bool:
        while True:
            self.chunk_at = (self.cursor.sid, self.cursor.offset)
            recs = self.cursor.next()
            if recs is None:
                return False
            if self.cursor.sid != self.seg_sid:  # (a chunk comes from one segment)
                self.seg_sid, self.seg_read = self.cursor.sid, len(recs)
            elif self.seg_read is not None:
                self.seg_read += len(recs)
            start = self.start_ts
            tss = recs.tss
            if tss[0] < start or tss[-1] < start:
                recs = recs.where([ts >= start for ts in tss])
            if recs:
                self.pending, self.next = recs, 0
                return True

    def remaining(self) -> int:
        """How many messages the replay still has to deliver (the channel counts them in its
        depth): the records read and not handed out, plus the log's records past the cursor,
        from the segments' counts. Exact, except in the segment where the replay started in
        the middle (a seek to a time, a resume after a restart): there the records past the
        cursor are estimated from the bytes left (at least 1 while any are left), and exact
        again from the next segment on. Records past the cursor older than the replay's start
        (only where timestamps go back in the log: adopted messages, a clock step) are counted
        until the replay skips them."""
        left = max(0, len(self.pending) - self.next)  # (0 once stopped: pending cleared)
        cursor = self.cursor
        for seg in self.log.segments:
            if seg.sid > cursor.sid:
                left += seg.count
            elif seg.sid == cursor.sid and cursor.offset < seg.size:
                if cursor.offset == 0:
                    left += seg.count
                elif self.seg_sid == seg.sid and self.seg_read is not None:
                    left += max(0, seg.count - self.seg_read)
                else:
                    left += max(1, seg.count * (seg.size - cursor.offset) // seg.size)
        return left

    def admit(self, msgs: list[tuple]) -> list[tuple]:
        """Of live messages reaching the channel, those the replay does not deliver itself."""
        threshold = self.threshold
        if msgs[0][2] >= threshold and msgs[-1][2] >= threshold:
            return []
        return [m for m in msgs if m[2] < threshold]

    def take(self, n: int) -> Records:
        """Up to ``n`` retained messages as queued messages (attempts start over), by column
        (the channel iterates them without a tuple each); DPUB records still in their delay go
        to the channel's deferred heap for the rest of it. Once the log has nothing more, the
        channel goes back to live delivery."""
        out: Records | None = None
        got = 0
        while got < n:
            if self.next >= len(self.pending) and (self.caught_up or not self._fill()):
                self.finish()
                break
            i = self.next
            chunk = self.pending.part(i, i + n - got)
            self.next = i + len(chunk)
            if chunk.delays is not None:  # (a DPUB's record: its 4th field is its delay)
                chunk = self._due(chunk)
            if out is None:
                out = chunk
            else:
                out.extend(chunk)
            got = len(out)
        if out is None:
            out = Records()
        self.channel.message_count += got
        self.replayed += got
        return out

    def _due(self, recs: Records) -> Records:
        now = _time_ns()
        channel = self.channel
        keep = []
        for mid, body, ts, delay in recs:
            due_now = not delay or ts + delay * 1_000_000 <= now
            keep.append(due_now)
            if not due_now:
                due = time.monotonic() + (ts + delay * 1_000_000 - now) / 1e9
                heapq.heappush(channel.deferred, (due, next(_seq), (mid, body, ts, 0)))
                channel.message_count += 1
        out = recs.where(keep)
        out.delays = None  # (the rest are due: queued messages, attempts 0)
        return out

    def finish(self) -> None:
        """Caught up, or stopped (rewound again, emptied, deleted): nothing to resume."""
        self.cursor.close()
        self.pending = Records()
        name = self.channel.name
        if self.log.replaying.get(name) is self:
            del self.log.replaying[name]
        self.log.saved.pop(name, None)
        if self.channel.feeder is self:
            self.channel.feeder = None

    def close(self) -> None:
        channel = self.channel
        if channel.exiting and channel.topic.channels.get(channel.name) is channel:
            # nsqd is shutting down: the replay goes on from here after the restart
            self.log.saved[channel.name] = self.state()
            self.log.replaying.pop(channel.name, None)
            self.cursor.close()
            self.pending = Records()
            return
        self.finish()


def start_replay(channel: Any, log: Log, start_ts: int) -> Replay:
    """Point ``channel`` at ``start_ts``: what it had queued (memory, disk, deferred) is
    replaced by the log from there on; messages in flight stay with their consumers."""
    if channel.feeder is not None:
        channel.feeder.close()
    channel.mem.clear()
    channel.deferred.clear()
    channel.due_after_restart.clear()
    if channel.backend.depth:
        channel.backend.empty()
    replay = Replay(channel, log, start_ts)
    _install(channel, log, replay)
    channel.dispatch()
    return replay


def resume(channel: Any) -> None:
    """A replay under way when nsqd stopped (or crashed) goes on where it was saved."""
    log = channel.topic.history
    saved = log.saved.pop(channel.name, None)
    if saved is None or channel.feeder is not None:
        return
    _install(channel, log, Replay(channel, log, saved["start"], resume=saved))


def _install(channel: Any, log: Log, replay: Replay) -> None:
    if not replay.caught_up or replay.pending:
        channel.feeder = replay
        log.replaying[channel.name] = replay
    else:
        replay.finish()
