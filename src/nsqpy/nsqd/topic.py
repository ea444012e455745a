"""A topic: fans every published message out to each of its channels.

Fan-out to the channels' queues is synchronous when channels exist and the topic is not paused
(each channel then delivers later in the same loop turn). Otherwise messages queue at
the topic (memory up to ``--mem-queue-size``, then disk) and a pump moves them to the channels in
bounded batches once there is somewhere to go, so a large backlog never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any, Callable

from ..protocol.message import TextRun, encode_message, text_run_messages
from ..protocol.names import is_ephemeral
from ..common.quantile import merged_result
from .channel import Channel
from .hooks import Columns, Host, Msg
from .memqueue import MessageQueue

PUMP_BATCH = 1000
_monotonic = time.monotonic


class Topic:
    def __init__(self, name: str, nsqd: Host) -> None:
        self.name = name
        self.nsqd = nsqd
        self.ephemeral = is_ephemeral(name)
        self.channels: dict[str, Channel] = {}
        # queued items are Msg tuples, or (id, body, ts, attempts, due) for deferred publishes
        self.mem = MessageQueue()
        self.mem_cap = nsqd.options.mem_queue_size
        self.backend = nsqd.make_backend(name, self.ephemeral, self._schedule_pump)
        self.paused = False
        self.exiting = False
        # False while channels known to lookupd are being pre-created: messages wait at the topic
        self.ready = True
        # futures of publishers whose answer waits for that (upstream's GetTopic blocks on it)
        self._ready_waiters: list[asyncio.Future] = []
        self.due_after_restart: dict[bytes, int] = (
            {} if self.ephemeral else nsqd.take_deferred_due(name))
        self.message_count = 0
        self.message_bytes = 0
        self._pump_scheduled = False
        # the lifecycle controls' knobs (see hooks.Lifecycle), upstream's behaviour until set:
        # ``guard`` runs before every publish when a drain or a rejecting bound needs it
        self.guard: Callable[[Topic], None] | None = None
        self.max_disk_bytes = 0
        # the retained log (hooks.History) when the topic keeps history, set by history/
        self.history: Any = None
        nsqd.lifecycle.topic_created(self)

    @property
    def depth(self) -> int:
        return self.mem.length + self.backend.depth

    def _flowing(self) -> bool:
        return self.ready and bool(self.channels) and not self.paused

    # --- publishing ----------------------------------------------------------------------------

    def put_many(self, msgs: list[Msg], nbytes: int, columns: Columns | None = None) -> None:
        """Publish; raises OSError when a disk write fails (the publisher gets E_*PUB_FAILED).
        With the history's append staged for the group commit (``--sync-every=1``) the rest
        waits for its flush: nothing of a publish the disk refuses is delivered. ``columns``:
        the same messages by column (``hooks.Columns``), when the caller has them, for the
        history's block."""
        if self.guard is not None:
            self.guard(self)  # a drain, a full bounded queue: raises PublishRefused
        if (self.history is not None and self._keep(msgs, 0, columns) and self._holds()
                and not self._stages_only()):
            self.nsqd.commit.then(partial(self._kept, self._fan_out, msgs, nbytes), answer=False)
            return
        self._fan_out(msgs, nbytes)

    def takes_runs(self) -> bool:
        """Whether a publish now would wait in memory, here (no channel yet, paused, a
        backlog ahead of it) or in every channel (:meth:`Channel.takes_runs`), with nothing
        else to hand each message to (history, replication): then a text ``/mpub`` body can
        wait as a run (:meth:`put_run`)."""
        if (self.history is not None or self.nsqd.replicator is not None or self.backend.depth
                or not self.mem_cap):
            return False
        if self._flowing() and not self.mem.length:
            return all(c.takes_runs() for c in self.channels.values())
        return True

    def put_run(self, run: TextRun, count: int, nbytes: int) -> None:
        """Publish the ``count`` messages of a text ``/mpub`` body (``protocol.message.TextRun``).
        Where it would wait in memory (:meth:`takes_runs`, and room for it), the run is queued
        whole, here or in each channel (one object shared), and its messages are made when
        they are taken: a waiting ``/mpub`` costs one object and its body's bytes, not three
        objects a message. Otherwise its messages are made now and published as any others."""
        flowing = self._flowing() and not self.mem.length
        if not self.takes_runs() or (not flowing and self.mem_cap - self.mem.length < count):
            self.put_many(text_run_messages(*run), nbytes)
            return
        if self.guard is not None:
            self.guard(self)
        if flowing:
            msgs = None  # made once for the channels without room for the run, if any
            for channel in self.channels.values():
                if channel.mem_cap - channel.mem.length >= count:
                    channel.put_run(run, count)
                else:
                    if msgs is None:
                        msgs = text_run_messages(*run)
                    channel.put_many(msgs)
        else:
            self.mem.extend_run(run, count)
            self._schedule_pump()
        self.message_count += count
        self.message_bytes += nbytes

    def _holds(self) -> bool:
        """Whether a fan-out the history staged waits for its flush: a publish's does (nothing
        of a publish the disk refuses is delivered); a message nsqd held already (a dead
        letter, an adoption), whose block is in the file now, goes on at once, so that a kill
        -9 cannot leave it in neither its old place nor the channels'."""
        return self.nsqd.commit.publishing

    def _stages_only(self) -> bool:
        """Whether a fan-out now would only stage disk-queue writes (``--mem-queue-size=0``
        here and in every channel, no replay, no replication): those join the history's batch,
        readable with it or refused with it, so the fan-out need not wait for its flush."""
        return (self.mem_cap == 0 and self.nsqd.replicator is None and (not self.channels or all(
            c.mem_cap == 0 and c.feeder is None and not c.ephemeral for c in self.channels.values())))

    def _kept(self, fan_out: Callable[..., None], *args: Any) -> None:
        """The group commit's outcome for a publish the history held (its last argument)."""
        if args[-1] is None and not self.exiting:
            fan_out(*args[:-1])

    def _fan_out(self, msgs: list[Msg], nbytes: int) -> None:
        held = not (self._flowing() and not self.mem.length and not self.backend.depth)
        if not held:
            for channel in self.channels.values():
                # a channel replaying the history gets from it what the history kept
                channel.put_many(msgs if channel.feeder is None else channel.feeder.admit(msgs))
        else:
            self._enqueue(msgs)
            self._schedule_pump()
        if self.nsqd.replicator is not None and not self.ephemeral:
            self.nsqd.replicator.published(self, msgs, held)
        self.message_count += len(msgs)
        self.message_bytes += nbytes

    def put_deferred(self, msg: Msg, delay: float) -> None:
        if self.guard is not None:
            self.guard(self)
        if self.history is not None and self._keep([msg], int(delay * 1000)) and self._holds():
            self.nsqd.commit.then(partial(self._kept, self._defer_out, msg, delay), answer=False)
            return
        self._defer_out(msg, delay)

    def _defer_out(self, msg: Msg, delay: float) -> None:
        due = _monotonic() + delay
        held = not (self._flowing() and not self.mem.length and not self.backend.depth)
        if not held:
            for channel in self.channels.values():
                if channel.feeder is None or channel.feeder.admit([msg]):
                    channel.put_deferred(msg, due)
        else:
            self._enqueue([msg + (due,)])
            self._schedule_pump()
        if self.nsqd.replicator is not None and not self.ephemeral:
            self.nsqd.replicator.published(self, [msg], held, time.time_ns() + int(delay * 1e9))
        self.message_count += 1
        self.message_bytes += len(msg[1])

    def _keep(self, msgs: list[Msg], delay_ms: int, columns: Columns | None = None) -> bool:
        """Into the history first: a publish it cannot keep is refused, not delivered. True
        when the append waits for the group commit (its outcome reaches nsqd's health there)."""
        try:
            staged = self.history.append(msgs, delay_ms, columns)
        except OSError as err:
            self.nsqd.set_health_error(err)
            raise
        if not staged and self.nsqd.health_error is not None:
            self.nsqd.set_health_ok()
        return staged

    def _enqueue(self, items: list[tuple]) -> None:
        mem = self.mem
        space = self.mem_cap - mem.length
        if self.backend.depth == 0 and space >= len(items):
            mem.extend(items)
            return
        if self.backend.depth == 0 and space > 0:
            mem.extend(items[:space])
            items = items[space:]
        if self.ephemeral:
            return
        if len(items) == 1 and len(items[0]) == 4:  # one publish (PUB, HTTP /pub)
            write: Any = self.backend.put
            records: Any = encode_message(*items[0])
        else:
            now, now_ns = _monotonic(), time.time_ns()
            for it in items:
                if len(it) == 5:
                    # the disk record has no room for a due time: remember it beside the queue
                    # (upstream drops the delay here, its issue #1375)
                    self.due_after_restart[it[0]] = now_ns + int((it[4] - now) * 1e9)
            write, records = self.backend.put_many, [encode_message(*it[:4]) for it in items]
        try:
            write(records)
        except OSError as err:
            self.nsqd.set_health_error(err)
            raise
        self.nsqd.set_health_ok()
        if self.max_disk_bytes:
            self.nsqd.lifecycle.trim(self)

    # --- the pump ------------------------------------------------------------------------------

    def _schedule_pump(self) -> None:
        # (records staged for the group commit are not readable yet: it calls this once they are)
        if not self._pump_scheduled and self._flowing() and (
                self.mem or self.backend.depth > self.backend.pending):
            self._pump_scheduled = True
            self.nsqd.loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Move one batch of the topic's backlog to its channels, then yield to the loop."""
        self._pump_scheduled = False
        if self.exiting or not self._flowing():
            return
        batch = self.mem.take(PUMP_BATCH)
        if len(batch) < PUMP_BATCH and self.backend.depth:
            restored = self.due_after_restart
            got = self.backend.get_messages(PUMP_BATCH - len(batch))
            if not restored:
                batch += got
            else:
                for msg in got:
                    due_ns = restored.pop(msg[0], 0)
                    if due_ns:  # deferred before the restart: keep the rest of the delay
                        due = _monotonic() + max(0.0, (due_ns - time.time_ns()) / 1e9)
                        batch.append(msg + (due,))
                    else:
                        batch.append(msg)
        # deferred publishes (5-tuples) are rare: one C-level scan finds whether any are here
        deferred = [it for it in batch if len(it) == 5] if 5 in map(len, batch) else []
        plain = [it for it in batch if len(it) == 4] if deferred else batch
        for channel in list(self.channels.values()):
            try:
                if plain:
                    channel.put_many(plain if channel.feeder is None else channel.feeder.admit(plain))
            except OSError as err:
                self.nsqd.logger.error("topic(%s): failed to put to channel(%s) - %s",
                                       self.name, channel.name, err)
            for it in deferred:
                if channel.feeder is None or channel.feeder.admit([it[:4]]):
                    channel.put_deferred(it[:4], it[4])
        if self.nsqd.replicator is not None and batch and not self.ephemeral:
            self.nsqd.replicator.pumped(self, [it[0] for it in batch])
        self._schedule_pump()

    # --- channels ------------------------------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        """The channel, created (and announced to lookupd) if new."""
        channel = self.channels.get(name)
        if channel is None:
            channel = Channel(self, name, self.nsqd)
            self.channels[name] = channel
            self.nsqd.logger.info("TOPIC(%s): new channel(%s)", self.name, name)
            self.nsqd.on_channel_created(self, channel)
            self._schedule_pump()
        return channel

    def delete_channel(self, name: str) -> bool:
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        self.nsqd.logger.info("TOPIC(%s): deleting channel %s", self.name, name)
        channel.delete()
        self.nsqd.on_channel_deleted(self, channel)
        if self.ephemeral and not self.channels:
            self.nsqd.delete_topic(self.name)
        return True

    # --- administration ------------------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self._schedule_pump()

    def start(self) -> None:
        """Let messages flow to channels (after lookupd's channels were pre-created)."""
        self.ready = True
        self._wake_ready()
        self._schedule_pump()

    def wait_ready(self) -> "asyncio.Future[None]":
        """Done once :meth:`start` ran (or the topic goes away): a publish that created the
        topic is answered then, as upstream answers it after its blocking lookupd query."""
        fut = self.nsqd.loop.create_future()
        if self.ready or self.exiting:
            fut.set_result(None)
        else:
            self._ready_waiters.append(fut)
        return fut

    def _wake_ready(self) -> None:
        waiters, self._ready_waiters = self._ready_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def empty(self) -> None:
        self.mem.clear()
        self.backend.empty()
        if self.nsqd.replicator is not None:  # its topic-held messages are gone
            self.nsqd.replicator.topic_emptied(self)

    def e2e_result(self) -> dict:
        streams = [c.e2e for c in self.channels.values() if c.e2e is not None]
        return merged_result(streams, self.nsqd.options.e2e_processing_latency_percentile)

    def close(self, flush: bool) -> None:
        self.exiting = True
        self._wake_ready()
        for channel in self.channels.values():
            channel.close(flush)
        if flush and not self.ephemeral:
            now, now_ns = _monotonic(), time.time_ns()
            due = dict(self.due_after_restart)
            for it in self.mem:
                if len(it) == 5:
                    due[it[0]] = now_ns + int((it[4] - now) * 1e9)
            if self.mem:
                try:
                    self.backend.put_many([encode_message(*it[:4]) for it in self.mem])
                except OSError as err:
                    self.nsqd.logger.error("topic(%s): failed to flush %d messages - %s",
                                           self.name, len(self.mem), err)
                self.mem.clear()
            try:
                self.nsqd.save_deferred_due(self.name, due)
            except OSError as err:
                self.nsqd.logger.error("topic(%s): failed to save deferred due times - %s",
                                       self.name, err)
        try:
            self.backend.close()
        except OSError as err:
            self.nsqd.logger.error("topic(%s): failed to close - %s", self.name, err)
        if self.history is not None:
            self.history.close()

    def delete(self) -> None:
        self.exiting = True
        self._wake_ready()
        for channel in list(self.channels.values()):
            channel.delete()
        self.channels.clear()
        self.mem.clear()
        self.backend.delete()
        self.nsqd.save_deferred_due(self.name, {})
        if self.history is not None:
            self.history.delete()
            self.history = None


