"""The narrow hooks through which nsqd's core reaches its opt-in features.

The core (``NSQD``, ``Topic``, ``Channel``) never imports a feature. A feature that needs to act
inside a message path registers an object on the ``NSQD`` at start-up (``nsqd.lifecycle``,
``nsqd.replicator``, ``nsqd.replicas``, ``nsqd.auth``, ``nsqd.leases``, ``nsqd.history``) or
sets one on a topic or channel (``topic.history``, ``channel.feeder``) or appends to one of its lists
(``nsqd.http_routes``); the core calls it through the small protocols below, and only when the
feature is on (a plain attribute test on the hot paths). So the arrows point from the features
to the core, and a reader of the core sees here everything a feature can change.

The protocols describe; they are not base classes. ``Upstream`` is the one implementation the
core carries itself: the lifecycle of upstream v1.3.0, which is what runs when the lifecycle
controls are not installed (an NSQD built bare, in tests).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Protocol, Sequence

#: a queued message: ``(id, body, timestamp_ns, attempts)``
Msg = tuple
#: a publish command's messages by column, as its handler read them: ``(ids, bodies, sizes)``
#: (``ids`` the 16-byte ids back to back, as ``IdFactory.next_id_column`` makes them),
#: every message with the first one's timestamp (an MPUB). Handed beside the messages, so the
#: history builds its block without taking the messages apart again (``Topic.put_many``)
Columns = tuple
#: ``nsqd.topic.Topic`` and ``nsqd.channel.Channel`` where a hook takes one: this module imports
#: no other part of nsqd, so every part of it can stand on this one
TopicRef = Any
ChannelRef = Any


class PublishRefused(OSError):
    """A publish refused by a feature (a drain, a full bounded queue) rather than failed.

    TCP publishers get ``E_*PUB_FAILED`` with the error's text, as for any failed write; HTTP
    publishers get ``503`` with ``http_message`` instead of upstream's generic ``EXITING``."""

    http_message = "EXITING"


class Consumer(Protocol):
    """A subscribed connection as a channel sees it (``nsqd.v2.client.ClientV2`` is one)."""

    ready_count: int
    writable: bool
    msg_timeout: float
    sample_rate: int
    in_flight: dict[bytes, tuple]  # id -> (id, body, ts, attempts, deadline, delivered at)
    out: list[bytes]
    message_count: int
    finish_count: int
    requeue_count: int
    #: the consumption lease it reads under (``Lease``), None for every upstream client
    lease: "Lease | None"

    def schedule_flush(self) -> None: ...

    def close_connection(self) -> None: ...


class Lease(Protocol):
    """A consumption lease as a channel sees it (``nsqd.leases.lease.Lease``; docs/leases.md):
    its connections may FIN or REQ a message another connection of the lease received."""

    def pop(self, mid: bytes) -> tuple | None: ...


class Host(Protocol):
    """What topics and channels use of the daemon (``nsqd.NSQD`` is the one host)."""

    options: Any
    loop: asyncio.AbstractEventLoop
    logger: logging.Logger
    data_path: str
    lifecycle: "Lifecycle"
    replicator: "Replication | None"
    leases: Any  # nsqd.leases.registry.Leases with --leases, else None
    history: Any  # nsqd.history.room.History once a topic keeps history, else None
    #: storage.commit.GroupCommit with --sync-every=1: answers wait for the flush (``busy``)
    commit: Any
    holding_delivery: bool
    #: channels with consumers, orphaned or deferred messages: what nsqd's 100 ms scan visits
    #: (a channel adds itself when it gets such work; the scan drops it once it has none)
    busy_channels: set[Any]

    def make_backend(self, name: str, ephemeral: bool,
                     on_commit: Callable[[], None] | None = None) -> Any: ...

    def set_health_error(self, err: BaseException) -> None: ...

    def set_health_ok(self) -> None: ...

    def on_channel_created(self, topic: TopicRef, channel: ChannelRef) -> None: ...

    def on_channel_deleted(self, topic: TopicRef, channel: ChannelRef) -> None: ...

    def delete_topic(self, name: str) -> bool: ...


class Lifecycle(Protocol):
    """What the core asks of the lifecycle controls (``nsqd.lifecycle``; see ``lifecycle/``).

    Topics and channels carry the controls' effective values as plain attributes with upstream's
    defaults (``mem_cap``, ``max_attempts``, ``msg_ttl_ns``, ``max_disk_bytes``,
    ``requeue_on_disconnect``, ``topic.guard``); the methods that act on messages are called only
    when the matching attribute is set."""

    def topic_created(self, topic: TopicRef) -> None: ...

    def channel_created(self, channel: ChannelRef) -> None: ...

    def trim(self, owner: Any) -> None: ...

    def drop_expired(self, channel: ChannelRef, msgs: list[Msg]) -> list[Msg]: ...

    def spent(self, channel: ChannelRef, msgs: list[Msg]) -> list[Msg]: ...

    def requeue_disconnected(self, channel: ChannelRef, in_flight: dict[bytes, tuple]) -> None: ...

    def persisted(self, owner: Any) -> dict[str, Any] | None: ...

    def restore(self, owner: Any, raw: Any) -> None: ...

    def topic_stats(self, topic: TopicRef, stats: dict[str, Any]) -> dict[str, Any]:
        """A topic's /stats entry with the controls' counters (integers, strings, bools: no
        float, whose JSON spelling /stats does not check unless a float source is on)."""

    def channel_stats(self, channel: ChannelRef, stats: dict[str, Any]) -> dict[str, Any]:
        """A channel's /stats entry with the controls' counters (as :meth:`topic_stats`)."""


class Upstream:
    """The lifecycle of upstream v1.3.0: nothing is bounded, expired or dead-lettered."""

    def topic_created(self, topic: TopicRef) -> None:
        pass

    def channel_created(self, channel: ChannelRef) -> None:
        pass

    def trim(self, owner: Any) -> None:
        pass

    def drop_expired(self, channel: ChannelRef, msgs: list[Msg]) -> list[Msg]:
        return msgs

    def spent(self, channel: ChannelRef, msgs: list[Msg]) -> list[Msg]:
        return msgs

    def requeue_disconnected(self, channel: ChannelRef, in_flight: dict[bytes, tuple]) -> None:
        channel.orphans.append(in_flight)

    def persisted(self, owner: Any) -> dict[str, Any] | None:
        return None

    def restore(self, owner: Any, raw: Any) -> None:
        pass

    def topic_stats(self, topic: TopicRef, stats: dict[str, Any]) -> dict[str, Any]:
        return stats

    def channel_stats(self, channel: ChannelRef, stats: dict[str, Any]) -> dict[str, Any]:
        return stats


class Replication(Protocol):
    """The origin side of replication (``nsqd.replicator``, ``--replicate-to``): every event
    that changes what a peer must hold is reported here, synchronously."""

    def published(self, topic: TopicRef, msgs: list[tuple], held: bool, due_ns: int = 0) -> None: ...

    def pumped(self, topic: TopicRef, ids: list[bytes]) -> None: ...

    def finished(self, channel: ChannelRef, mid: bytes) -> None: ...

    def attempts(self, channel: ChannelRef, msgs: list[tuple]) -> None: ...

    def channel_created(self, channel: ChannelRef) -> None: ...

    def channel_deleted(self, channel: ChannelRef) -> None: ...

    def channel_emptied(self, channel: ChannelRef) -> None: ...

    def topic_deleted(self, topic: TopicRef) -> None: ...

    def topic_emptied(self, topic: TopicRef) -> None: ...

    def respond(self, client: Any, frame: bytes, failed: bytes = b"") -> None: ...

    def acked(self) -> Any: ...  # None, or an awaitable whose result False means "no copy"

    def stats(self) -> dict: ...


class History(Protocol):
    """A topic's retained log (``topic.history``; ``nsqd.history``, docs/history.md). Every
    publish the topic accepts is appended before it is fanned out; an OSError refuses the
    publish (E_*PUB_FAILED, HTTP 500) and leaves the log as it was. ``append`` returns True when
    the block is staged for nsqd's group commit (``nsqd.commit``, ``--sync-every=1``): the
    topic then fans the publish out once the batch returned, or refuses it with the batch."""

    def append(self, msgs: list[Msg], delay_ms: int = 0, columns: Columns | None = None) -> bool: ...

    def stats(self) -> dict[str, int]: ...  # the topic's "history" key in /stats

    def close(self) -> None: ...

    def delete(self) -> None: ...


class HistoryRoom(Protocol):
    """``nsqd.history``: the room that keeps the topics' logs (history/room.py)."""

    def restore_topics(self) -> None: ...  # at start-up, after nsqd.dat: topics with a log on disk


class Feeder(Protocol):
    """A channel's replay of its topic's history (``channel.feeder``; history/replay.py): the
    channel takes retained messages from it once its own queue is empty, and while it is set
    the topic hands the channel only the messages it ``admit``s (the replay delivers the
    others, which the history kept). It unsets itself once it has caught up with the log."""

    def admit(self, msgs: list[Msg]) -> list[Msg]: ...

    def take(self, n: int) -> Sequence[Msg]: ...  # sized, iterable (more than once)

    def remaining(self) -> int: ...  # still to deliver: the channel's depth includes it

    def close(self) -> None: ...


#: ``nsqd.http_routes``: each entry is called with the HTTP API object and returns its extra
#: routes (``nsqd.http.Route``), served beside upstream's.
RouteProvider = Callable[[Any], list[Any]]
