"""The history room: one :class:`~.log.Log` per topic that keeps history, their periodic
fsync and expiry, and a thread for the slow file work (background fsyncs, removing segments)."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ...protocol.names import is_ephemeral, is_valid_name
from .log import SUFFIX, Log
from .options import history_on

if TYPE_CHECKING:
    from ..nsqd import NSQD

TICK = 0.25


class History:
    """``nsqd.history`` once any topic keeps history."""

    def __init__(self, nsqd: "NSQD") -> None:
        self.nsqd = nsqd
        # two threads for fsyncs, removals and indexes, and one that only makes segment files
        # ahead: a roll must find its file made, not queued behind a thousand topics' fsyncs
        self.executor = ThreadPoolExecutor(2, thread_name_prefix="history")
        self.ahead = ThreadPoolExecutor(1, thread_name_prefix="history-ahead")
        #: ``/history/read``'s preads (blocks.py): never queued behind fsyncs, and the reads of
        #: two readers (a Spark job's tasks) go on side by side
        self.readers = ThreadPoolExecutor(2, thread_name_prefix="history-read")
        nsqd.keep_task(nsqd.loop.create_task(self._tick_loop()))

    def retain(self, topic: Any, retention_ns: int, retention_bytes: int) -> None:
        if topic.ephemeral:
            return  # an ephemeral topic keeps nothing on disk, history included
        log = topic.history
        if not (retention_ns or retention_bytes):
            if log is not None:  # retention turned off for this topic: its log goes
                topic.history = None
                log.delete()
            return
        if log is None:
            opts = self.nsqd.options
            topic.history = Log(self.nsqd.data_path, topic.name, retention_ns, retention_bytes,
                                opts.sync_every, opts.sync_timeout, self.nsqd.logger, self.executor,
                                self.ahead, self.nsqd.commit)
        else:
            log.configure(retention_ns, retention_bytes)
            log.expire(time.time_ns())

    def restore_topics(self) -> None:
        """A topic is created, and its first messages appended and acknowledged, before nsqd.dat
        is written again (it is written after a create, off the event loop: docs/operations.md);
        after a kill -9 in between, nsqd.dat does not list the topic whose log holds them. With
        history on for every topic (the flags), such a topic comes back with a warning, so no
        acknowledged message is out of reach."""
        if not history_on(self.nsqd.options.values):
            return  # a per-topic setting lost with the entry: the log stays on disk, unread
        try:
            entries = list(os.scandir(self.nsqd.data_path))
        except OSError:
            return
        for entry in entries:
            name = entry.name[:-len(SUFFIX)]
            if (entry.name.endswith(SUFFIX) and entry.is_dir() and is_valid_name(name)
                    and not is_ephemeral(name) and name not in self.nsqd.topics):
                self.nsqd.logger.warning("TOPIC(%s): restored from its history log (not in nsqd.dat)",
                                         name)
                self.nsqd.get_topic(name)

    def logs(self) -> list[tuple[Any, Log]]:
        return [(t, t.history) for t in list(self.nsqd.topics.values()) if t.history is not None]

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            now = time.monotonic()
            for topic, log in self.logs():
                if not log.closed:
                    try:
                        log.tick(now)
                    except OSError as err:
                        self.nsqd.logger.error("HISTORY(%s): %s", topic.name, err)
