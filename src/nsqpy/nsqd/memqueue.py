"""The in-memory queue of a topic or channel: a FIFO of message tuples kept in chunks.

Why not a plain ``deque`` of messages: CPython's collector traverses a deque element by
element whenever the deque's generation is collected, even when every element is an untracked
tuple, and a long-lived deque of a million messages is met by every full collection (and by
the young passes it travels through while it grows): 6-8 ms pauses at 1M queued (issue #42).
A tuple whose elements are all untracked is itself untracked by the next collection that sees
it, so messages sealed into tuple *chunks* cost the collector one visit per chunk, and a
chunk costs nothing once untracked.

A chunk is sealed only once the collector has untracked the messages in it: sealed any
earlier, the first young pass that met it would still see it holding tracked messages (the pass
untracks them after looking at the chunk), keep it tracked, and a later, larger pass would walk
every message of every such chunk again (10-20 ms middle-generation passes at 1M queued). So new
messages gather in a plain list, ``_tail``, and at least :data:`CHUNK` of them become a tuple
at the first append after a young pass has untracked them (the newest of them untracked means
the pass saw them all: every message tuple is made untracked by the first pass after its creation).
Reads take from the oldest chunk by slicing, keeping an offset into it, so a chunk's messages
are released together once the last of them is taken.

A *run* (:func:`~nsqpy.protocol.message.text_run_messages`: a text ``/mpub`` body as it came,
its block of ids and its timestamp, three atomic values) can stand in the chunks for the
messages it holds: a topic with nowhere to send them keeps an ``/mpub`` that way, a third of
the objects and half the memory, and the messages are made when they are taken (or iterated).
A run is told from a chunk by its first item, bytes rather than a message tuple.
"""

from __future__ import annotations

import gc
from collections import deque
from typing import Iterator, Sequence

from ..protocol.message import TextRun, text_run_messages

#: the fewest messages sealed into a chunk (the collector visits one object per chunk)
CHUNK = 256
_is_tracked = gc.is_tracked


class MessageQueue:
    """FIFO of message tuples: ``extend`` at the back, ``take(n)`` from the front.

    ``length`` is ``len()`` as a plain attribute: the publish and delivery paths read it once
    or twice per command, where a Python-level ``__len__``/``__bool__`` call costs more than
    the rest of the test."""

    __slots__ = ("_head", "_pos", "_chunks", "_tail", "length")

    def __init__(self) -> None:
        self._head: Sequence[tuple] = ()  # the oldest chunk being read, from _pos on
        self._pos = 0
        # sealed chunks (and runs) after the head, oldest first
        self._chunks: deque[Sequence] = deque()
        self._tail: list[tuple] = []  # the newest messages, until they are sealed
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return self.length > 0

    def __iter__(self) -> Iterator[tuple]:
        """Every queued message, oldest first (for a flush at shutdown, peek, replication)."""
        head = self._head
        for i in range(self._pos, len(head)):
            yield head[i]
        for chunk in self._chunks:
            yield from text_run_messages(*chunk) if type(chunk[0]) is bytes else chunk
        yield from self._tail

    def extend(self, msgs: Sequence[tuple]) -> None:
        tail = self._tail
        if len(tail) >= CHUNK and not _is_tracked(tail[-1]):  # (what was there before these)
            self._chunks.append(tuple(tail))
            self._tail = tail = []
        tail += msgs
        self.length += len(msgs)

    def extend_run(self, run: TextRun, count: int) -> None:
        """Append the ``count`` messages of ``run``, kept whole until they are taken."""
        tail = self._tail
        if tail:  # (queued before the run: a chunk of their own, sealed when the rule allows)
            self._chunks.append(tuple(tail) if not _is_tracked(tail[-1]) else tail)
            self._tail = []
        self._chunks.append(run)
        self.length += count

    def take(self, n: int) -> list[tuple]:
        """Up to ``n`` messages from the front, oldest first."""
        head, pos = self._head, self._pos
        left = len(head) - pos
        if left >= n:  # the common case: one slice of the head chunk
            out = list(head[pos:pos + n])
            self._pos = pos + n
            self.length -= len(out)
            return out
        out = list(head[pos:])
        chunks = self._chunks
        while True:
            want = n - len(out)
            if chunks:
                head = chunks.popleft()
                if type(head[0]) is bytes:
                    head = text_run_messages(*head)
            elif self._tail:
                head, self._tail = self._tail, []
            else:
                self._head, self._pos = (), 0
                break
            if len(head) > want:
                out += head[:want]
                self._head, self._pos = head, want
                break
            out += head
            if len(out) == n:
                self._head, self._pos = (), 0
                break
        self.length -= len(out)
        return out

    def clear(self) -> None:
        self._head, self._pos = (), 0
        self._chunks.clear()
        self._tail = []
        self.length = 0
