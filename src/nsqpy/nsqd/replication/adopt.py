"""Adoption: the peer delivers an origin's replicated messages from its own topics and channels.

Each live replicated message goes into the peer's *own* topic of the same name: into exactly the
channels that still owed it at the origin (with its attempts and remaining deferral), or into
the topic when the origin had not yet moved it to its channels. Creating those topics and channels
registers them with nsqlookupd, so stock consumers that discover producers there find them here.
If this node itself replicates, what it adopted is shipped to its own peer like its own messages,
so a ring survives the adopting node's loss too. Called by the failover (``failover.py``) and by a returning origin's
link when the origin no longer holds some messages (``peer.py``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable

from ...protocol.names import is_ephemeral

if TYPE_CHECKING:
    from ..nsqd import NSQD
    from .store import ReplicaStore


def adopt_store(nsqd: "NSQD", store: "ReplicaStore") -> int:
    """Hand every live message of ``store`` to this node's topics/channels; returns the count."""
    return adopt_messages(nsqd, store.messages())


def adopt_messages(nsqd: "NSQD", messages: Iterable[tuple]) -> int:
    """Deliver replicated messages ``(record, owed, attempts, due_ns)`` from this node."""
    now_ns, now = time.time_ns(), time.monotonic()
    per_channel: dict[tuple[str, str], list[tuple]] = {}
    onward: list[tuple[str, tuple, frozenset[str], int]] = []
    n = 0
    for rec, owed, attempts, due_ns in messages:
        msg = (rec.id, rec.body, rec.timestamp, attempts)
        n += 1
        if owed is None:  # still queued at the origin's topic: every channel gets it
            topic = nsqd.get_topic(rec.topic)
            if due_ns > now_ns:
                topic.put_deferred(msg, (due_ns - now_ns) / 1e9)
            else:
                topic.put_many([msg], len(rec.body))
            continue
        durable = frozenset(name for name in owed if not is_ephemeral(name))
        if durable:
            onward.append((rec.topic, msg, durable, due_ns if due_ns > now_ns else 0))
        for name in owed:
            if due_ns > now_ns:
                channel = nsqd.get_topic(rec.topic).get_channel(name)
                channel.put_deferred(msg, now + (due_ns - now_ns) / 1e9)
            else:
                per_channel.setdefault((rec.topic, name), []).append(msg)
    for (topic_name, name), msgs in per_channel.items():
        channel = nsqd.get_topic(topic_name).get_channel(name)
        channel.put_many(msgs)
    if nsqd.replicator is not None:  # after the channels exist, so their CHAN_ADD go first
        for topic_name, msg, owed, due in onward:
            nsqd.replicator.adopted(topic_name, msg, owed, due)
    return n
