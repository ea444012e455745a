"""nsqd's registration with nsqlookupd (reference §2.11; upstream ``nsqd/lookup.go``,
``lookup_peer.go``).

One :class:`LookupdPeers` owns one asyncio task per lookupd address. Each task connects (1 s
deadline), sends the magic and IDENTIFY, keeps the lookupd's reply (for :meth:`http_addresses`),
REGISTERs a fresh snapshot of every topic and channel, then sends queued REGISTER/UNREGISTER
commands and a PING every 15 s, expecting every reply within 1 s. Any failure closes the
connection and the task reconnects with exponential backoff; the snapshot sent on reconnect
restores the full state, so commands issued while a peer is disconnected are simply dropped.

Upstream reconnects only when the next command or PING is due, i.e. after up to 15 s; we notice a
closed connection at once (the protocol's ``connection_lost``) and retry after the backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Callable, Iterable

from ..common.addr import join_host_port, split_host_port
from ..protocol.gojson import INT, STRING, GoJSONError, decode_struct
from ..protocol.lookup import (
    DEFAULT_MAX_BODY_SIZE, MAGIC_V1, PING_COMMAND, ResponseDecoder, ResponseTooLarge,
    encode_identify, encode_register, encode_unregister, is_error_response,
)

IdentifyFn = Callable[[], dict]
RegistrationsFn = Callable[[], Iterable[tuple[str, "str | None"]]]

_DISCONNECTED, _CONNECTING, _CONNECTED = range(3)
# upstream's lookupPeer.Info (peerInfo): what nsqlookupd's IDENTIFY answer is read into
_PEER_INFO = {"tcp_port": INT, "http_port": INT, "version": STRING, "broadcast_address": STRING}
_NO_PEER_INFO = {"tcp_port": 0, "http_port": 0, "version": "", "broadcast_address": ""}


class LookupdError(Exception):
    """The lookupd replied with an error or something unparsable."""


class _Connection(asyncio.Protocol):
    """The socket of one session: decodes replies and wakes the peer task on data or close."""

    def __init__(self, max_size: int, wake: Callable[[], None]) -> None:
        self.transport: asyncio.Transport | None = None
        self._decoder = ResponseDecoder(max_size)
        self.replies: deque[bytes] = deque()
        self.error: BaseException | None = None
        self.closed = False
        self._wake = wake
        self._waiter: asyncio.Future | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.replies.extend(self._decoder.feed(data))
        except ResponseTooLarge as err:
            self.error = err
            if self.transport is not None:
                self.transport.close()
        self._notify()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.error is None:
            self.error = exc or ConnectionResetError("connection closed by nsqlookupd")
        self._notify()
        self._wake()

    def _notify(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None:
            raise self.error or ConnectionResetError("not connected")
        self.transport.write(data)

    async def read_reply(self, timeout: float) -> bytes:
        """The next reply, or raise (closed connection, oversized reply, deadline)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.replies:
            if self.closed or self.error is not None:
                raise self.error or ConnectionResetError("connection closed")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError("i/o timeout")
            self._waiter = loop.create_future()
            try:
                async with asyncio.timeout(remaining):
                    await self._waiter
            except TimeoutError:
                if self.replies:  # it came in time; a busy loop ran the deadline first
                    break
                raise TimeoutError("i/o timeout") from None
            finally:
                self._waiter = None
        return self.replies.popleft()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _Peer:
    """One lookupd address and the task that keeps us registered there."""

    def __init__(self, owner: "LookupdPeers", addr: str) -> None:
        self.owner = owner
        self.addr = addr
        self.state = _DISCONNECTED
        #: the lookupd's IDENTIFY reply (kept across reconnects, as upstream does)
        self.info: dict[str, Any] | None = None
        self.queue: deque[tuple[bytes, str]] = deque()
        self.task: asyncio.Task | None = None
        self.conn: _Connection | None = None
        self._wakeup = asyncio.Event()
        #: set once the first attempt has ended: IDENTIFY answered (``info`` known) or failed
        self.first_attempt_over = asyncio.Event()

    def __str__(self) -> str:
        return self.addr

    def enqueue(self, cmd: bytes, branch: str) -> None:
        if self.state == _DISCONNECTED:
            return  # the snapshot sent on reconnect covers it
        self.queue.append((cmd, branch))
        self._wakeup.set()

    def wake(self) -> None:
        self._wakeup.set()

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"lookupd:{self.addr}")

    async def stop(self) -> None:
        task = self.task
        self.task = None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._drop()

    def _drop(self) -> None:
        self.first_attempt_over.set()
        self.state = _DISCONNECTED
        self.queue.clear()
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    async def _run(self) -> None:
        owner = self.owner
        log = owner.logger
        backoff = owner.backoff_min
        while True:
            identified = False
            try:
                identified = await self._session()
            except asyncio.CancelledError:
                self._drop()
                raise
            except Exception as err:  # noqa: BLE001 - any failure means: reconnect later
                log.error("LOOKUPD(%s): %s", self, _describe(err))
            self._drop()
            if identified:
                backoff = owner.backoff_min
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, owner.backoff_max)

    async def _roundtrip(self, commands: list[bytes]) -> list[bytes]:
        """Write the commands in one go and read one reply per command (each within the
        deadline); an error reply means the lookupd is about to close on us."""
        conn = self.conn
        assert conn is not None
        conn.write(b"".join(commands))
        replies = []
        for _ in commands:
            reply = await conn.read_reply(self.owner.timeout)
            if is_error_response(reply):
                raise LookupdError(reply.decode("utf-8", "replace"))
            replies.append(reply)
        return replies

    async def _session(self) -> bool:
        owner = self.owner
        log = owner.logger
        loop = asyncio.get_running_loop()
        self.state = _CONNECTING
        log.info("LOOKUP connecting to %s", self.addr)
        host, port = split_host_port(self.addr)
        conn = _Connection(owner.max_body_size, self.wake)
        try:
            async with asyncio.timeout(owner.timeout):
                await loop.create_connection(lambda: conn, host, port)
        except TimeoutError:
            raise TimeoutError(f"dial tcp {self.addr}: i/o timeout") from None
        self.conn = conn
        conn.write(MAGIC_V1)

        identify = encode_identify(owner.identify())
        (reply,) = await self._roundtrip([identify])
        try:  # into the peer's info as it stands: a key the answer lacks keeps its value
            self.info = {**(self.info or _NO_PEER_INFO), **decode_struct(reply, _PEER_INFO)}
        except GoJSONError:
            raise LookupdError(f"parsing response - {reply!r}") from None
        self.first_attempt_over.set()
        i = self.info
        log.info("LOOKUPD(%s): peer info {TCPPort:%d HTTPPort:%d Version:%s BroadcastAddress:%s}",
                 self, i["tcp_port"], i["http_port"], i["version"], i["broadcast_address"])
        if not i["broadcast_address"]:
            log.error("LOOKUPD(%s): no broadcast address", self)

        # the snapshot and the queue reset happen in one synchronous step: everything queued
        # from now on is a change on top of this snapshot
        self.queue.clear()
        commands = [encode_register(topic, channel) for topic, channel in owner.registrations()]
        if log.isEnabledFor(logging.INFO):
            for cmd in commands:
                log.info("LOOKUPD(%s): %s", self, cmd[:-1].decode())
        if commands:
            await self._roundtrip(commands)
        self.state = _CONNECTED

        interval = owner.ping_interval
        next_ping = time.monotonic() + interval
        while True:
            if self.queue:
                batch = []
                while self.queue:
                    cmd, branch = self.queue.popleft()
                    if log.isEnabledFor(logging.INFO):
                        log.info("LOOKUPD(%s): %s %s", self, branch, cmd[:-1].decode())
                    batch.append(cmd)
                await self._roundtrip(batch)
            now = time.monotonic()
            if now >= next_ping:
                log.debug("LOOKUPD(%s): sending heartbeat", self)
                await self._roundtrip([PING_COMMAND])
                next_ping = now + interval
                continue
            if conn.closed:
                raise conn.error or ConnectionResetError("connection closed by nsqlookupd")
            self._wakeup.clear()
            if self.queue or conn.closed:
                continue
            try:
                async with asyncio.timeout(next_ping - now):
                    await self._wakeup.wait()
            except TimeoutError:
                pass


def _describe(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if not text or isinstance(err, OSError) else text


class LookupdPeers:
    """nsqd's connections to its nsqlookupds.

    ``identify()`` returns this nsqd's IDENTIFY fields; ``registrations()`` returns the current
    ``(topic, channel_or_None)`` pairs (a topic without channels as ``(topic, None)``).
    """

    def __init__(self, addresses: Iterable[str], identify: IdentifyFn,
                 registrations: RegistrationsFn, logger: logging.Logger, *,
                 max_body_size: int = DEFAULT_MAX_BODY_SIZE, ping_interval: float = 15.0,
                 timeout: float = 1.0, backoff_min: float = 1.0,
                 backoff_max: float = 15.0) -> None:
        self.identify = identify
        self.registrations = registrations
        self.logger = logger
        self.max_body_size = max_body_size
        self.ping_interval = ping_interval
        self.timeout = timeout
        self.backoff_min = backoff_min
        self.backoff_max = max(backoff_max, backoff_min)
        self._peers: dict[str, _Peer] = {}
        self._retired: set[asyncio.Task] = set()  # tasks of removed peers, until they end
        self._started = False
        self._closed = False
        self._pending_addresses = _dedupe(addresses)

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn one task per lookupd on the running loop (connections are made lazily there)."""
        if self._started or self._closed:
            return
        self._started = True
        addresses, self._pending_addresses = self._pending_addresses, []
        for addr in addresses:
            self._add(addr)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        peers = list(self._peers.values())
        self._peers.clear()
        for peer in peers:
            await peer.stop()
        if self._retired:
            await asyncio.gather(*self._retired, return_exceptions=True)
        if self._started:
            self.logger.info("LOOKUP: closing")

    def _add(self, addr: str) -> None:
        self.logger.info("LOOKUP(%s): adding peer", addr)
        peer = _Peer(self, addr)
        self._peers[addr] = peer
        peer.start()

    def set_addresses(self, addresses: Iterable[str]) -> None:
        """Add and remove lookupds live (``PUT /config/nsqlookupd_tcp_addresses``)."""
        wanted = _dedupe(addresses)
        if not self._started:
            self._pending_addresses = wanted
            return
        if self._closed:
            return
        for addr in list(self._peers):
            if addr not in wanted:
                self.logger.info("LOOKUP(%s): removing peer", addr)
                peer = self._peers.pop(addr)
                task, peer.task = peer.task, None
                if task is not None:
                    task.cancel()
                    self._retired.add(task)
                    task.add_done_callback(self._retired.discard)
                peer._drop()
        for addr in wanted:
            if addr not in self._peers:
                self._add(addr)

    # --- announcements --------------------------------------------------------------------------

    def register(self, topic: str, channel: str | None = None) -> None:
        cmd = encode_register(topic, channel)
        branch = "channel" if channel else "topic"
        for peer in self._peers.values():
            peer.enqueue(cmd, branch)

    def unregister(self, topic: str, channel: str | None = None) -> None:
        cmd = encode_unregister(topic, channel)
        branch = "channel" if channel else "topic"
        for peer in self._peers.values():
            peer.enqueue(cmd, branch)

    # --- queries --------------------------------------------------------------------------------

    def addresses(self) -> list[str]:
        return list(self._peers) if self._started else list(self._pending_addresses)

    def http_addresses(self) -> list[str]:
        """``broadcast_address:http_port`` of every lookupd that has answered an IDENTIFY."""
        out = []
        for peer in self._peers.values():
            info = peer.info
            if info and info["broadcast_address"]:
                out.append(join_host_port(info["broadcast_address"], info["http_port"]))
        return out

    def identifying(self) -> bool:
        """Whether a lookupd added is still on its first attempt to connect and IDENTIFY."""
        return any(not peer.first_attempt_over.is_set() for peer in self._peers.values())

    async def first_answers(self) -> None:
        """Wait until every lookupd added has answered its first IDENTIFY or failed to.

        Until then :meth:`http_addresses` does not know its HTTP port. Upstream's lookup loop
        connects a peer added by ``PUT /config/nsqlookupd_tcp_addresses`` (or at start-up)
        before it publishes the new peer list, which takes Go well under a millisecond; a topic
        created right after on a busy machine would otherwise ask no lookupd for its channels.
        Each attempt ends within its dial and read deadlines; the wait is bounded besides."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 3 * self.timeout
        for peer in list(self._peers.values()):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            try:
                async with asyncio.timeout(remaining):
                    await peer.first_attempt_over.wait()
            except TimeoutError:
                return

    def connected(self) -> list[str]:
        """Addresses of the lookupds we are currently registered with (tests, stats)."""
        return [addr for addr, peer in self._peers.items() if peer.state == _CONNECTED]


def _dedupe(addresses: Iterable[str]) -> list[str]:
    out: list[str] = []
    for addr in addresses:
        if addr and addr not in out:
            out.append(addr)
    return out
