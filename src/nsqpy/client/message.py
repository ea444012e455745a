"""A received message and the three answers nsqd accepts for it (FIN, REQ, TOUCH).

The answer must go back on the connection that delivered the message: nsqd only accepts FIN/REQ
from the client that owns the in-flight message. So a message keeps a reference to its
connection and answers through it.

These methods must run on the event loop's thread. From another thread (e.g. a Spark task) use
:meth:`finish_threadsafe` and friends, which hop onto the loop with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Responder(Protocol):
    """The connection that delivered a message, as the message answers through it
    (``connection.Responder`` is the one)."""

    loop: asyncio.AbstractEventLoop

    def finish(self, msg: "Message") -> None: ...

    def requeue(self, msg: "Message", delay: float | None, backoff: bool) -> None: ...

    def touch(self, msg: "Message") -> None: ...

    def touch_ids(self, ids: list[bytes]) -> None: ...


class Message:
    """One delivery of a message. ``attempts`` counts deliveries, this one included (first = 1)."""

    __slots__ = ("id", "body", "timestamp", "attempts", "conn", "responded", "auto_response")

    def __init__(
        self, msg_id: bytes, body: bytes, timestamp: int, attempts: int, conn: Responder
    ) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp  # publish time, ns since the epoch (nsqd's clock)
        self.attempts = attempts
        self.conn = conn
        self.responded = False
        self.auto_response = True

    def __repr__(self) -> str:
        return f"<Message {self.id.decode()} attempts={self.attempts} {len(self.body)}B>"

    def disable_auto_response(self) -> None:
        """Keep the consumer from answering for this message when its handler returns.

        For handlers that hand the message to someone else who will finish it later.
        """
        self.auto_response = False

    def finish(self) -> None:
        """FIN: processed, nsqd forgets it. A second answer is ignored (as go-nsq)."""
        if self.responded:
            return
        self.responded = True
        self.conn.finish(self)

    def requeue(self, delay: float | None = None, backoff: bool = True) -> None:
        """REQ: deliver again after ``delay`` seconds.

        ``delay=None`` uses the consumer's ``default_requeue_delay × attempts``, capped at
        ``max_requeue_delay`` — a message that keeps failing waits longer each time.
        ``backoff=True`` also slows the whole consumer down (the failure is probably not
        specific to this message: a database down, a quota hit).
        """
        if self.responded:
            return
        self.responded = True
        self.conn.requeue(self, delay, backoff)

    def touch(self) -> None:
        """TOUCH: reset nsqd's in-flight timeout, for handlers that need more than msg_timeout."""
        if not self.responded:
            self.conn.touch(self)

    # --- from other threads ---------------------------------------------------------------

    def finish_threadsafe(self) -> None:
        self.conn.loop.call_soon_threadsafe(self.finish)

    def requeue_threadsafe(self, delay: float | None = None, backoff: bool = True) -> None:
        self.conn.loop.call_soon_threadsafe(self.requeue, delay, backoff)

    def touch_threadsafe(self) -> None:
        self.conn.loop.call_soon_threadsafe(self.touch)


class MessageBatch:
    """The messages of one read from one connection, as columns: no object per message.

    For consumers that handle many messages at once (the Spark source builds Arrow columns
    from these lists and FINs a whole batch with one write). Answers go through the
    connection's ``*_ids`` methods, which take the ids of many messages at once.
    """

    __slots__ = ("conn", "ids", "bodies", "timestamps", "attempts", "since")

    def __init__(self, conn: Responder) -> None:
        self.conn = conn
        #: loop time of the delivery or of the last :meth:`touch`: nsqd's msg_timeout runs from it
        self.since = conn.loop.time()
        self.ids: list[bytes] = []
        self.bodies: list[bytes] = []
        self.timestamps: list[int] = []  # publish time, ns since the epoch (nsqd's clock)
        self.attempts: list[int] = []

    def __len__(self) -> int:
        return len(self.ids)

    def touch(self) -> None:
        """TOUCH every message of the batch (one write); must run on the loop's thread."""
        self.conn.touch_ids(self.ids)
        self.since = self.conn.loop.time()

    def split(self, n: int) -> MessageBatch:
        """Take the first ``n`` messages off into a new batch; this one keeps the rest."""
        head = MessageBatch(self.conn)
        head.since = self.since
        head.ids, self.ids = self.ids[:n], self.ids[n:]
        head.bodies, self.bodies = self.bodies[:n], self.bodies[n:]
        head.timestamps, self.timestamps = self.timestamps[:n], self.timestamps[n:]
        head.attempts, self.attempts = self.attempts[:n], self.attempts[n:]
        return head
