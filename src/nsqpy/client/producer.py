"""Publishing over persistent, pipelined connections to one or more nsqd.

Each publish is one command written to a connection plus one future that nsqd's in-order answer
resolves, so a thousand concurrent ``await producer.pub(...)`` share one connection and a
handful of syscalls, with no Task per publish. Several nsqd addresses are used round-robin; each
has a keeper Task that (re)connects with exponential backoff, so one nsqd restarting only
removes it from the rotation for a while.

Failure semantics: an error frame raises :class:`NSQErrorResponse` (``err.code`` is the
``E_*`` code). If the connection dies while a publish waits, it raises
:class:`ConnectionClosedError` — the message may or may not have been accepted, the caller
decides whether to risk a duplicate. The one safe case is retried automatically: commands
pipelined behind one that failed fatally were never executed by nsqd (``unprocessed``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable, Sequence

from nsqpy.protocol.frames import OK

from .addr import parse_address
from .backoff import ReconnectBackoff
from .connection import NSQConnection, _as_bytes, encode_dpub, encode_mpub_b, encode_pub, name_bytes
from .errors import ClosedError, ConnectionClosedError, NotConnectedError, NSQError, NSQErrorResponse
from .options import ConnectionOptions

log = logging.getLogger("nsqpy.client")

Body = bytes | bytearray | memoryview | str


class Producer:
    """Publish to nsqd. Use as ``async with Producer("127.0.0.1:4150") as p: await p.pub(t, b)``.

    ``reconnect_interval`` is the first delay before reconnecting after a failure; it doubles up
    to ``max_reconnect_interval``. ``retries`` bounds the automatic re-sending of unprocessed
    commands. Other keyword arguments are :class:`ConnectionOptions` (``snappy=True``,
    ``heartbeat_interval=...``, ``connect_timeout=...``).
    """

    def __init__(
        self,
        nsqd_tcp_addresses: str | Iterable[str] = "127.0.0.1:4150",
        *,
        reconnect_interval: float = 1.0,
        max_reconnect_interval: float = 60.0,
        retries: int = 3,
        options: ConnectionOptions | None = None,
        **option_kwargs: Any,
    ) -> None:
        if isinstance(nsqd_tcp_addresses, str):
            nsqd_tcp_addresses = [nsqd_tcp_addresses]
        self._addrs = [parse_address(a, 4150) for a in nsqd_tcp_addresses]
        if not self._addrs:
            raise ValueError("at least one nsqd address is needed")
        if options is not None and option_kwargs:
            raise TypeError("pass either options= or individual option keywords")
        self.options = options or ConnectionOptions(**option_kwargs)
        self.reconnect_interval = reconnect_interval
        self.max_reconnect_interval = max_reconnect_interval
        self.retries = retries
        self._conns: list[NSQConnection] = []
        self._rr = 0
        self._keepers: list[asyncio.Task[None]] = []
        self._last_error: BaseException | None = None  # why the last connection attempt failed
        self._ready: asyncio.Event | None = None
        self._closing = False

    # --- life cycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connections(self) -> Sequence[NSQConnection]:
        """The connections currently in the rotation."""
        return tuple(self._conns)

    async def connect(self, timeout: float | None = None) -> None:
        """Start connecting to every address; return once one is usable.

        Raises NotConnectedError if none is within ``timeout`` (default: ``connect_timeout``);
        the keepers go on trying in the background either way.
        """
        self._start()
        if self._pick() is not None:
            return
        assert self._ready is not None
        try:
            async with asyncio.timeout(timeout or self.options.connect_timeout):
                await self._ready.wait()
        except TimeoutError:
            addrs = ", ".join(f"{h}:{p}" for h, p in self._addrs)
            why = f" (last error: {self._last_error})" if self._last_error is not None else ""
            raise NotConnectedError(f"no nsqd reachable among {addrs}{why}") from None

    def _start(self) -> None:
        if self._closing:
            raise ClosedError("producer is closed")
        if self._ready is not None:
            return
        self._ready = asyncio.Event()
        for host, port in self._addrs:
            self._keepers.append(asyncio.create_task(self._keep(host, port)))

    async def _keep(self, host: str, port: int) -> None:
        """Hold one connection open for the producer's whole life."""
        backoff = ReconnectBackoff(self.reconnect_interval, self.max_reconnect_interval)
        while not self._closing:
            conn = NSQConnection(host, port, self.options)
            try:
                await conn.connect()
            except Exception as err:  # any failure: a keeper must never die
                self._last_error = err
                delay = backoff.next_delay()
                log.warning("producer: %s:%d unreachable (%s); retry in %.1fs", host, port, err, delay)
                await asyncio.sleep(delay)
                continue
            if self._closing:
                conn.close()
                return
            backoff.reset()
            self._conns.append(conn)
            assert self._ready is not None
            self._ready.set()
            try:
                await conn.wait_closed()
            finally:
                self._drop(conn)
            if self._closing:
                return
            if isinstance(conn.close_reason, NSQErrorResponse):
                # nsqd hung up because of one bad command (E_BAD_TOPIC...), not because it is
                # unwell: come back at once, publishes pipelined behind it are waiting to retry
                continue
            if not self._closing:
                delay = backoff.next_delay()
                log.warning("producer: lost %s; reconnecting in %.1fs", conn.address, delay)
                await asyncio.sleep(delay)

    def _drop(self, conn: NSQConnection) -> None:
        if conn in self._conns:
            self._conns.remove(conn)
        if not self._conns and self._ready is not None:
            self._ready.clear()

    async def close(self, timeout: float = 5.0) -> None:
        """Wait (up to ``timeout``) for publishes in progress, then close every connection."""
        if self._closing:
            return
        self._closing = True
        conns = list(self._conns)
        pending = [f for c in conns for f in c._waiters]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        for conn in conns:
            conn.close()
        for task in self._keepers:
            task.cancel()
        await asyncio.gather(*self._keepers, return_exceptions=True)
        for conn in conns:
            await conn.wait_closed()

    # --- publishing -------------------------------------------------------------------------

    def _pick(self) -> NSQConnection | None:
        """Next usable connection, round-robin; unusable ones leave the rotation at once
        (their keeper reconnects), so nobody spins on a connection that is going away."""
        conns = self._conns
        while conns:
            self._rr = (self._rr + 1) % len(conns)
            conn = conns[self._rr]
            if conn.is_usable:
                return conn
            conns.pop(self._rr)
        if self._ready is not None:
            self._ready.clear()
        return None

    async def _send(self, data: bytes) -> None:
        attempt = 0
        while True:
            conn = self._pick()
            if conn is None:
                if self._closing:
                    raise ClosedError("producer is closed")
                await self.connect()
                continue
            fut = conn.request(data)
            if conn.write_paused:
                await conn.drain()
            try:
                resp = await fut
            except ConnectionClosedError as err:
                if err.unprocessed and attempt < self.retries and not self._closing:
                    attempt += 1
                    continue
                raise
            if resp != OK:
                raise NSQError(f"{conn.address}: unexpected answer {resp!r}")
            return

    async def pub(self, topic: str, body: Body) -> None:
        """PUB one message; returns once nsqd has accepted it."""
        await self._send(encode_pub(name_bytes(topic), _as_bytes(body)))

    async def mpub(self, topic: str, bodies: Sequence[Body]) -> None:
        """MPUB: several messages in one command, accepted or refused atomically."""
        if not bodies:
            raise ValueError("mpub needs at least one message")
        await self._send(encode_mpub_b(name_bytes(topic), [_as_bytes(b) for b in bodies]))

    async def dpub(self, topic: str, delay: float, body: Body) -> None:
        """DPUB: deliver after ``delay`` **seconds** (nsqd caps it at --max-req-timeout)."""
        if delay < 0:
            raise ValueError("delay must be >= 0")
        await self._send(encode_dpub(name_bytes(topic), int(round(delay * 1000)), _as_bytes(body)))
