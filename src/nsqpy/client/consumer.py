"""Consuming a topic/channel from many nsqd at once, at a bounded pace.

The parts, each in its own module so it can be tested alone:

* connections (``connection.py``) to nsqd given directly and/or found through nsqlookupd
  (``lookupd.py``), reconnected when they drop;
* the RDY budget (``rdy.py``): ``max_in_flight`` is the most messages this consumer holds at
  once, spread over the connections;
* backoff (``backoff.py``): handler failures slow the whole consumer down and successes bring it
  back, the go-nsq way, so a broken dependency is not hammered at full speed;
* the handler: an ``async def handler(msg)`` runs on ``concurrency`` worker coroutines fed by a
  queue (no Task per message); a plain function is called inline. Returning normally FINs the
  message, raising REQs it with the growing default delay and counts as a failure.

Messages delivered more than ``max_attempts`` times are not handed to the handler: ``on_giving_up``
(if any) sees them and they are FINished, so a poison message cannot loop forever.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections import deque
from typing import Any, Awaitable, Callable, Iterable

from nsqpy.protocol.names import is_valid_name

from .addr import normalize, parse_address
from .backoff import ConsumerBackoff, ReconnectBackoff, Signal, Step
from .connection import NSQConnection
from .errors import ClosedError, NSQErrorResponse
from .hooks import ConsumerHooks
from .lookupd import LookupdPoller
from .message import Message
from .options import ConnectionOptions
from .rdy import RdyBudget, Send

log = logging.getLogger("nsqpy.client")

Handler = Callable[[Message], Any]


class _WorkQueue:
    """A minimal FIFO between the protocol callbacks and the workers (cheaper than asyncio.Queue)."""

    __slots__ = ("_items", "_getters", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._items: deque[Message | None] = deque()
        self._getters: deque[asyncio.Future[Message | None]] = deque()
        self._loop = loop

    def put(self, item: Message | None) -> None:
        getters = self._getters
        while getters:
            fut = getters.popleft()
            if not fut.done():
                fut.set_result(item)
                return
        self._items.append(item)

    async def get(self) -> Message | None:
        if self._items:
            return self._items.popleft()
        fut: asyncio.Future[Message | None] = self._loop.create_future()
        self._getters.append(fut)
        return await fut

    def __len__(self) -> int:
        return len(self._items)


def _quiet(fut: asyncio.Future[Any]) -> asyncio.Future[Any]:
    """Mark a future's exception as seen: a CLS whose connection died needs no report."""
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())
    return fut


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)
    )


class Consumer:
    """Subscribe ``handler`` to ``topic``/``channel``.

    ``async with Consumer("t", "c", handler, nsqd_tcp_addresses=["127.0.0.1:4150"]) as c:``
    starts it, leaving the block closes it gracefully (CLS, in-flight drained). Keyword
    arguments not listed here are :class:`ConnectionOptions` (``msg_timeout``, ``snappy``...).
    Durations are in seconds; defaults are go-nsq's.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        handler: Handler,
        *,
        nsqd_tcp_addresses: str | Iterable[str] = (),
        lookupd_http_addresses: str | Iterable[str] = (),
        max_in_flight: int = 1,
        concurrency: int | None = None,
        auto_finish: bool = True,
        max_attempts: int = 5,
        on_giving_up: Callable[[Message], Any] | None = None,
        backoff_strategy: str = "exponential",
        backoff_multiplier: float = 1.0,
        max_backoff_duration: float = 120.0,
        lookupd_poll_interval: float = 60.0,
        lookupd_poll_jitter: float = 0.3,
        lookupd_poll_timeout: float = 60.0,
        low_rdy_idle_timeout: float = 10.0,
        low_rdy_timeout: float = 30.0,
        rdy_redistribute_interval: float = 5.0,
        reconnect_interval: float = 1.0,
        max_reconnect_interval: float = 60.0,
        reconnect_jitter: float = 0.25,
        close_timeout: float = 30.0,
        hooks: ConsumerHooks | None = None,
        lookupd_poller: LookupdPoller | None = None,
        options: ConnectionOptions | None = None,
        **option_kwargs: Any,
    ) -> None:
        if not is_valid_name(topic):
            raise ValueError(f"invalid topic name {topic!r}")
        if not is_valid_name(channel):
            raise ValueError(f"invalid channel name {channel!r}")
        if max_in_flight < 0:
            raise ValueError("max_in_flight must be >= 0")
        if isinstance(nsqd_tcp_addresses, str):
            nsqd_tcp_addresses = [nsqd_tcp_addresses]
        if isinstance(lookupd_http_addresses, str):
            lookupd_http_addresses = [lookupd_http_addresses]
        if options is not None and option_kwargs:
            raise TypeError("pass either options= or individual option keywords")
        self.topic = topic
        self.channel = channel
        self.handler = handler
        self.options = options or ConnectionOptions(**option_kwargs)
        if self.options.heartbeat_interval is None:
            raise ValueError("nsqd refuses SUB without heartbeats; keep heartbeat_interval set")
        self.nsqd_tcp_addresses = [normalize(a, 4150) for a in nsqd_tcp_addresses]
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        if not self.nsqd_tcp_addresses and not self.lookupd_http_addresses:
            raise ValueError("give nsqd_tcp_addresses and/or lookupd_http_addresses")
        self.concurrency = concurrency or max(1, max_in_flight)
        self.auto_finish = auto_finish
        self.max_attempts = max_attempts
        self.on_giving_up = on_giving_up
        self.lookupd_poll_interval = lookupd_poll_interval
        self.lookupd_poll_jitter = lookupd_poll_jitter
        self.lookupd_poll_timeout = lookupd_poll_timeout
        self.rdy_redistribute_interval = rdy_redistribute_interval
        self.reconnect_interval = reconnect_interval
        self.max_reconnect_interval = max_reconnect_interval
        self.reconnect_jitter = reconnect_jitter
        self.close_timeout = close_timeout
        #: told of connections, backoff and stopping (see :class:`ConsumerHooks`)
        self.hooks = hooks or ConsumerHooks()
        self._lookupd_poller = lookupd_poller

        self._rng = random.Random()
        self._budget = RdyBudget(max_in_flight, low_rdy_idle_timeout, low_rdy_timeout, self._rng)
        self._backoff = ConsumerBackoff(
            backoff_multiplier, max_backoff_duration, backoff_strategy, self._rng
        )
        self._async_handler = _is_async(handler)
        self._conns: dict[str, NSQConnection] = {}
        self._connecting: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reconnecting: set[str] = set()
        self._workers: list[asyncio.Task[None]] = []
        self._queue: _WorkQueue | None = None
        self._poller: LookupdPoller | None = None
        self._lookupd_recheck: asyncio.Event | None = None
        self._backoff_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closing = False
        self._drained: asyncio.Event | None = None
        self._closed: asyncio.Event | None = None
        self.stats = {"received": 0, "finished": 0, "requeued": 0, "given_up": 0}

    # --- public API -------------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def max_in_flight(self) -> int:
        return self._budget.max_in_flight

    @property
    def connections(self) -> dict[str, NSQConnection]:
        """Subscribed connections by ``host:port``."""
        return dict(self._conns)

    @property
    def backoff_level(self) -> int:
        return self._backoff.level

    @property
    def in_backoff(self) -> bool:
        return self._backoff.active

    def total_rdy(self) -> int:
        """Sum of the RDY counts last sent (never above ``max_in_flight``)."""
        return self._budget.total

    def is_starved(self) -> bool:
        """True when some connection has ≥85% of its RDY in flight: batching handlers should
        flush now, more messages will not come until some are answered."""
        return any(c.in_flight > 0 and c.in_flight >= 0.85 * c.rdy for c in self._conns.values())

    def set_max_in_flight(self, value: int) -> None:
        """Change the budget live (0 pauses delivery). Worker count stays as created."""
        self._apply(self._budget.set_max_in_flight(value, self._now(), self._backoff.active))

    async def connect_to_nsqd(self, address: str) -> None:
        """Add an nsqd address at run time (kept and reconnected like the initial ones)."""
        addr = normalize(address, 4150)
        if addr not in self.nsqd_tcp_addresses:
            self.nsqd_tcp_addresses.append(addr)
        if self._started and not self._closing and not await self._connect(addr):
            self._schedule_reconnect(addr)

    def disconnect_from_nsqd(self, address: str) -> None:
        """Stop using an nsqd given directly: CLS, answer what is in flight, close."""
        addr = normalize(address, 4150)
        if addr in self.nsqd_tcp_addresses:
            self.nsqd_tcp_addresses.remove(addr)
        conn = self._conns.get(addr)
        if conn is not None:
            self._retire(conn)

    async def start(self, *, fail_fast: bool = False) -> None:
        """Connect to the given nsqd, start lookupd polling. Unreachable nsqd are retried.

        With ``fail_fast`` the given nsqd are connected one after the other, and the first that
        cannot be reached (or refuses the SUB) raises its error instead: go-nsq's
        ``ConnectToNSQDs``, for programs that must not start half-connected. The consumer is
        then closed; a lost connection after a successful start is still reconnected.
        """
        if self._started:
            return
        if self._closing:
            raise ClosedError("consumer is closed")
        self._started = True
        loop = self._loop = asyncio.get_running_loop()
        self._drained = asyncio.Event()
        self._closed = asyncio.Event()
        if self._async_handler:
            self._queue = _WorkQueue(loop)
            self._workers = [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]
        if fail_fast:
            for addr in self.nsqd_tcp_addresses:
                try:
                    await self._connect(addr, raise_errors=True)
                except BaseException:
                    self.hooks = ConsumerHooks()  # the error is the report: no stop events
                    await self.close()
                    raise
        else:
            results = await asyncio.gather(*(self._connect(a) for a in self.nsqd_tcp_addresses))
            for addr, ok in zip(self.nsqd_tcp_addresses, results):
                if not ok:
                    self._schedule_reconnect(addr)
        if self.lookupd_http_addresses:
            self._poller = self._lookupd_poller or LookupdPoller(
                self.lookupd_http_addresses, self.topic, timeout=self.lookupd_poll_timeout,
                auth_secret=self.options.auth_secret,
            )
            self._lookupd_recheck = asyncio.Event()
            await self._query_lookupd()
            self._spawn(self._lookupd_loop())
        self._spawn(self._rdy_loop())

    async def close(self) -> None:
        """Stop gracefully: CLS everywhere, let in-flight messages be answered (at most
        ``close_timeout``), then close the connections and stop the workers."""
        if self._closing:
            if self._closed is not None:
                await self._closed.wait()
            return
        self._closing = True
        if not self._started:
            return
        assert self._drained is not None and self._closed is not None
        self.hooks.stopping()
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        conns = list(self._conns.values())
        closing = [_quiet(c.start_close()) for c in conns]
        if closing:
            await asyncio.wait(closing, timeout=min(5.0, self.close_timeout))
        # answers given before nsqd took the CLS may have drained us for a moment, and more
        # messages came after: only from CLOSE_WAIT on does "nothing in flight" stay true
        self._drained.clear()
        if not self._all_drained():
            try:
                async with asyncio.timeout(self.close_timeout):
                    await self._drained.wait()
            except TimeoutError:
                log.warning("consumer: close timed out with messages in flight")
        for conn in conns:
            conn.close()
        await asyncio.gather(*(c.wait_closed() for c in conns))
        await self._stop_workers()
        if self._poller is not None:
            await self._poller.close()
        self.hooks.stopped()
        self._closed.set()

    async def wait_closed(self) -> None:
        """Block until :meth:`close` has finished (e.g. a main task waiting on a signal handler)."""
        if self._closed is None:
            raise RuntimeError("consumer not started")
        await self._closed.wait()

    async def _stop_workers(self) -> None:
        if self._queue is None:
            return
        for _ in self._workers:
            self._queue.put(None)
        done, pending = await asyncio.wait(self._workers, timeout=1.0)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    # --- connections ------------------------------------------------------------------------

    def _now(self) -> float:
        return asyncio.get_running_loop().time() if self._loop is None else self._loop.time()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _apply(self, sends: list[Send]) -> None:
        for conn, count in sends:
            conn.ready(count)  # type: ignore[attr-defined]

    async def _connect(self, addr: str, raise_errors: bool = False) -> bool:
        """Connect and SUB; True when subscribed (or already connected). A failure is logged
        and answered False, or raised with ``raise_errors``."""
        if addr in self._conns or addr in self._connecting:
            return True
        if self._closing:
            return False
        self._connecting.add(addr)
        self.hooks.connecting(addr)
        host, port = parse_address(addr)
        conn = NSQConnection(
            host, port, self.options, on_message=self._on_message, on_close=self._on_conn_close,
            on_error=self._on_conn_error, on_done=self._on_done,
        )
        try:
            await conn.connect()
            async with asyncio.timeout(self.options.connect_timeout):
                await conn.subscribe(self.topic, self.channel)
        except Exception as err:  # any failure means "retry later", never a dead reconnect task
            conn.abort()
            if raise_errors:
                raise
            log.warning("consumer %s/%s: cannot subscribe at %s: %s", self.topic, self.channel, addr, err)
            self.hooks.connect_failed(addr, err)
            return False
        finally:
            self._connecting.discard(addr)
        if self._closing or conn.is_closed:  # closed before we could register it: retry
            conn.close()
            return False
        self._conns[addr] = conn
        now = self._now()
        self._budget.add(conn, conn.max_rdy_count, now)
        if conn.max_rdy_count < self._budget.max_in_flight:
            log.info("%s: max_rdy_count %d < max_in_flight %d", addr, conn.max_rdy_count, self.max_in_flight)
        if not self._backoff.active:
            self._apply(self._budget.rebalance(now))
        log.info("consumer %s/%s: subscribed at %s", self.topic, self.channel, addr)
        return True

    def _on_conn_close(self, conn: NSQConnection, reason: BaseException | None) -> None:
        addr = conn.address
        if self._conns.get(addr) is not conn:
            return  # never registered (failed handshake) or retired on purpose
        del self._conns[addr]
        self._apply(self._budget.remove(conn, self._now(), self._backoff.active))
        self.hooks.connection_closed(addr, reason, self._closing, len(self._conns))
        if self._closing:
            self._check_drained()
            return
        log.warning("consumer %s/%s: lost %s (%s)", self.topic, self.channel, addr, reason)
        if addr in self.nsqd_tcp_addresses:
            self._schedule_reconnect(addr)
        elif self._lookupd_recheck is not None:
            self._lookupd_recheck.set()  # go-nsq: a drop triggers an immediate re-query

    def _on_conn_error(self, conn: NSQConnection, err: NSQErrorResponse) -> None:
        log.warning("consumer %s/%s: %s: %s", self.topic, self.channel, conn.address, err)

    def _schedule_reconnect(self, addr: str) -> None:
        if addr not in self._reconnecting and not self._closing:
            self._reconnecting.add(addr)
            self._spawn(self._reconnect(addr))

    async def _reconnect(self, addr: str) -> None:
        backoff = ReconnectBackoff(self.reconnect_interval, self.max_reconnect_interval,
                                   self.reconnect_jitter, rng=self._rng)
        try:
            while not self._closing:
                delay = backoff.next_delay()
                self.hooks.reconnecting(addr, delay)
                await asyncio.sleep(delay)
                if addr not in self.nsqd_tcp_addresses or await self._connect(addr):
                    return
        finally:
            self._reconnecting.discard(addr)

    def _retire(self, conn: NSQConnection) -> None:
        """lookupd no longer lists this nsqd: stop taking messages there, answer, then close."""
        del self._conns[conn.address]
        self._apply(self._budget.remove(conn, self._now(), self._backoff.active))
        _quiet(conn.start_close())
        self._spawn(self._close_when_drained(conn))

    async def _close_when_drained(self, conn: NSQConnection) -> None:
        try:
            deadline = self._now() + self.close_timeout
            while conn.in_flight > 0 and not conn.is_closed and self._now() < deadline:
                await asyncio.sleep(0.05)
        finally:
            conn.close()

    # --- lookupd ----------------------------------------------------------------------------

    async def _lookupd_loop(self) -> None:
        assert self._lookupd_recheck is not None
        await asyncio.sleep(self._rng.random() * self.lookupd_poll_jitter * self.lookupd_poll_interval)
        while not self._closing:
            try:
                async with asyncio.timeout(self.lookupd_poll_interval):
                    await self._lookupd_recheck.wait()
            except TimeoutError:
                pass
            self._lookupd_recheck.clear()
            await self._query_lookupd()

    async def _query_lookupd(self) -> None:
        assert self._poller is not None
        found = await self._poller.query()
        if found is None or self._closing:
            return
        new = [a for a in found if a not in self._conns]
        if new:
            await asyncio.gather(*(self._connect(a) for a in new))
        for addr, conn in list(self._conns.items()):
            if addr not in found and addr not in self.nsqd_tcp_addresses:
                log.info("consumer %s/%s: %s left lookupd, closing", self.topic, self.channel, addr)
                self._retire(conn)

    # --- RDY and backoff --------------------------------------------------------------------

    async def _rdy_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.rdy_redistribute_interval)
            if not self._backoff.in_timeout:
                self._apply(self._budget.tick(self._now(), self._backoff.level > 0))

    def _on_done(self, conn: NSQConnection, msg: Message, signal: Signal) -> None:
        if signal is Signal.SUCCESS:
            self.stats["finished"] += 1
        else:
            self.stats["requeued"] += 1
        if self._closing:
            self._check_drained()
            return
        backoff = self._backoff
        if signal is Signal.SUCCESS and backoff.level == 0:
            return  # the common case: nothing to change
        step = backoff.signal(signal)
        if step is Step.BACKOFF:
            now = self._now()
            log.warning(
                "consumer %s/%s: backing off %.2fs (level %d)",
                self.topic, self.channel, backoff.last_duration, backoff.level,
            )
            self.hooks.backing_off(backoff.last_duration, backoff.level)
            self._apply(self._budget.all_zero(now))
            self._arm_backoff_timer(backoff.last_duration)
        elif step is Step.RESUME:
            log.info("consumer %s/%s: backoff over", self.topic, self.channel)
            self.hooks.backoff_exited(self._budget.per_conn())
            self._apply(self._budget.rebalance(self._now()))

    def _arm_backoff_timer(self, delay: float) -> None:
        assert self._loop is not None
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
        self._backoff_timer = self._loop.call_later(delay, self._backoff_expired)

    def _backoff_expired(self) -> None:
        self._backoff_timer = None
        if self._closing:
            return
        sends = self._budget.probe(self._now())
        if not sends:
            # no connection to probe with, or max_in_flight is 0 (paused): look again in 1 s
            # (go-nsq does the same) rather than stay in backoff with nothing scheduled
            self.hooks.backoff_probe(None)
            self._arm_backoff_timer(1.0)
            return
        self.hooks.backoff_probe(sends[0][0].address)  # type: ignore[attr-defined]
        self._backoff.timeout_expired()
        self._apply(sends)

    def _all_drained(self) -> bool:
        return all(c.in_flight <= 0 or c.is_closed for c in self._conns.values())

    def _check_drained(self) -> None:
        if self._drained is not None and self._all_drained():
            self._drained.set()

    # --- messages ---------------------------------------------------------------------------

    def _on_message(self, msg: Message) -> None:
        self.stats["received"] += 1
        state = self._budget.conns.get(msg.conn)
        if state is not None:
            state.last_msg = msg.conn.loop.time()
        if self._queue is not None:
            self._queue.put(msg)
            return
        if self._should_give_up(msg):
            return
        try:
            self.handler(msg)
        except Exception:
            log.exception("consumer %s/%s: handler failed on %s", self.topic, self.channel, msg)
            if self.auto_finish and msg.auto_response:
                msg.requeue()
            return
        if self.auto_finish and msg.auto_response:
            msg.finish()

    def _should_give_up(self, msg: Message) -> bool:
        if not self.max_attempts or msg.attempts <= self.max_attempts:
            return False
        self.stats["given_up"] += 1
        log.warning("consumer %s/%s: giving up on %s", self.topic, self.channel, msg)
        self.hooks.giving_up(msg)
        if self.on_giving_up is not None:
            try:
                result = self.on_giving_up(msg)
                if inspect.isawaitable(result):
                    self._spawn(result)
            except Exception:
                log.exception("consumer: on_giving_up failed")
        msg.finish()
        return True

    async def _worker(self) -> None:
        queue = self._queue
        assert queue is not None
        handler = self.handler
        while True:
            msg = await queue.get()
            if msg is None:
                return
            if self._should_give_up(msg):
                continue
            try:
                await handler(msg)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consumer %s/%s: handler failed on %s", self.topic, self.channel, msg)
                if self.auto_finish and msg.auto_response:
                    msg.requeue()
                continue
            if self.auto_finish and msg.auto_response:
                msg.finish()
