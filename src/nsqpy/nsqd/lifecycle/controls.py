"""The lifecycle controls plugged into nsqd's core (``hooks.Lifecycle``), and their installation.

:func:`install` is called once by the nsqd server at start-up; from then on the core calls
:class:`Controls` when a topic or channel is made, persisted, restored or shown in ``/stats``,
and, only while one of the knobs is set, when a message expires, is spent, is requeued after a
disconnect or overflows a bounded disk queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import config
from .bounded import trim
from .dead_letter import drop_expired, requeue_disconnected, spent_ones_dead_lettered
from .drain import install_drain_signal
from .http import lifecycle_routes

if TYPE_CHECKING:
    from ..channel import Channel
    from ..hooks import Msg
    from ..nsqd import NSQD
    from ..topic import Topic


class Controls:
    """Per-topic and per-channel settings (``config``), TTL, dead letters, bounds, drain."""

    def topic_created(self, topic: "Topic") -> None:
        topic.config = {}
        topic.dropped_count = 0
        topic.disk_file_sizes = {}
        config.apply_topic(topic, channels=False)

    def channel_created(self, channel: "Channel") -> None:
        channel.config = {}
        channel.dead_letter_count = 0
        channel.expired_count = 0
        channel.dropped_count = 0
        channel.disk_file_sizes = {}
        config.apply_channel(channel)

    def trim(self, owner: "Topic | Channel") -> None:
        trim(owner)

    def drop_expired(self, channel: "Channel", msgs: list["Msg"]) -> list["Msg"]:
        return drop_expired(channel, msgs)

    def spent(self, channel: "Channel", msgs: list["Msg"]) -> list["Msg"]:
        return spent_ones_dead_lettered(channel, msgs)

    def requeue_disconnected(self, channel: "Channel", in_flight: dict[bytes, tuple]) -> None:
        requeue_disconnected(channel, in_flight)

    def persisted(self, owner: "Topic | Channel") -> dict[str, Any] | None:
        """The ``"config"`` key of the owner's nsqd.dat entry; None keeps upstream's entry."""
        return config.to_metadata(owner.config) if owner.config else None

    def restore(self, owner: "Topic | Channel", raw: Any) -> None:
        """Settings from an nsqd.dat entry (absent in files upstream wrote: nothing to do)."""
        if raw is None:
            return
        owner.config = config.from_metadata(raw, owner.nsqd.logger.warning)
        if hasattr(owner, "channels"):
            config.apply_topic(owner)
        else:
            config.apply_channel(owner)

    def topic_stats(self, topic: "Topic", stats: dict[str, Any]) -> dict[str, Any]:
        if topic.max_disk_bytes or topic.dropped_count:
            stats["dropped_count"] = topic.dropped_count
        return stats

    def channel_stats(self, channel: "Channel", stats: dict[str, Any]) -> dict[str, Any]:
        """The counters appear only for a channel that uses a control (so default output stays
        upstream's, field for field)."""
        # (the attributes read directly: this runs for every channel of every /stats)
        if (channel.max_attempts or channel.msg_ttl_ns or channel.max_disk_bytes
                or channel.dead_letter_count or channel.expired_count or channel.dropped_count):
            stats["dead_letter_count"] = channel.dead_letter_count
            stats["expired_count"] = channel.expired_count
            stats["dropped_count"] = channel.dropped_count
        return stats


def install(nsqd: "NSQD") -> None:
    """Plug the controls into ``nsqd`` (before its metadata is loaded) and add their routes."""
    nsqd.lifecycle = Controls()
    nsqd.http_routes.append(lifecycle_routes)


def install_signal(nsqd: "NSQD") -> None:
    """SIGUSR2 starts a drain, as ``POST /drain`` does (once the daemon runs)."""
    install_drain_signal(nsqd)
