"""The origin side of replication (``--replicate-to``): ship every publish, FIN and channel event.

Topics, channels and nsqd call the ``published``/``pumped``/``finished``/``channel_*`` hooks
synchronously; the records of one event-loop turn are joined into one batch that ``_ship``
writes at the end of the turn (one ``call_soon``, no Task per message). Each batch is answered
``OK <seq>`` by the peer once stored; with ``--replication-ack=sync`` publishers' answers wait in
``_inflight`` for that ack, so one round trip per loop turn is shared by every waiting publisher.

While the link is down the node is *degraded* (docs/replication.md §6): MSG records are not kept
(every held message is re-shipped when the link returns), and the small records (FINs, channel
events, pumps) are kept, bounded, and shipped when the link returns, after the batches that were
unacked when it dropped, followed by a SYNC of the channel map. Sync publishers then wait for the
link's return (``--replication-degraded=fail``, the default) or are answered at once (``accept``:
their message exists once, on this node); either way no longer than ``--replication-sync-timeout``
(``waiting.py``).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from typing import TYPE_CHECKING, Any

from ...client.connection import NSQConnection
from ...client.errors import NSQError
from ...client.options import ConnectionOptions
from ...common.addr import split_host_port
from ...protocol.gojson import loads
from ...common.goweb import go_json
from ...protocol.commands import MAGIC_V2
from ...protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, FrameDecoder, FrameTooLarge
from .reship import drop_adopted, reship_records
from .silence import SLACK, Silence
from .waiting import Waiter, answer_all, expire, future, oldest
from ..v2.tls import client_context
from ...protocol.replication import (
    CHAN_ADD, CHAN_DEL, RESHIP_END, enc_attempts, enc_chan, enc_fin, enc_msg_owed, enc_msgs, enc_pumped,
    enc_marker, enc_sync,
    enc_topic_del, encode_batch, encode_rsub, parse_ack,
)

if TYPE_CHECKING:
    from ..channel import Channel
    from ..nsqd import NSQD
    from ..topic import Topic

INCARNATION_FILE = "nsqd.replication.json"
RECONNECT_INTERVAL = 1.0
KEEPALIVE_INTERVAL = 1.0
ACK_TIMEOUT = 5.0  # no ack (batches unacked) or no RSUB answer for this long: peer gone
MAX_UNACKED_BYTES = 64 << 20    # async: past this much unacked, publishes are not shipped
MAX_DEGRADED_BYTES = 16 << 20   # small records kept while the link is down
RESHIP_BATCH_BYTES = 1 << 20
SYNC_WINDOW = 4  # sync mode: batches in flight before new records wait for an ack (bigger batches)


def load_incarnation(data_path: str) -> str:
    """This data directory's incarnation id, created the first time replication is used."""
    path = os.path.join(data_path, INCARNATION_FILE)
    try:
        with open(path, "rb") as f:
            inc = loads(f.read())["incarnation"]
        int(inc, 16)
        if len(inc) == 16:
            return inc
    except (OSError, ValueError, KeyError, TypeError):
        pass
    inc = secrets.token_hex(8)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(go_json({"incarnation": inc}).decode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return inc


def link_client_options(opts: Any) -> ConnectionOptions | None:
    """How the link handshakes like a V2 client; None for the plain link (magic, RSUB)."""
    if not opts.replication_tls and not opts.replication_auth_secret:
        return None
    tls = None
    if opts.replication_tls:
        # nsqd's outbound TLS (--tls-root-ca-file, --tls-min-version), --tls-cert as client cert
        tls = client_context(opts, own_certificate=True)
    return ConnectionOptions(heartbeat_interval=None, tls=tls,
                             auth_secret=opts.replication_auth_secret or None,
                             user_agent="nsqd-replication")


class _Link(asyncio.Protocol):
    """One TCP connection to the peer: RSUB, then batches out and acks in."""

    def __init__(self, rep: "Replicator", magic: bool = True) -> None:
        self.rep = rep
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(1 << 20)
        self.up = False
        self.magic = magic  # False: the V2 handshake (IDENTIFY, TLS, AUTH) already happened
        self.silence: Silence | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        rep = self.rep
        rep.pending = self
        # the peer's silence while it owes an answer, in our own running time (issue #25)
        self.silence = Silence(rep.nsqd.loop, ACK_TIMEOUT, self._silent)
        rsub = encode_rsub(rep.origin, rep.incarnation, rep.nsqd.http_port)
        transport.write(MAGIC_V2 + rsub if self.magic else rsub)  # type: ignore[attr-defined]

    def _silent(self, seconds: float) -> bool:
        """True: nothing was owed (no batch unacked), the watch goes on."""
        transport, rep = self.transport, self.rep
        if transport is None:
            return False
        if not self.up:
            rep.logger.error("REPLICATION: peer %s did not answer RSUB for %.1fs", rep.peer, seconds)
        elif rep.link is self and rep._inflight:
            rep.logger.error("REPLICATION: peer %s did not ack for %.1fs", rep.peer, seconds)
        else:
            return True
        transport.abort()
        return False

    def data_received(self, data: bytes) -> None:
        if self.silence is not None:
            self.silence.heard()
        try:
            frames = self.decoder.feed(data)
        except FrameTooLarge as err:
            self.rep.logger.error("REPLICATION: peer %s sent %s", self.rep.peer, err)
            self.transport.abort()  # type: ignore[union-attr]
            return
        top = -1
        for ftype, payload in frames:
            if ftype == FRAME_TYPE_ERROR:
                self.rep.logger.error("REPLICATION: peer %s refused: %s", self.rep.peer,
                                      payload.decode(errors="replace"))
                self.transport.close()  # type: ignore[union-attr]
                return
            if ftype != FRAME_TYPE_RESPONSE:
                continue
            if not self.up:
                if payload.startswith(b"ADOPTED "):  # the peer delivered these after failover
                    self.rep.adopted_ids.update(payload[i:i + 16]
                                                for i in range(8, len(payload) - 15, 16))
                elif payload.startswith(b"OK"):
                    self.up = True
                    self.rep._link_up(self)
                continue
            seq = parse_ack(payload)
            if seq is not None:
                top = seq
        if top >= 0:
            self.rep._acked(top)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.silence is not None:
            self.silence.cancel()
        if self.rep.pending is self:
            self.rep.pending = None
        self.rep._link_down(self, exc)


class Replicator:
    def __init__(self, nsqd: "NSQD") -> None:
        opts = nsqd.options
        self.nsqd = nsqd
        self.logger = nsqd.logger
        self.peer: str = opts.replicate_to
        self.sync = opts.replication_ack == "sync"
        # --replication-degraded=fail: never OK without the peer's copy (docs/replication.md §6)
        self.strict = self.sync and opts.replication_degraded == "fail"
        self.sync_timeout: float = opts.replication_sync_timeout
        # the same incarnation coming back (restart, healed partition): the peer may have
        # adopted some of its messages, so channels deliver nothing until the link says which
        returning = os.path.exists(os.path.join(nsqd.data_path, INCARNATION_FILE))
        self.incarnation = load_incarnation(nsqd.data_path)
        nsqd.holding_delivery = returning
        self._hold_timer: asyncio.TimerHandle | None = None
        self._client_options = link_client_options(opts)
        self.origin = ""  # broadcast address:tcp port, known once listening
        self.link: _Link | None = None
        self.pending: _Link | None = None  # connected, RSUB not answered yet
        self.state = "connecting"
        self._parts: list[bytes] = []
        self._fins: dict[tuple[str, str], list[bytes]] = {}
        self._waiters: list[Waiter] = []  # publishers of the records in _parts
        self._held: list[Waiter] = []  # strict, link down: waiting for it to return
        self._need_copy = False  # strict, link down: the publish just made waits for a copy
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_due = 0.0
        self._expiry_deferred = False
        self._ship_scheduled = False
        self._seq = 0
        self._acked_seq = 0
        # seq -> (batch bytes, its publishers), oldest first
        self._inflight: dict[int, tuple[bytes, list[Waiter]]] = {}
        self._unacked_bytes = 0
        self._resend: list[bytes] = []  # records to ship again when the link returns
        self._degraded_bytes = 0
        self._task: asyncio.Task | None = None
        self._closing = False
        self.shipped_messages = 0
        self.acked_batches = 0
        self.degraded_messages = 0
        self.failed_publishes = 0  # strict: answered E_PUB_FAILED / 503 for want of a copy
        self.accepted_single = 0  # accept: answered OK after the sync timeout, one copy
        self.events_dropped = False
        self.connects = 0
        self.adopted_ids: set[bytes] = set()
        self.skipped_adopted = 0

    # --- hooks (synchronous, from topics/channels/nsqd) -----------------------------------------

    def _add(self, record: bytes) -> None:
        if self._fins:
            self._flush_fins()
        self._parts.append(record)
        if not self._ship_scheduled:
            self._ship_scheduled = True
            self.nsqd.loop.call_soon(self._ship)

    def published(self, topic: "Topic", msgs: list[tuple], held: bool, due_ns: int = 0) -> None:
        if self.link is None and self.strict:
            self._need_copy = True  # re-shipped when the link returns; the publisher waits
            return
        if self.link is None or (not self.sync and self._unacked_bytes > MAX_UNACKED_BYTES):
            # degraded, or async with a peer this far behind: the message exists once
            self.degraded_messages += len(msgs)
            return
        if self._fins:
            self._flush_fins()
        self._parts.append(enc_msgs(topic.name, msgs, due_ns, held))
        if not self._ship_scheduled:
            self._ship_scheduled = True
            self.nsqd.loop.call_soon(self._ship)
        self.shipped_messages += len(msgs)

    def adopted(self, topic_name: str, msg: tuple, owed: frozenset[str], due_ns: int) -> None:
        """A message this node adopted from another origin straight into channels ``owed``:
        replicated onward like this node's own (in a ring, its loss is then survivable too).
        Topic-held adopted messages go through the topic and :meth:`published` instead."""
        if self.link is None:
            self.degraded_messages += 1  # in the channel's queue: re-shipped on link-up
            return
        self._add(enc_msg_owed(topic_name, msg[0], msg[2], msg[3], due_ns, owed, msg[1]))
        self.shipped_messages += 1

    def pumped(self, topic: "Topic", ids: list[bytes]) -> None:
        self._add(enc_pumped(topic.name, ids))

    def finished(self, channel: "Channel", mid: bytes) -> None:
        if channel.ephemeral:
            return
        key = (channel.topic_name, channel.name)
        ids = self._fins.get(key)
        if ids is None:
            self._fins[key] = [mid]
            if not self._ship_scheduled:
                self._ship_scheduled = True
                self.nsqd.loop.call_soon(self._ship)
        else:
            ids.append(mid)

    def attempts(self, channel: "Channel", msgs: list[tuple]) -> None:
        """Requeued (REQ/timeout) messages carry their attempts, so adoption keeps them."""
        if channel.ephemeral or self.link is None:
            return
        for m in msgs:
            self._add(enc_attempts(channel.topic_name, m[0], m[3]))

    def channel_created(self, channel: "Channel") -> None:
        if not channel.ephemeral:
            self._add(enc_chan(CHAN_ADD, channel.topic_name, channel.name))

    def channel_deleted(self, channel: "Channel") -> None:
        if not channel.ephemeral:
            self._add(enc_chan(CHAN_DEL, channel.topic_name, channel.name))

    def channel_emptied(self, channel: "Channel") -> None:
        self.channel_deleted(channel)
        self.channel_created(channel)

    def topic_deleted(self, topic: "Topic") -> None:
        if not topic.ephemeral:
            self._add(enc_topic_del(topic.name))

    def topic_emptied(self, topic: "Topic") -> None:
        if not topic.ephemeral:
            self._add(enc_topic_del(topic.name, held_only=True))

    def _must_wait(self) -> bool:
        """Sync mode: whether the publish just made waits for the peer (its records are in
        this turn's batch, or, strict with the link down, it needs the link back)."""
        if self.link is not None:
            return bool(self._parts)
        need, self._need_copy = self._need_copy, False
        return need

    def respond(self, client: Any, frame: bytes, failed: bytes = b"") -> None:
        """A TCP publisher's OK: now (async, degraded) or once the peer has the batch (sync);
        ``failed`` (the command's error frame) when there is no copy within the sync timeout
        and --replication-degraded=fail."""
        if self.sync and self._must_wait():
            self._wait((time.monotonic(), client, frame, failed))
        else:
            client.out.append(frame)

    def acked(self) -> "asyncio.Future | None":
        """For HTTP publishers: a future whose result says whether the peer stored the batch
        (False: strict, no copy within the sync timeout); None when there is nothing to wait for."""
        if not (self.sync and self._must_wait()):
            return None
        fut, waiter = future(self.nsqd.loop, time.monotonic())
        self._wait(waiter)
        return fut

    # --- the bounded wait (waiting.py) ----------------------------------------------------------

    def _wait(self, waiter: Waiter) -> None:
        (self._waiters if self.link is not None else self._held).append(waiter)
        if self._expiry is None:
            self._arm_expiry(waiter[0])

    def _groups(self) -> list[list[Waiter]]:
        return [ws for _, ws in self._inflight.values()] + [self._held, self._waiters]

    def _arm_expiry(self, since: float) -> None:
        self._expiry_due = since + self.sync_timeout
        delay = max(0.0, self._expiry_due - time.monotonic())
        self._expiry = self.nsqd.loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        now = time.monotonic()
        if now - self._expiry_due > SLACK and not self._expiry_deferred:
            # we were not running (stopped, blocked): read the acks waiting on the socket first
            self._expiry_deferred = True
            self._expiry_due = now + 0.05
            self._expiry = self.nsqd.loop.call_later(0.05, self._expire)
            return
        self._expiry_deferred = False
        groups = self._groups()
        n = expire(groups, now - self.sync_timeout, not self.strict)
        if n:
            if self.strict:
                self.failed_publishes += n
            else:
                self.accepted_single += n
            self.logger.error("REPLICATION: peer %s stored no copy within %.1fs: %d publishes %s",
                              self.peer, self.sync_timeout, n,
                              "failed" if self.strict else "answered OK with one copy")
        since = oldest(groups)
        if since is not None:
            self._arm_expiry(since)

    def waiting(self) -> tuple[int, float]:
        """Publishes waiting for the peer now, and the longest current wait in seconds."""
        groups = self._groups()
        since = oldest(groups)
        return sum(map(len, groups)), 0.0 if since is None else time.monotonic() - since

    # --- shipping ------------------------------------------------------------------------------

    def _flush_fins(self) -> None:
        fins, self._fins = self._fins, {}
        self._parts.extend(enc_fin(t, c, ids) for (t, c), ids in fins.items())

    def _ship(self) -> None:
        self._ship_scheduled = False
        if self._fins:
            self._flush_fins()
        if not self._parts:
            return
        link = self.link
        if self.sync and link is not None and len(self._inflight) >= SYNC_WINDOW:
            return  # group commit: shipped with whatever else arrives, when an ack comes
        records = b"".join(self._parts)
        self._parts = []
        waiters, self._waiters = self._waiters, []
        if link is None or link.transport is None:
            self._keep_while_down(records)
            if self.strict:
                self._held.extend(waiters)
            else:
                answer_all(waiters, True)
            return
        self._seq += 1
        batch = encode_batch(self._seq, records)
        if not self._inflight and link.silence is not None:
            link.silence.heard()  # the peer owes an answer from now on
        self._inflight[self._seq] = (batch, waiters)
        self._unacked_bytes += len(batch)
        link.transport.write(batch)

    def _keep_while_down(self, records: bytes) -> None:
        """Degraded: MSG records were never added; keep the rest for the link's return."""
        if self._degraded_bytes + len(records) > MAX_DEGRADED_BYTES:
            self.events_dropped = True  # the peer's replica may keep finished messages: dups
            return
        self._resend.append(records)
        self._degraded_bytes += len(records)

    def _acked(self, seq: int) -> None:
        if seq <= self._acked_seq:
            return
        self._acked_seq = seq
        inflight = self._inflight
        done: list[Waiter] = []
        while inflight:
            first = next(iter(inflight))
            if first > seq:
                break
            batch, waiters = inflight.pop(first)
            self._unacked_bytes -= len(batch)
            self.acked_batches += 1
            done.extend(waiters)
        answer_all(done, True)
        if (self._parts or self._fins) and not self._ship_scheduled:
            self._ship()  # what waited for room in the window

    # --- the link's life -----------------------------------------------------------------------

    def start(self) -> None:
        opts = self.nsqd.options
        self.origin = f"{opts.broadcast_address}:{opts.broadcast_tcp_port or self.nsqd.tcp_port}"
        self._task = self.nsqd.loop.create_task(self._run())
        if self.nsqd.holding_delivery:
            self._hold_timer = self.nsqd.loop.call_later(
                self.nsqd.options.replication_failover_timeout, self._release_hold, False)

    def _release_hold(self, reconciled: bool) -> None:
        """Channels deliver again: reconciled with the peer, or it stayed unreachable for
        --replication-failover-timeout (then availability wins; duplicates are possible)."""
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        if not self.nsqd.holding_delivery:
            return
        self.nsqd.holding_delivery = False
        if not reconciled:
            self.logger.warning("REPLICATION: peer %s unreachable for %.0fs; delivering without "
                                "reconciling (what it adopted may be delivered twice)", self.peer,
                                self.nsqd.options.replication_failover_timeout)
        for topic in list(self.nsqd.topics.values()):
            for channel in list(topic.channels.values()):
                channel.dispatch()

    async def _run(self) -> None:
        host, port = split_host_port(self.peer)
        while not self._closing:
            if self.link is None:
                if self.pending is None:  # one attempt at a time (a frozen peer's kernel
                    try:                  # accepts connections it does not answer)
                        await asyncio.wait_for(self._connect(host, port), ACK_TIMEOUT)
                    except (OSError, NSQError, asyncio.TimeoutError) as err:
                        if self.state != "degraded" or self.connects == 0:
                            self.logger.warning("REPLICATION: cannot reach peer %s - %s",
                                                self.peer, err)
                        self.state = "degraded"
                await asyncio.sleep(RECONNECT_INTERVAL)
                continue
            await asyncio.sleep(KEEPALIVE_INTERVAL)
            link = self.link
            if link is None or link.transport is None:
                continue
            link.transport.write(encode_batch(0, b"", acked=False))  # keep-alive

    async def _connect(self, host: str, port: int) -> None:
        """Open the link: RSUB straight after the magic, or, with --replication-tls or
        --replication-auth-secret, after a V2 client's handshake (IDENTIFY, TLS, AUTH) whose
        socket is then handed to the link."""
        loop = self.nsqd.loop
        if self._client_options is None:
            await loop.create_connection(lambda: _Link(self), host, port)
            return
        conn = NSQConnection(host, port, self._client_options)
        await conn.connect()
        if self._client_options.tls is not None and not conn.identify_response.get("tls_v1"):
            conn.abort()
            raise NSQError(f"{self.peer} did not negotiate TLS (is it started with --tls-cert?)")
        transport = conn.detach()
        link = _Link(self, magic=False)
        transport.set_protocol(link)
        link.connection_made(transport)

    def _link_up(self, link: _Link) -> None:
        """RSUB answered: resend what was unacked or kept while down, the channel map, and every
        message held in memory (the peer may have lost its copy, or missed the degraded ones)."""
        self.link = link
        if self.pending is link:
            self.pending = None
        self.state = "up"
        self.connects += 1
        self.logger.info("REPLICATION: linked to peer %s (incarnation %s)", self.peer,
                         self.incarnation)
        if self.adopted_ids:
            ids, self.adopted_ids = self.adopted_ids, set()
            n = drop_adopted(self.nsqd, ids)
            self.skipped_adopted += n
            self.logger.warning("REPLICATION: peer %s had adopted %d of our messages after a "
                                "failover; %d dropped from our queues", self.peer, len(ids), n)
        self._release_hold(True)
        if self._fins:
            self._flush_fins()
        # records of this turn not shipped yet (FINs...) go before the re-ship: a message
        # FINished while the link was down must not look lost to the peer
        resend, self._resend = self._resend + self._parts, []
        self._parts = []
        self._degraded_bytes = 0
        channels = {t.name: {c.name for c in t.channels.values() if not c.ephemeral}
                    for t in self.nsqd.topics.values() if not t.ephemeral}
        resend.append(enc_sync(channels))
        reship = reship_records(self.nsqd, self.logger)
        complete = reship[-1] == enc_marker(RESHIP_END)
        resend.extend(reship)
        chunk: list[bytes] = []
        size = 0
        for records in resend + [b""]:  # the empty sentinel flushes the last chunk
            if chunk and (not records or size + len(records) > RESHIP_BATCH_BYTES):
                self._seq += 1
                batch = encode_batch(self._seq, b"".join(chunk))
                self._inflight[self._seq] = (batch, [])
                self._unacked_bytes += len(batch)
                link.transport.write(batch)  # type: ignore[union-attr]
                chunk, size = [], 0
            chunk.append(records)
            size += len(records)
        held, self._held = self._held, []
        if held and complete:  # their messages are in the re-ship: OK once it is stored
            self._inflight[self._seq][1].extend(held)
        elif held:  # the re-ship was cut short (too big): no promise of a copy
            self.failed_publishes += len(held)
            answer_all(held, False)

    def _link_down(self, link: _Link, exc: Exception | None) -> None:
        if self.link is not link:
            if not link.up and self.link is None:  # refused before RSUB was answered
                self.state = "degraded"
            return
        self.link = None
        self.state = "degraded"
        self.logger.error("REPLICATION: link to peer %s lost (%s): degraded, publishes are held "
                          "once until it returns", self.peer, exc or "closed")
        # the unacked batches are shipped again on return; their publishers are answered now
        # (accept), or wait for the return within the sync timeout (strict)
        waiters = [w for _, ws in self._inflight.values() for w in ws] + self._waiters
        self._resend = [b[b.index(b"\n") + 5:] for b, _ in self._inflight.values()]
        self._degraded_bytes = sum(map(len, self._resend))
        self._inflight.clear()
        self._unacked_bytes = 0
        self._waiters = []
        self._parts = [p for p in self._parts if p[:1] != b"\x01"]
        if self.strict:
            self._held = waiters + self._held
        else:
            answer_all(waiters, True)

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
        if self._ship_scheduled:
            self._ship()
        link = self.link
        if link is not None and link.transport is not None:
            link.transport.close()

    def stats(self) -> dict:
        return {"peer": self.peer, "origin": self.origin, "incarnation": self.incarnation,
                "ack": "sync" if self.sync else "async", "state": self.state,
                "shipped_messages": self.shipped_messages, "acked_batches": self.acked_batches,
                "unacked_batches": len(self._inflight), "unacked_bytes": self._unacked_bytes,
                "degraded_messages": self.degraded_messages, "events_dropped": self.events_dropped,
                "skipped_adopted": self.skipped_adopted, **self.wait_stats()}

    def wait_stats(self) -> dict:
        """The publishers' side of sync mode (issue #25): the setting, the bound, who waits now
        and since when, and how many were answered without a second copy."""
        waiting, longest = self.waiting()
        return {"degraded_setting": "fail" if self.strict else "accept",
                "sync_timeout_ms": round(self.sync_timeout * 1000),
                "waiting_publishes": waiting, "longest_wait_ms": round(longest * 1000),
                "failed_publishes": self.failed_publishes,
                "accepted_single_copy": self.accepted_single}


__all__ = ["Replicator", "load_incarnation"]
