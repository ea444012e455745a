"""A channel: one copy of a topic's stream, shared by the consumers subscribed to it.

Queued messages are tuples ``(id, body, timestamp_ns, attempts)``: immutable, cheap, and
untracked by the garbage collector, held in chunks (:mod:`.memqueue`) so that the collector
does not visit them one by one either. The memory queue holds up to ``--mem-queue-size`` of them;
past that, and for as long as anything waits on disk, messages go to the disk backend so the
stream stays first-in first-out and nothing on disk starves.

In-flight messages live in their consumer's ordered dict (see :mod:`nsqpy.nsqd.v2.client`), so a FIN
is one dict pop on the connection that received the message, and timeouts are found by walking
each dict from its oldest entry. As upstream, a consumer that disconnects leaves its in-flight
messages to time out (its dict is kept as an orphan until then). Deferred messages sit in one heap
per channel. Both are swept by nsqd's periodic scan, never by a timer per message.
"""

from __future__ import annotations

import heapq
import itertools
import time
from functools import partial
from typing import Any, Sequence
from itertools import repeat

from ..protocol.errors import E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED, ClientError
from ..protocol.frames import encode_error
from ..protocol.message import FRAME_HEAD_BEFORE_ID, TextRun, encode_message
from ..protocol.names import is_ephemeral
from ..common.quantile import LatencyQuantiles
from .hooks import Consumer, Host, Msg, TopicRef
from .memqueue import MessageQueue

_pack_head_before_id = FRAME_HEAD_BEFORE_ID.pack
_monotonic = time.monotonic
_time_ns = time.time_ns
_seq = itertools.count()


class Channel:
    def __init__(self, topic: TopicRef, name: str, nsqd: Host) -> None:
        self.topic = topic
        self.topic_name = topic.name
        self.name = name
        self.nsqd = nsqd
        self.ephemeral = is_ephemeral(name)
        self.mem = MessageQueue()
        self.mem_cap = nsqd.options.mem_queue_size
        self.queue_name = f"{topic.name}:{name}"
        # (with --sync-every=1 what the disk queue stages is readable once flushed: deliver then)
        self.backend = nsqd.make_backend(self.queue_name, self.ephemeral, self.dispatch)
        self.deferred: list[tuple[float, int, Msg]] = []
        self.clients: list[Consumer] = []
        # in-flight dicts of consumers that disconnected: their messages time out as upstream's do
        self.orphans: list[dict[bytes, tuple]] = []
        # due times (unix ns) of deferred messages flushed to disk at the last shutdown
        self.due_after_restart: dict[bytes, int] = (
            {} if self.ephemeral else nsqd.take_deferred_due(self.queue_name))
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        pct = nsqd.options.e2e_processing_latency_percentile
        self.e2e = (LatencyQuantiles(pct, nsqd.options.e2e_processing_latency_window_time)
                    if pct else None)
        self._rr = 0
        self._dispatch_scheduled = False
        # the lifecycle controls' knobs (see hooks.Lifecycle), upstream's behaviour until the
        # controls set them: nothing bounded, expired, dead-lettered or requeued on disconnect
        self.max_attempts = 0
        self.msg_ttl_ns = 0
        self.max_disk_bytes = 0
        self.requeue_on_disconnect = False
        # a replay of the topic's history under way (hooks.Feeder), set by history/
        self.feeder: Any = None
        nsqd.lifecycle.channel_created(self)

    # --- depth ---------------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Queued messages: memory and disk, and what a replay of the topic's history still
        has to deliver (so /stats, /metrics and readers that wait for depth see a channel
        created from the past as full, not empty)."""
        depth = self.mem.length + self.backend.depth
        if self.feeder is not None:
            depth += self.feeder.remaining()
        return depth

    @property
    def in_flight_count(self) -> int:
        return sum(len(c.in_flight) for c in self.clients) + sum(map(len, self.orphans))

    # --- putting messages in -------------------------------------------------------------------

    def put_many(self, msgs: list[Msg]) -> None:
        """Messages from the topic. Raises OSError when the disk backend fails.

        Delivery runs later in the same loop turn, not inline: the publisher's OK goes out
        first (so its next batch is on its way while we deliver), and the publishes of one
        turn are delivered together."""
        self._enqueue(msgs)
        self._queued(len(msgs))

    def takes_runs(self) -> bool:
        """Whether what comes now would wait here in memory (no consumer, paused, a backlog
        ahead of it, nothing on disk, no replay feeding it): then a text ``/mpub`` body can
        wait as a run (:meth:`put_run`), its messages made when they are taken."""
        return (self.feeder is None and not self.backend.depth and self.mem_cap > 0
                and (not self.clients or self.paused or self.mem.length > 0))

    def put_run(self, run: TextRun, count: int) -> None:
        """The ``count`` messages of a run (``protocol.message.TextRun``), queued whole: the
        caller checked :meth:`takes_runs` and the room in memory."""
        self.mem.extend_run(run, count)
        self._queued(count)

    def _queued(self, count: int) -> None:
        self.message_count += count
        if not self._dispatch_scheduled:
            self._dispatch_scheduled = True
            self.nsqd.loop.call_soon(self._scheduled_dispatch)

    def _scheduled_dispatch(self) -> None:
        self._dispatch_scheduled = False
        self.dispatch()

    def put_deferred(self, msg: Msg, due: float) -> None:
        self._defer(due, msg)
        self.message_count += 1

    def _defer(self, due: float, msg: Msg) -> None:
        heapq.heappush(self.deferred, (due, next(_seq), msg))
        self.nsqd.busy_channels.add(self)  # nsqd's scan releases it when due

    def _enqueue(self, msgs: list[Msg], refused: Any = None) -> None:
        mem = self.mem
        backend = self.backend
        space = self.mem_cap - mem.length
        if backend.depth == 0 and space >= len(msgs):
            mem.extend(msgs)
            return
        if backend.depth == 0 and space > 0:
            mem.extend(msgs[:space])
            msgs = msgs[space:]
        if self.ephemeral:
            return  # upstream drops ephemeral overflow
        try:
            backend.put_many([encode_message(*m) for m in msgs], refused)
        except OSError as err:
            self.nsqd.set_health_error(err)
            raise
        self.nsqd.set_health_ok()
        if self.max_disk_bytes:
            self.nsqd.lifecycle.trim(self)

    def requeue(self, msgs: list[Msg]) -> None:
        """Back into the queue after REQ 0, a timeout or a deferral; never loses a message."""
        try:  # (with the group commit a failure comes later, to the same rescue)
            self._enqueue(msgs, partial(self.mem.extend, msgs))
        except OSError:
            self.mem.extend(msgs)  # the disk failed: hold them in memory rather than lose them

    # --- delivery ------------------------------------------------------------------------------

    def _take(self, n: int) -> Sequence[Msg] | None:
        """Up to ``n`` queued messages; None when the queue gave nothing at all (empty or stuck)."""
        out = self.mem.take(n)
        backend = self.backend
        took = len(out)
        if len(out) < n and backend.depth:
            got = backend.get_messages(n - len(out))
            took += len(got)
            restored = self.due_after_restart
            if not restored:
                out += got
            else:
                now_ns = _time_ns()
                for msg in got:
                    due_ns = restored.pop(msg[0], 0)
                    if due_ns > now_ns:  # deferred before the restart: wait out the rest
                        self._defer(_monotonic() + (due_ns - now_ns) / 1e9, msg)
                        continue
                    out.append(msg)
        if len(out) < n and self.feeder is not None:
            fed = self.feeder.take(n - len(out))
            took += len(fed)
            if out:
                out += fed
            else:  # a replay's records as it gives them: _send unpacks them without a tuple each
                out = fed
        return out if took else None

    def dispatch(self) -> None:
        """Send queued messages to every consumer with room under its RDY."""
        clients = self.clients
        n = len(clients)
        if not n or self.paused or self.exiting or self.nsqd.holding_delivery:
            return
        if not self.mem.length and not self.backend.depth and self.feeder is None:
            return
        start = self._rr % n
        self._rr = start + 1
        for k in range(n):
            client = clients[(start + k) % n]
            if not client.writable:
                continue
            # sampling and restored deferrals can use up messages without filling the room
            while True:
                room = client.ready_count - len(client.in_flight)
                if room <= 0:
                    break
                msgs = self._take(room)
                if msgs is None:
                    return
                if self.msg_ttl_ns and msgs:
                    msgs = self.nsqd.lifecycle.drop_expired(self, msgs)
                if msgs:
                    self._send(client, msgs)

    def _send(self, client: Consumer, msgs: list[Msg]) -> None:
        now = _monotonic()
        deadline = now + client.msg_timeout
        in_flight = client.in_flight
        append = client.out.append
        rate = client.sample_rate
        if rate:  # sampled out: consumed, never delivered (upstream)
            from random import randrange  # (a deprecated feature: loaded when used)

            msgs = [m for m in msgs if randrange(100) <= rate]
        # a frame goes out as three pieces: its head before the id, the id, the body (the
        # connection joins them). Messages of one publish share the head's first part (size,
        # timestamp, attempts): it is packed again only when one of them changes.
        last_ts = last_size = last_attempts = None
        head = b""
        delivered_attempts = 0
        for mid, body, ts, attempts in msgs:
            if ts is not last_ts or attempts is not last_attempts or len(body) != last_size:
                last_ts, last_size, last_attempts = ts, len(body), attempts
                delivered_attempts = attempts + 1
                head = _pack_head_before_id(last_size + 30, 2, ts, delivered_attempts & 0xFFFF)
            append(head)
            append(mid)
            append(body)
            in_flight[mid] = (mid, body, ts, delivered_attempts, deadline, now)
        client.message_count += len(msgs)
        client.schedule_flush()

    # --- acknowledgements (called by the owning connection) ------------------------------------

    def _owner_error(self, client: Consumer, mid: bytes) -> str:
        for other in self.clients:
            if other is not client and mid in other.in_flight:
                return "client does not own message"
        for orphan in self.orphans:
            if mid in orphan:
                return "client does not own message"
        return "ID not in flight"

    def finish(self, client: Consumer, mid: bytes) -> None:
        entry = client.in_flight.pop(mid, None)
        if entry is None and client.lease is not None:
            entry = client.lease.pop(mid)  # received by another connection of the same lease
        if entry is None:
            raise ClientError(E_FIN_FAILED, f"FIN {mid.decode(errors='replace')} failed "
                              f"{self._owner_error(client, mid)}")
        client.finish_count += 1
        if self.nsqd.replicator is not None:
            self.nsqd.replicator.finished(self, mid)
        if self.e2e is not None:
            self.e2e.add(_time_ns() - entry[2])

    def finish_many(self, client: Consumer, ids: list[bytes]) -> None:
        """A run of FINs from one read (see :mod:`nsqpy.protocol.fin_run`): each id exactly as
        :meth:`finish` treats it, in order; an unknown id adds its E_FIN_FAILED frame and the
        rest go on, as separate FIN commands would."""
        # the pops run in C; the entries are looked at only when something needs them
        entries = list(map(client.in_flight.pop, ids, repeat(None)))
        if all(entries):
            done = len(entries)
        else:
            done = 0
            for mid, entry in zip(ids, entries):
                if entry is None:
                    try:
                        self.finish(client, mid)  # not in flight here: raises its error
                    except ClientError as err:
                        client.out.append(encode_error(err.payload))
                else:
                    done += 1
            entries = list(filter(None, entries))
        client.finish_count += done
        replicator = self.nsqd.replicator
        if replicator is not None:
            for entry in entries:
                replicator.finished(self, entry[0])
        e2e = self.e2e
        if e2e is not None:
            now_ns = _time_ns()
            for entry in entries:
                e2e.add(now_ns - entry[2])

    def requeue_in_flight(self, client: Consumer, mid: bytes, delay: float) -> None:
        entry = client.in_flight.pop(mid, None)
        if entry is None and client.lease is not None:
            entry = client.lease.pop(mid)
        if entry is None:
            raise ClientError(E_REQ_FAILED, f"REQ {mid.decode(errors='replace')} failed "
                              f"{self._owner_error(client, mid)}")
        client.requeue_count += 1
        self.requeue_count += 1
        msg = entry[:4]
        if self.nsqd.replicator is not None:
            self.nsqd.replicator.attempts(self, [msg])
        if self.max_attempts and not self.nsqd.lifecycle.spent(self, [msg]):
            return  # delivered max_attempts times: moved to the dead-letter topic
        if delay <= 0:
            self.requeue([msg])
        else:
            self._defer(_monotonic() + delay, msg)

    def finish_entries(self, entries: list[tuple]) -> None:
        """In-flight entries finished away from any connection (a lease's group FIN): what a
        FIN does besides the pop, for each (the replication peer is told, latency sampled)."""
        replicator = self.nsqd.replicator
        if replicator is not None:
            for entry in entries:
                replicator.finished(self, entry[0])
        e2e = self.e2e
        if e2e is not None:
            now_ns = _time_ns()
            for entry in entries:
                e2e.add(now_ns - entry[2])

    def requeue_entries(self, entries: list[tuple]) -> None:
        """In-flight entries requeued away from any connection (a lease's group requeue), as
        REQ 0 requeues one: attempts counted, dead-lettered at the channel's max attempts."""
        msgs = [entry[:4] for entry in entries]
        self.requeue_count += len(msgs)
        if self.nsqd.replicator is not None:
            self.nsqd.replicator.attempts(self, msgs)
        if self.max_attempts:
            msgs = self.nsqd.lifecycle.spent(self, msgs)
        self.requeue(msgs)
        self.dispatch()

    def touch(self, client: Consumer, mid: bytes) -> None:
        entry = client.in_flight.pop(mid, None)
        if entry is None:
            raise ClientError(E_TOUCH_FAILED, f"TOUCH {mid.decode(errors='replace')} failed "
                              f"{self._owner_error(client, mid)}")
        now = _monotonic()
        delivered = entry[5]
        deadline = min(now + client.msg_timeout, delivered + self.nsqd.options.max_msg_timeout)
        client.in_flight[mid] = entry[:4] + (deadline, delivered)  # re-inserted last: newest deadline

    # --- periodic scan -------------------------------------------------------------------------

    def scan(self, now: float) -> bool:
        """Requeue timed-out in-flight messages and release due deferred ones; True if any."""
        moved = False
        if self.orphans:
            self.orphans = [o for o in self.orphans if o]
        for in_flight in [c.in_flight for c in self.clients] + self.orphans:
            if not in_flight:
                continue
            expired = []
            for mid, entry in in_flight.items():
                if entry[4] > now:
                    break
                expired.append(mid)
            if expired:
                msgs = [in_flight.pop(mid)[:4] for mid in expired]
                self.timeout_count += len(msgs)
                if self.nsqd.replicator is not None:
                    self.nsqd.replicator.attempts(self, msgs)
                if self.max_attempts:
                    msgs = self.nsqd.lifecycle.spent(self, msgs)
                self.requeue(msgs)
                moved = True
        deferred = self.deferred
        if deferred and deferred[0][0] <= now:
            due = []
            while deferred and deferred[0][0] <= now:
                due.append(heapq.heappop(deferred)[2])
            self.requeue(due)
            moved = True
        if moved:
            self.dispatch()
        return moved

    # --- consumers -----------------------------------------------------------------------------

    def add_client(self, client: Consumer) -> None:
        self.clients.append(client)
        self.nsqd.busy_channels.add(self)  # its in-flight messages time out in nsqd's scan

    def remove_client(self, client: Consumer) -> None:
        """A consumer left; like upstream, its in-flight messages stay until they time out."""
        try:
            self.clients.remove(client)
        except ValueError:
            return
        if client.in_flight:
            # a leased connection's messages belong to its lease: they stay in flight
            if self.requeue_on_disconnect and not self.exiting and client.lease is None:
                self.nsqd.lifecycle.requeue_disconnected(self, client.in_flight)
            else:
                self.orphans.append(client.in_flight)
            client.in_flight = {}
            self.nsqd.busy_channels.add(self)
        if self.ephemeral and not self.clients and not self.exiting:
            self.topic.delete_channel(self.name)

    # --- administration ------------------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self.dispatch()

    def _stop_replay(self) -> None:
        """Emptied, closed or deleted: a replay of the topic's history under way stops too."""
        if self.feeder is not None:
            self.feeder.close()

    def empty(self) -> None:
        """Drop queued, deferred and in-flight messages; consumers stay connected."""
        self._stop_replay()
        self.mem.clear()
        self.deferred.clear()
        self._clear_orphans()
        self.due_after_restart.clear()
        for client in self.clients:
            client.in_flight.clear()
        self.backend.empty()
        if self.nsqd.replicator is not None:  # owes nothing it had before
            self.nsqd.replicator.channel_emptied(self)

    def close(self, flush: bool) -> None:
        """Stop the channel; with ``flush``, persist memory, in-flight and deferred messages."""
        self.exiting = True
        self._stop_replay()
        for client in list(self.clients):
            client.close_connection()
        if flush and not self.ephemeral:
            pending = list(self.mem)
            for in_flight in [c.in_flight for c in self.clients] + self.orphans:
                pending.extend(e[:4] for e in in_flight.values())
            # deferred messages go to disk like upstream's; with --keep-deferred-delays their
            # due times go to a file beside the queue
            now, now_ns = _monotonic(), _time_ns()
            due = dict(self.due_after_restart)
            for when, _, m in sorted(self.deferred):
                pending.append(m)
                due[m[0]] = now_ns + int((when - now) * 1e9)
            self.mem.clear()
            self.deferred.clear()
            if pending:
                try:
                    self.backend.put_many([encode_message(*m) for m in pending])
                except OSError as err:
                    self.nsqd.logger.error(
                        "channel(%s:%s): failed to flush %d messages - %s",
                        self.topic_name, self.name, len(pending), err)
            try:
                self.nsqd.save_deferred_due(self.queue_name, due)
            except OSError as err:
                self.nsqd.logger.error("channel(%s:%s): failed to save deferred due times - %s",
                                       self.topic_name, self.name, err)
        try:
            self.backend.close()
        except OSError as err:  # logged by the queue; shutdown goes on for the other queues
            self.nsqd.logger.error("channel(%s:%s): failed to close - %s", self.topic_name, self.name, err)
        self.clients.clear()

    def _clear_orphans(self) -> None:
        """Drop the orphans' messages in their dicts (a lease may still refer to one)."""
        for orphan in self.orphans:
            orphan.clear()
        self.orphans.clear()

    def delete(self) -> None:
        self.nsqd.logger.info("CHANNEL(%s): deleting", self.name)
        self.exiting = True
        self._stop_replay()
        for client in list(self.clients):
            client.in_flight.clear()
            client.close_connection()
        self.clients.clear()
        self.mem.clear()
        self.deferred.clear()
        self._clear_orphans()
        self.backend.delete()
        self.nsqd.save_deferred_due(self.queue_name, {})
