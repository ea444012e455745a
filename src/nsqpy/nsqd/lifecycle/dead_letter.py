"""Messages that come back to a channel: max attempts with dead letters, TTL expiry, and
requeue on disconnect (issue #13). Called from Channel only when the feature is set.

Dead-lettering is a move, not a copy: the message is in flight (held only by the consumer's
in-flight dict, no longer in the channel's queue) when it comes back, and it goes to exactly one
place, the dead-letter topic's queue, in one ``Topic.put_many``. With ``--mem-queue-size=0
--sync-every=1`` that write is in the file before nsqd moves on (the group commit writes what
is not a publish at once; its fdatasync follows with the batch), so a kill -9 finds it either
still in flight (lost as upstream loses any in-flight message) or in the dead-letter topic,
never both; if the dead-letter publish fails (disk error, a full ``reject`` queue) the message
is requeued as upstream would, never dropped.

The dead letter gets a fresh id and timestamp (so a ``--msg-ttl`` on the dead-letter topic's
channels counts from the moment it was dead-lettered), attempts 0, and the body unchanged.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..channel import Channel
    from ..hooks import Msg


def dead_letter(channel: "Channel", msgs: list["Msg"]) -> bool:
    """Publish ``msgs`` to the channel's dead-letter topic; False means "requeue them"."""
    name = channel.dead_letter_topic
    nsqd = channel.nsqd
    if name is None or nsqd.exiting or not msgs:
        return False
    try:
        topic = nsqd.get_topic(name)
        ids = nsqd.id_factory.next_ids(len(msgs))
        now = time.time_ns()
        letters = [(mid, m[1], now, 0) for mid, m in zip(ids, msgs)]
        nsqd.internal_publish = True  # a drain stops publishers, not dead-lettering
        try:
            topic.put_many(letters, sum(len(m[1]) for m in msgs))
        finally:
            nsqd.internal_publish = False
    except OSError as err:
        nsqd.logger.error("channel(%s:%s): failed to dead-letter %d message(s) to %s, requeued - %s",
                          channel.topic_name, channel.name, len(msgs), name, err)
        return False
    channel.dead_letter_count += len(msgs)
    return True


def spent_ones_dead_lettered(channel: "Channel", msgs: list["Msg"]) -> list["Msg"]:
    """Dead-letter the messages delivered ``max_attempts`` times; return the rest to requeue."""
    limit = channel.max_attempts
    spent = [m for m in msgs if m[3] >= limit]
    if not spent:
        return msgs
    if not dead_letter(channel, spent):
        return msgs
    return [m for m in msgs if m[3] < limit]


def drop_expired(channel: "Channel", msgs: list["Msg"]) -> list["Msg"]:
    """``msg_ttl``: messages older than the TTL (by publish timestamp) are not delivered."""
    cutoff = time.time_ns() - channel.msg_ttl_ns
    for m in msgs:
        if m[2] < cutoff:
            break
    else:
        return msgs
    old = [m for m in msgs if m[2] < cutoff]
    channel.expired_count += len(old)
    if channel.dead_letter_explicit:
        dead_letter(channel, old)  # best effort: an expired message is not requeued
    return [m for m in msgs if m[2] >= cutoff]


def requeue_disconnected(channel: "Channel", in_flight: dict[bytes, tuple]) -> None:
    """``--requeue-on-disconnect``: the closed connection's in-flight messages, back at once.

    Only the owning connection could FIN them, and its FINs were all processed before the
    close was seen, so whatever is still here was not finished. Attempts are kept.
    """
    msgs = [entry[:4] for entry in in_flight.values()]
    in_flight.clear()
    channel.requeue_count += len(msgs)
    if channel.max_attempts:
        msgs = spent_ones_dead_lettered(channel, msgs)
    channel.requeue(msgs)
    channel.nsqd.loop.call_soon(channel.dispatch)
