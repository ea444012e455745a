"""go-nsq as upstream's utilities show it: its log lines, its lookupd polling, its producer.

Upstream's utilities are built on go-nsq 1.1.0, so what an operator sees when an nsqd is down,
goes away or comes back is go-nsq's: a numbered line per event on stderr (``INF    1
[topic/channel] (127.0.0.1:4150) connecting to nsqd``), Go's network error texts (``dial tcp
127.0.0.1:4150: connect: connection refused``, :mod:`nsqpy.tools.goerrors`), lookupd queried
one at a time with up to three tries. nsqpy's :class:`~nsqpy.client.Consumer` does the work; :class:`ConsumerLog` (its hooks)
and :class:`GoLookupdPoller` make it look and pace itself like go-nsq, and :class:`GoProducer`
publishes the go-nsq way (connect on first use, no retry: a failure is the caller's to handle).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Callable
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp
import orjson

from ..client import (
    ConnectionOptions,
    ConsumerHooks,
    LookupdPoller,
    Message,
    NSQConnection,
    NSQErrorResponse,
)
from ..client.connection import encode_pub, name_bytes
from ..client.errors import ConnectionClosedError
from ..client.lookupd import producers_from_answer
from ..common.flags import format_duration, go_quote
from ..protocol.frames import OK
from . import golog
from .goerrors import (
    GoError,
    check_dial_address,
    dial_error_text,
    http_error_text,
    io_error_text,
    response_error_text,
    split_host_port,
)

#: go-nsq numbers every Consumer and Producer of the process from 1, in creation order
_instances = itertools.count(1)


def next_instance_id() -> int:
    return next(_instances)


# --- log lines --------------------------------------------------------------------------------

_CLOSE_SEQUENCE = ("beginning close", "readLoop exiting", "breaking out of writeLoop",
                   "writeLoop exiting", "finished draining, cleanup exiting", "clean close complete")


class GoNsqLog:
    """go-nsq's ``%-4s %3d [topic/channel] message`` lines (consumers) or ``%-4s %3d message``
    (producers), through Go's default logger."""

    def __init__(self, topic: str | None = None, channel: str | None = None) -> None:
        self.id = next_instance_id()
        self.tag = f" [{topic}/{channel}]" if topic is not None else ""

    def line(self, level: str, text: str) -> None:
        golog.log(f"{level:<4} {self.id:>3}{self.tag} {text}")

    def info(self, text: str) -> None:
        self.line("INF", text)

    def warn(self, text: str) -> None:
        self.line("WRN", text)

    def error(self, text: str) -> None:
        self.line("ERR", text)

    def connection_ended(self, address: str, reason: BaseException | None, graceful: bool) -> None:
        """A connection's own lines as it closes (go-nsq's read/write loops winding down)."""
        if graceful:
            self.info(f"({address}) received CLOSE_WAIT from nsqd")
        else:
            if isinstance(reason, NSQErrorResponse):
                self.error(f"({address}) protocol error - {reason}")
                reason = None  # nsqd hangs up after a fatal error
            self.error(f"({address}) IO error - {io_error_text(reason)}")
        for text in _CLOSE_SEQUENCE:
            self.info(f"({address}) {text}")


class ConsumerLog(GoNsqLog, ConsumerHooks):
    """A Consumer's events as go-nsq's lines (its hooks; see :class:`ConsumerHooks`)."""

    def __init__(self, topic: str, channel: str, lookupd: bool = False) -> None:
        super().__init__(topic, channel)
        self.lookupd = lookupd
        self.last_address = ""  # the nsqd dialled last (the one a start-up error is about)

    def connecting(self, address: str) -> None:
        self.last_address = address
        self.info(f"({address}) connecting to nsqd")

    def connect_failed(self, address: str, error: BaseException) -> None:
        self.error(f"({address}) error connecting to nsqd - {dial_error_text(error, address)}")

    def connection_closed(self, address: str, reason: BaseException | None, graceful: bool,
                          remaining: int) -> None:
        self.connection_ended(address, reason, graceful)
        self.warn(f"there are {remaining} connections left alive")

    def reconnecting(self, address: str, delay: float) -> None:
        self.info(f"({address}) re-connecting in {format_duration(delay)}")

    def backing_off(self, duration: float, level: int) -> None:
        self.warn(f"backing off for {format_duration(duration)} (backoff level {level}), "
                  "setting all to RDY 0")

    def backoff_probe(self, address: str | None) -> None:
        if address is None:
            self.warn("no connection available to resume")
            self.warn("backing off for 1s")
        else:
            self.warn(f"({address}) backoff timeout expired, sending RDY 1")

    def backoff_exited(self, rdy_per_connection: int) -> None:
        self.warn(f"exiting backoff, returning all to RDY {rdy_per_connection}")

    def giving_up(self, msg: Message) -> None:
        self.warn(f"msg {msg.id.decode()} attempted {msg.attempts} times, giving up")

    def handler_error(self, msg: Message, error: str) -> None:
        """What go-nsq logs when a handler returns an error (the message is then requeued)."""
        self.error(f"Handler returned error ({error}) for msg {msg.id.decode()}")

    def stopping(self) -> None:
        self.info("stopping...")

    def stopped(self) -> None:
        self.info("stopping handlers")
        self.info("rdyLoop exiting")
        if self.lookupd:
            self.info("exiting lookupdLoop")


# --- lookupd ------------------------------------------------------------------------------------


def go_lookup_url(address: str, topic: str) -> str:
    """go-nsq's ``buildLookupAddr``: ``http://`` added when missing, ``/lookup`` when the path
    is empty, the topic added to the query (no port needed: Go then uses the scheme's)."""
    if "://" not in address:
        address = "http://" + address
    parts = urlsplit(address)
    path = parts.path if parts.path not in ("", "/") else "/lookup"
    query = parts.query + ("&" if parts.query else "") + urlencode({"topic": topic})
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


class GoLookupdPoller(LookupdPoller):
    """go-nsq's ``queryLookupd``: one nsqlookupd per round (round-robin), up to three tries.

    Any answer but 200 (``404 TOPIC_NOT_FOUND`` too) is an error, logged, and changes nothing;
    a round where every try failed answers None (keep the connections there are). The first
    round asks only the first nsqlookupd: go-nsq queries as the first address is added, before
    it knows the others.
    """

    TRIES = 3

    def __init__(self, addresses: list[str], topic: str, log: GoNsqLog, *, timeout: float = 60.0,
                 auth_secret: str | None = None) -> None:
        super().__init__([], topic, timeout=timeout, auth_secret=auth_secret)
        self.urls = list(dict.fromkeys(go_lookup_url(a, topic) for a in addresses))
        self.log = log
        self._next = 0
        self._rounds = 0
        self._client: aiohttp.ClientSession | None = None

    async def query(self) -> set[str] | None:
        if self._client is None:
            self._client = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout, sock_connect=self.timeout),
                headers=self._headers)
        self._rounds += 1
        for attempt in range(self.TRIES):
            if self._rounds == 1:
                url = self.urls[0]
            else:
                url = self.urls[self._next % len(self.urls)]
                self._next += 1
            self.log.info(f"querying nsqlookupd {url}")
            try:
                return await self._ask(url)
            except GoError as err:
                self.log.error(f"error querying nsqlookupd ({url}) - {err}")
                if attempt + 1 < self.TRIES:
                    self.log.info("retrying with next nsqlookupd")
        return None

    async def _ask(self, url: str) -> set[str]:
        assert self._client is not None
        try:
            async with self._client.get(url) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise GoError(response_error_text(resp.status, resp.reason or "", body))
        except GoError:
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as err:
            raise GoError(http_error_text("GET", url, err)) from None
        try:
            return producers_from_answer(orjson.loads(body))
        except (ValueError, orjson.JSONDecodeError) as err:
            raise GoError(str(err)) from None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
        await super().close()


# --- producer -----------------------------------------------------------------------------------


class GoProducer:
    """go-nsq's ``Producer``: connects on the first publish (and again on the first publish after
    its connection went away), never retries; every failure is the caller's.

    Publishes are pipelined on the one connection (go-nsq's ``PublishAsync``): answers come back
    in order. A publish that cannot connect raises GoError with Go's text; one refused by nsqd
    raises :class:`NSQErrorResponse`; one whose connection died before the answer raises
    GoError("not connected") (go-nsq's ``ErrNotConnected``).
    """

    def __init__(self, address: str, options: ConnectionOptions, refusal: str | None = None) -> None:
        self.address = address
        self.options = options
        self.refusal = refusal  # nsqd's certain answer to this IDENTIFY (see common.connection_options)
        self.log = GoNsqLog()
        self._conn: NSQConnection | None = None
        self._connecting: asyncio.Future[NSQConnection] | None = None
        self._refused_on: NSQConnection | None = None
        self._stopped = False

    async def _connection(self) -> NSQConnection:
        conn = self._conn
        if conn is not None and conn.is_usable:
            return conn
        if self._stopped:
            raise GoError("stopped")
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> NSQConnection:
        self.log.info(f"({self.address}) connecting to nsqd")
        try:
            check_dial_address(self.address)
            if self.refusal is not None:
                raise GoError(self.refusal)
            host, port = split_host_port(self.address)
            conn = NSQConnection(host.strip("[]") or "127.0.0.1", int(port or 0), self.options)
            await conn.connect()
        except Exception as err:
            text = dial_error_text(err, self.address)
            self.log.error(f"({self.address}) error connecting to nsqd - {text}")
            raise GoError(text) from None
        conn.on_close = self._on_close  # from now on its end is reported (not a failed dial)
        self._conn = conn
        return conn

    def _on_close(self, conn: NSQConnection, reason: BaseException | None) -> None:
        if self._stopped:
            return
        self.log.connection_ended(self.address, reason, graceful=False)
        self.log.info(f"({self.address}) exiting router")

    async def publish_async(self, topic: str, body: bytes,
                            on_failure: Callable[[BaseException], None] | None = None,
                            ) -> asyncio.Future[None]:
        """go-nsq's ``PublishAsync``: connect if needed (a failure raises GoError now), send;
        the future returned is nsqd's answer: NSQErrorResponse, or GoError("not connected")
        when the connection died first. ``on_failure`` hears of a failed answer synchronously,
        before anything else happens on the loop (to_nsq ends the process there, as upstream
        does before its connection's goroutines have logged their way out)."""
        conn = await self._connection()
        try:
            command = encode_pub(name_bytes(topic), body)
        except ValueError:  # spaces or control bytes: nsqd would refuse the name as well
            raise NSQErrorResponse("E_BAD_TOPIC", f"PUB topic name {go_quote(topic)} is not valid")
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        request = conn.request(command)
        request.add_done_callback(lambda fut: self._settle(conn, fut, answer, on_failure))
        if conn.write_paused:
            await conn.drain()
        return answer

    def _settle(self, conn: NSQConnection, request: asyncio.Future[bytes],
                answer: asyncio.Future[None],
                on_failure: Callable[[BaseException], None] | None) -> None:
        if request.cancelled():
            answer.cancel()
            return
        err = request.exception()
        if err is None:
            if request.result() == OK:
                answer.set_result(None)
                return
            err = GoError(f"unexpected answer {request.result()!r}")
        elif isinstance(err, NSQErrorResponse):
            if conn is not self._refused_on:
                # nsqd hangs up after a fatal error: later answers on it are not nsqd's
                self._refused_on = conn
                self.log.error(f"({self.address}) protocol error - {err}")
        elif isinstance(err, ConnectionClosedError):
            err = GoError("not connected")
        if on_failure is not None:
            on_failure(err)
        answer.set_exception(err)

    async def publish(self, topic: str, body: bytes) -> None:
        """go-nsq's ``Publish``: returns once nsqd answered OK."""
        await (await self.publish_async(topic, body))

    async def stop(self) -> None:
        """go-nsq's ``Stop``: says so, and closes the connection if there is one."""
        self.log.info(f"({self.address}) stopping")
        live = self._conn is not None and self._conn.is_usable
        await self.close()
        if self._conn is not None:
            self.log.info(f"({self.address}) exiting router")
        if live:
            # go-nsq's read and write loops wind a live connection down after the router;
            # upstream's process often exits before they have logged it, ours always lets them
            for text in _CLOSE_SEQUENCE:
                self.log.info(f"({self.address}) {text}")

    async def close(self) -> None:
        """Close without a word (upstream's nsq_to_nsq never stops its producers)."""
        self._stopped = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._conn is not None:
            self._conn.close()
            await self._conn.wait_closed()


def disable_client_logging() -> None:
    """The client's own log lines would add to go-nsq's; upstream shows only go-nsq's."""
    logger = logging.getLogger("nsqpy.client")
    logger.handlers.clear()
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    logger.setLevel(logging.CRITICAL + 1)
