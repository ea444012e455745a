"""``spark.readStream.format("nsq")``: an at-least-once NSQ source on PySpark's Python Data Source API.

Where things run (PySpark 4.x, measured; see docs/spark.md):

* :class:`NsqDataSource` and :class:`NsqStreamReader` are created in short-lived planner
  processes and **pickled**; the reader that matters lives in the driver-side *streaming source
  runner*, one Python process per source per query run, which calls ``read``/``commit`` for
  every micro-batch and is killed (never ``stop()``-ed) when the query ends.
* So the reader holds only plain options; everything live (the I/O thread, the connections, the
  held messages) is a :class:`_SourceRuntime`, created on the first ``read()`` in the runner and
  dropped by ``__getstate__``.

Delivery (nsqd's rule: only the connection that received a message may FIN it):

* ``read(start)`` takes what the connections have buffered (waiting at most ``pollTimeoutMs``
  for the first message), remembers the messages under the batch's end offset and hands Spark
  one Arrow record batch. Offsets are ``{"seq": messages read so far, "flush": n}``; they
  count, they cannot be replayed.
* ``commit(end)`` — which Spark calls once the batch is in the sink and the *next* batch is
  planned — FINs every message of every batch up to ``end`` on its own connection.
* With no new data but un-FINed batches, ``read`` returns ``flush + 1`` and no rows: that
  empty batch makes Spark commit the previous one (otherwise the last batch stays un-acked).
* A batch Spark replays after a restart (``readBetweenOffsets``) is empty: its messages were
  never FINed, nsqd hands them out again once their ``msg_timeout`` expires (nsqd does not
  requeue on disconnect), so nothing is lost and a restarted query sees them again.
* The I/O thread TOUCHes every message held longer than half a ``touchIntervalMs`` (checked
  every half interval) so a slow sink does not make nsqd redeliver, answers heartbeats (the
  client does), keeps RDY within the IDENTIFY ``max_rdy_count`` (opening several connections
  per nsqd when ``maxInFlight`` needs more), reconnects, and follows nsqlookupd as nodes come
  and go.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Coroutine, Iterator

import orjson
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from nsqpy.client import (
    IdentifyError,
    LookupdPoller,
    LoopThread,
    MessageBatch,
    NSQConnection,
    NSQError,
    NSQErrorResponse,
    ReconnectBackoff,
    subscribe,
)
from nsqpy.client.addr import parse_address
from nsqpy.client.history import parse_point
from nsqpy.client.httpauth import bearer
from nsqpy.common.addr import join_host_port
from nsqpy.client.lookupd import ACCEPT, lookup_url
from nsqpy.protocol.names import is_valid_name

from ._compat import SupportsTriggerAvailableNow
from .arrow import arrow_schema, record_batch
from .options import CONNECTION_KEYS, Options, connection_options, connection_settings

log = logging.getLogger("nsqpy.spark")
if os.environ.get("NSQPY_SPARK_LOG") and not logging.getLogger("nsqpy").handlers:
    # NSQPY_SPARK_LOG=/tmp/nsq.log: every Spark Python process of ours logs there (debug aid)
    _handler = logging.FileHandler(os.environ["NSQPY_SPARK_LOG"])
    _handler.setFormatter(logging.Formatter(f"%(asctime)s {os.getpid()} %(name)s %(levelname)s %(message)s"))
    logging.getLogger("nsqpy").addHandler(_handler)
    logging.getLogger("nsqpy").setLevel(logging.DEBUG)

SCHEMA = StructType(
    [
        StructField("body", BinaryType(), True),
        StructField("id", StringType(), True),
        StructField("attempts", IntegerType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("topic", StringType(), True),
        StructField("channel", StringType(), True),
        StructField("nsqd_address", StringType(), True),
    ]
)

SOURCE_KEYS = {
    "nsqdTcpAddresses", "lookupdHttpAddresses", "nsqdHttpAddresses", "topic", "channel",
    "maxBatchSize", "pollTimeoutMs", "maxInFlight", "connectionsPerNode", "msgTimeoutMs",
    "touchIntervalMs", "outputBufferSize", "outputBufferTimeoutMs", "lookupdPollIntervalMs",
    "availableNowIdleTimeoutMs", "startTimeoutMs", "reconnectIntervalMs",
    "mode", "partitionsPerNode", "leaseTimeoutMs", "startingPosition",
}
#: ``mode``: where the source reads (docs/spark.md, "Two modes")
MODES = ("auto", "executor", "driver")
# enough for maxInFlight 2 x 80k under nsqd's default max_rdy_count (2500): batches above ~40k were
# capped by in-flight room (mean ~36k asked 50k) with 32
MAX_CONNECTIONS_PER_NODE = 64
#: nsqd refusals that retrying cannot fix: the query fails with them instead
CONFIG_ERRORS = {"E_BAD_TOPIC", "E_BAD_CHANNEL", "E_INVALID", "E_BAD_BODY", "E_IDENTIFY_FAILED",
                 "E_AUTH_FAILED", "E_AUTH_FIRST", "E_UNAUTHORIZED", "E_AUTH_DISABLED"}


@dataclass
class SourceConfig:
    """Everything the source needs, as plain picklable values."""

    topic: str
    channel: str
    nsqd_tcp: list[str]
    lookupd_http: list[str]
    nsqd_http: list[str]
    max_batch_size: int
    poll_timeout: float
    max_in_flight: int
    conns_per_node: int  # 0 = as many as max_in_flight needs under nsqd's max_rdy_count
    msg_timeout: float
    touch_interval: float
    output_buffer_size: int
    output_buffer_timeout: float
    lookupd_poll_interval: float
    available_now_idle: float
    start_timeout: float
    reconnect_interval: float
    connection: dict[str, Any] = field(default_factory=dict)
    mode: str = "auto"
    partitions_per_node: int = 0  # 0 = the executors' cores over the nodes
    lease_timeout: float = 120.0
    starting_position: Any = "latest"  # a history Point: where a new channel starts (start.py)

    @classmethod
    def from_options(cls, raw: Any) -> SourceConfig:
        opts = Options(raw, SOURCE_KEYS | CONNECTION_KEYS)
        topic = opts.require("topic")
        channel = opts.require("channel")
        for kind, name in (("topic", topic), ("channel", channel)):
            if not is_valid_name(name):
                raise ValueError(f"invalid NSQ {kind} name {name!r}")
        nsqd_tcp = opts.addresses("nsqdTcpAddresses", 4150)
        lookupd = opts.http_addresses("lookupdHttpAddresses")
        if not nsqd_tcp and not lookupd:
            raise ValueError("the nsq source needs nsqd_tcp_addresses and/or lookupd_http_addresses")
        batch = opts.get_int("maxBatchSize", 20000, 1)
        msg_timeout_ms = opts.get_int("msgTimeoutMs", 30000, 1000)
        touch_ms = opts.get_int("touchIntervalMs", max(500, msg_timeout_ms // 3), 100)
        if touch_ms >= msg_timeout_ms:
            raise ValueError("touchIntervalMs must be shorter than msgTimeoutMs")
        return cls(
            topic=topic,
            channel=channel,
            nsqd_tcp=nsqd_tcp,
            lookupd_http=lookupd,
            nsqd_http=opts.http_addresses("nsqdHttpAddresses"),
            max_batch_size=batch,
            poll_timeout=opts.get_int("pollTimeoutMs", 100, 0) / 1000.0,
            max_in_flight=opts.get_int("maxInFlight", 2 * batch, 1),
            conns_per_node=opts.get_int("connectionsPerNode", 0, 0),
            msg_timeout=msg_timeout_ms / 1000.0,
            touch_interval=touch_ms / 1000.0,
            output_buffer_size=opts.get_int("outputBufferSize", 65536, 64),
            output_buffer_timeout=opts.get_int("outputBufferTimeoutMs", 50, 1) / 1000.0,
            lookupd_poll_interval=opts.get_int("lookupdPollIntervalMs", 60000, 10) / 1000.0,
            available_now_idle=opts.get_int("availableNowIdleTimeoutMs", 2000, 0) / 1000.0,
            start_timeout=opts.get_int("startTimeoutMs", 10000, 0) / 1000.0,
            reconnect_interval=opts.get_int("reconnectIntervalMs", 1000, 10) / 1000.0,
            connection=connection_settings(opts),
            mode=_mode(opts.get("mode") or "auto"),
            partitions_per_node=opts.get_int("partitionsPerNode", 0, 0),
            lease_timeout=opts.get_int("leaseTimeoutMs", 120000, 1000) / 1000.0,
            starting_position=parse_point(opts.get("startingPosition") or "latest", "startingPosition"),
        )


def _mode(text: str) -> str:
    mode = text.strip().lower()
    if mode not in MODES:
        raise ValueError(f"nsq option 'mode' must be one of {', '.join(MODES)}, not {text!r}")
    return mode


class NsqDataSource(DataSource):
    """``format("nsq")``: streaming source and batch/streaming sink.

    The source reads on the executors (:class:`~nsqpy.spark.partitioned.NsqPartitionedReader`)
    when every nsqd has leases, else on the driver (:class:`NsqStreamReader`); ``mode`` forces
    either (:mod:`nsqpy.spark.mode`)."""

    #: partitions per nsqd by default = this over the nodes; :func:`nsqpy.spark.register` sets it
    #: to the session's parallelism (the executors' cores) on the class it registers
    default_parallelism = 2

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        # only reads ask for a schema (writes get the DataFrame's): check the source options
        # here, on load(), rather than later in the query's runner; and choose the reader here,
        # once, since this instance is what the runner and the planner both get
        from .batch import is_batch_read

        if is_batch_read(self.options):
            # spark.read: plan the history read now, so every action of this DataFrame reads
            # the same rows (the plan travels with the pickled instance)
            if "_slices" not in self.__dict__:
                from .batch import BatchConfig, plan

                self._slices = plan(BatchConfig.from_options(self.options), type(self).default_parallelism)
            return SCHEMA
        cfg = SourceConfig.from_options(self.options)
        self._reader_mode(cfg)
        if "_prepared" not in self.__dict__:
            from .start import prepare_channel

            prepare_channel(cfg)  # the channel exists (from startingPosition) before start()
            self._prepared = True
        return SCHEMA

    def _reader_mode(self, cfg: SourceConfig) -> str:
        mode = self.__dict__.get("_mode")
        if mode is None:
            from .mode import choose_mode

            mode = self._mode = choose_mode(cfg)
        return mode

    def simpleStreamReader(self, schema: StructType) -> NsqStreamReader:
        return NsqStreamReader(SourceConfig.from_options(self.options))

    def streamReader(self, schema: StructType) -> Any:
        cfg = SourceConfig.from_options(self.options)
        if self._reader_mode(cfg) == "executor":
            from .partitioned import NsqPartitionedReader

            return NsqPartitionedReader(cfg, type(self).default_parallelism)
        # the Simple reader is the one whose read() runs where the connections live
        raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"})

    def reader(self, schema: StructType) -> Any:
        """``spark.read``: the history nsqd retained (:mod:`nsqpy.spark.batch`)."""
        from .batch import BatchConfig, NsqHistoryReader

        return NsqHistoryReader(BatchConfig.from_options(self.options, SOURCE_KEYS),
                                self.__dict__.get("_slices"), type(self).default_parallelism)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from .sink import NsqWriter

        return NsqWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from .sink import NsqStreamWriter

        return NsqStreamWriter(self.options, schema)


class NsqStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """The picklable face of the source; the live part is created on first use in the runner."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._rt: _SourceRuntime | None = None
        self._available_now_target: int | None | bool = False  # False: not AvailableNow

    def __getstate__(self) -> dict[str, Any]:
        # the planner pickles a second reader (and executors get copies): never sockets/threads
        return {"config": self.config, "_rt": None, "_available_now_target": False}

    def _runtime(self) -> _SourceRuntime:
        if self._rt is None:
            self._rt = _SourceRuntime(self.config)
        return self._rt

    def initialOffset(self) -> dict[str, Any]:
        # a new checkpoint: the channel starts at startingPosition (a no-op when load() made it)
        from .start import prepare_channel

        prepare_channel(self.config)
        return {"seq": 0, "flush": 0}

    def read(self, start: dict[str, Any]) -> tuple[Iterator[Any], dict[str, Any]]:
        return self._runtime().read(start)

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[Any]:
        # a batch replayed after a restart: its messages were never FINed and come back from
        # nsqd when their msg_timeout expires, in a later batch
        if end != start:
            log.info("nsq source: batch %s..%s replayed after a restart is empty; nsqd redelivers "
                     "its messages after their msg_timeout", start, end)
        return iter([])

    def commit(self, end: dict[str, Any]) -> None:
        if self._rt is not None:
            self._rt.commit(end)

    def prepareForTriggerAvailableNow(self) -> None:
        # snapshot the backlog before our own connections take messages in flight
        rt = self._rt
        held = rt.held_count() if rt is not None else 0
        counted_from = rt.received if rt is not None else 0
        target = backlog(self.config)
        if target is not None:
            target = max(0, target - held)
        self._runtime().start_available_now(target, counted_from)

    def stop(self) -> None:  # never called by PySpark 4.x (the runner is killed); for completeness
        if self._rt is not None:
            self._rt.close()
            self._rt = None


# --- backlog for AvailableNow ---------------------------------------------------------------


def _http_get_json(url: str, timeout: float = 5.0, secret: str | None = None) -> Any:
    req = urllib.request.Request(url, headers={"Accept": ACCEPT, **bearer(secret)})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return orjson.loads(resp.read())


def nsqd_http_nodes(cfg: SourceConfig) -> list[str] | None:
    """nsqd HTTP addresses carrying the topic: from lookupd, plus ``nsqdHttpAddresses``."""
    nodes = [a if "://" in a else "http://" + a for a in cfg.nsqd_http]
    for addr in cfg.lookupd_http:
        try:
            data = _http_get_json(lookup_url(addr, cfg.topic))
        except urllib.error.HTTPError as err:
            if err.code == 404:
                continue
            log.warning("nsq source: lookupd %s: %s", addr, err)
            continue
        except (OSError, ValueError) as err:
            log.warning("nsq source: lookupd %s: %s", addr, err)
            continue
        if "status_code" in data and isinstance(data.get("data"), dict):
            data = data["data"]
        for p in data.get("producers") or ():
            host = p.get("broadcast_address") or p.get("address")
            url = "http://" + join_host_port(str(host), p.get("http_port"))  # [v6]:port
            if url not in nodes:
                nodes.append(url)
    if not nodes and not cfg.lookupd_http:
        return None  # TCP addresses only: the backlog cannot be known
    return nodes


def channel_backlog(stats: Any, topic: str, channel: str) -> tuple[int, int]:
    """(queued + deferred, in flight) for our channel in one nsqd's ``/stats`` JSON.

    A channel that does not exist yet gets the topic's queue when we SUB, if the topic has no
    channel at all (nsqd holds messages in a channel-less topic); otherwise it starts empty.
    """
    if isinstance(stats, dict) and "data" in stats and "topics" not in stats:
        stats = stats["data"]
    for t in stats.get("topics") or ():
        if t.get("topic_name") != topic:
            continue
        channels = t.get("channels") or []
        for c in channels:
            if c.get("channel_name") == channel:
                return int(c.get("depth", 0)) + int(c.get("deferred_count", 0)), int(c.get("in_flight_count", 0))
        if not channels:
            return int(t.get("depth", 0)), 0
    return 0, 0


def backlog_parts(cfg: SourceConfig, strict: bool = True) -> tuple[int, int] | None:
    """(queued + deferred, in flight) for our channel over all its nsqd, or None if unknown.

    ``strict``: an nsqd whose ``/stats`` cannot be read makes the answer unknown; otherwise
    it is skipped (it has nothing for us that we could count anyway).
    """
    nodes = nsqd_http_nodes(cfg)
    if nodes is None:
        return None
    queued = in_flight = 0
    for base in nodes:
        try:
            # no channel filter: nsqd lists no topic at all when the channel does not exist yet
            stats = _http_get_json(f"{base}/stats?format=json&topic={cfg.topic}",
                                   secret=cfg.connection.get("auth_secret"))
        except (OSError, ValueError) as err:
            log.warning("nsq source: %s/stats: %s", base, err)
            if strict:
                return None
            continue
        q, f = channel_backlog(stats, cfg.topic, cfg.channel)
        queued += q
        in_flight += f
    return queued, in_flight


def backlog(cfg: SourceConfig) -> int | None:
    """Messages waiting for our channel now (queued + deferred + in flight), or None if unknown."""
    parts = backlog_parts(cfg, strict=False)
    return None if parts is None else parts[0] + parts[1]


# --- the live part, in the streaming source runner --------------------------------------------


class _Node:
    """One nsqd (``host:port``) and the connections we hold to it."""

    def __init__(self, address: str, direct: bool) -> None:
        self.address = address
        self.direct = direct
        self.listed = not direct  # currently listed by lookupd
        self.retiring = False
        self.slots: list[asyncio.Task[None] | None] = []
        self.conns: set[NSQConnection] = set()
        self.first_attempt = asyncio.Event()

    @property
    def wanted(self) -> bool:
        return (self.direct or self.listed) and not self.retiring


class _SourceRuntime:
    """I/O thread, connections and held messages of one query run (never pickled)."""

    def __init__(self, cfg: SourceConfig) -> None:
        self.cfg = cfg
        self.arrow_schema = arrow_schema()
        self.lock = threading.Lock()
        self.wakeup = threading.Event()
        # one MessageBatch per read of one connection; no object per message
        self.buffer: deque[MessageBatch] = deque()
        self.pending: dict[int, list[MessageBatch]] = {}
        self.received = 0
        self.closing = False
        self.error: str | None = None  # a configuration error found by the I/O thread
        self.finished = False  # AvailableNow: target reached, no more messages taken
        self.available_now = False
        self.an_target: int | None = None
        self.an_start_received = 0
        self.an_idle_since: float | None = None
        self.an_last_check = 0.0
        self.nodes: dict[str, _Node] = {}
        self.conns: set[NSQConnection] = set()
        self.io = LoopThread(name="nsqpy-spark-source")
        try:
            self.io.run(self._start(), timeout=cfg.start_timeout + cfg.connection["connect_timeout"] + 5)
        except BaseException:
            self.io.stop()
            raise

    # --- loop thread ------------------------------------------------------------------------

    async def _start(self) -> None:
        cfg = self.cfg
        self.copts = connection_options(
            cfg.connection,
            msg_timeout=cfg.msg_timeout,
            output_buffer_size=cfg.output_buffer_size,
            output_buffer_timeout=cfg.output_buffer_timeout,
        )
        self.tasks: set[asyncio.Task[Any]] = set()
        self.lookupd_recheck = asyncio.Event()
        self.poller: LookupdPoller | None = None
        for addr in cfg.nsqd_tcp:
            self._add_node(addr, direct=True)
        if cfg.lookupd_http:
            self.poller = LookupdPoller(
                cfg.lookupd_http, cfg.topic, timeout=10.0, auth_secret=cfg.connection.get("auth_secret")
            )
            await self._query_lookupd()
            self._spawn(self._lookupd_loop())
        self._spawn(self._touch_loop())
        self._spawn(self._housekeeping_loop())
        # let the first connection attempt of every known node finish, so the first batch
        # is not empty merely because we were still dialling
        waits = [n.first_attempt.wait() for n in self.nodes.values()]
        if waits and cfg.start_timeout > 0:
            try:
                async with asyncio.timeout(cfg.start_timeout):
                    await asyncio.gather(*waits)
            except TimeoutError:
                log.warning("nsq source: not every nsqd answered within %.1fs", cfg.start_timeout)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def _add_node(self, address: str, direct: bool) -> _Node:
        node = self.nodes.get(address)
        if node is None:
            node = self.nodes[address] = _Node(address, direct)
        node.direct = node.direct or direct
        if not direct:
            node.listed = True
        node.retiring = False
        self._ensure_slots(node, max(1, len(node.slots)))
        return node

    def _ensure_slots(self, node: _Node, count: int) -> None:
        while len(node.slots) < count:
            node.slots.append(None)
        for i, task in enumerate(node.slots):
            if task is None or task.done():
                node.slots[i] = self._spawn(self._keep(node, i))

    async def _keep(self, node: _Node, slot: int) -> None:
        """Hold one connection (slot) to one nsqd while the node is wanted."""
        cfg = self.cfg
        host, port = parse_address(node.address)
        backoff = ReconnectBackoff(cfg.reconnect_interval, 30.0)
        while node.wanted and not self.closing:
            try:
                async with asyncio.timeout(2 * self.copts.connect_timeout):  # connect, IDENTIFY, SUB
                    conn = await subscribe(
                        host, port, cfg.topic, cfg.channel, on_messages=self._on_messages, options=self.copts
                    )
            except (OSError, NSQError, TimeoutError) as err:
                if isinstance(err, IdentifyError) or (isinstance(err, NSQErrorResponse) and err.code in CONFIG_ERRORS):
                    self._fail(f"nsq source: {node.address} refused us: {err}")
                    node.first_attempt.set()
                    return
                delay = backoff.next_delay()
                log.warning("nsq source: cannot subscribe at %s (%s); retry in %.1fs", node.address, err, delay)
                node.first_attempt.set()
                if not node.direct and slot == 0:
                    self.lookupd_recheck.set()
                await asyncio.sleep(delay)
                continue
            if self.copts.tls is not None and not conn.identify_response.get("tls_v1"):
                conn.abort()
                self._fail(f"nsq source: TLS was asked for but {node.address} did not negotiate it")
                node.first_attempt.set()
                return
            backoff.reset()
            if not node.wanted or self.closing:
                conn.close()
                break
            node.conns.add(conn)
            self.conns.add(conn)
            if slot == 0:
                self._ensure_slots(node, self._slots_wanted(conn))
            self._rebalance()
            node.first_attempt.set()
            log.info("nsq source: subscribed %s/%s at %s (slot %d, max_rdy_count %d)",
                     cfg.topic, cfg.channel, node.address, slot, conn.max_rdy_count)
            await conn.wait_closed()
            node.conns.discard(conn)
            self.conns.discard(conn)
            self._rebalance()
            if self.closing or not node.wanted:
                break
            log.warning("nsq source: lost %s (%s)", node.address, conn.close_reason)
            if not node.direct:
                self.lookupd_recheck.set()
            await asyncio.sleep(backoff.next_delay())

    def _fail(self, reason: str) -> None:
        """A configuration error: the next read() raises it and the query fails."""
        log.error("%s", reason)
        if self.error is None:
            self.error = reason
        self.wakeup.set()

    def _slots_wanted(self, conn: NSQConnection) -> int:
        if self.cfg.conns_per_node:
            return self.cfg.conns_per_node
        need = math.ceil(self.cfg.max_in_flight / max(1, conn.max_rdy_count))
        return max(1, min(MAX_CONNECTIONS_PER_NODE, need))

    def _rebalance(self) -> None:
        """RDY per connection: an equal share of maxInFlight, never above nsqd's max_rdy_count."""
        live = [c for c in self.conns if c.is_usable]
        if not live:
            return
        share = max(1, math.ceil(self.cfg.max_in_flight / len(live)))
        for conn in live:
            node = self.nodes.get(conn.address)
            want = 0 if self.finished or (node is not None and node.retiring) else min(share, conn.max_rdy_count)
            if conn.rdy != want:
                conn.ready(want)

    def _on_messages(self, batch: MessageBatch) -> None:
        if self.finished:  # AvailableNow is over: hand them straight back to the channel
            batch.conn.requeue_ids(batch.ids, 0)
            return
        with self.lock:  # held_count iterates the buffer from the runner's thread
            self.buffer.append(batch)
        self.received += len(batch)
        if not self.wakeup.is_set():
            self.wakeup.set()

    async def _lookupd_loop(self) -> None:
        while not self.closing:
            try:
                async with asyncio.timeout(self.cfg.lookupd_poll_interval):
                    await self.lookupd_recheck.wait()
                await asyncio.sleep(min(1.0, self.cfg.lookupd_poll_interval))  # let a flapping node settle
            except TimeoutError:
                pass
            self.lookupd_recheck.clear()
            await self._query_lookupd()

    async def _query_lookupd(self) -> None:
        assert self.poller is not None
        found = await self.poller.query()
        if found is None:
            return
        for addr in found:
            node = self.nodes.get(addr)
            if node is None or not node.wanted or not node.listed:
                self._add_node(addr, direct=False)
        for addr, node in self.nodes.items():
            if addr not in found and node.listed and not node.direct:
                log.info("nsq source: %s left lookupd; no new messages taken there", addr)
                node.listed = False
                node.retiring = True
        self._rebalance()  # retired nodes to RDY 0, a node listed again back to its share

    async def _touch_loop(self) -> None:
        """TOUCH what has been held for half a ``touchIntervalMs``, so nsqd keeps it ours
        however slow the batch: checked every half interval, a message is touched before it
        has been held a whole interval (shorter than msg_timeout). Messages committed sooner,
        the usual case, are never touched."""
        half = self.cfg.touch_interval / 2
        loop = asyncio.get_running_loop()
        while not self.closing:
            await asyncio.sleep(half)
            with self.lock:
                held = list(self.buffer)
                for batches in self.pending.values():
                    held.extend(batches)
            due = loop.time() - half
            for batch in held:
                if batch.since <= due:
                    batch.touch()

    async def _housekeeping_loop(self) -> None:
        """Close connections to retired nodes once nothing they delivered waits for a FIN."""
        while not self.closing:
            await asyncio.sleep(0.5)
            for node in list(self.nodes.values()):
                if node.retiring:
                    for conn in list(node.conns):
                        if conn.in_flight <= 0:
                            conn.close()

    def _finish_messages(self, batches: list[MessageBatch]) -> int:
        for batch in batches:
            batch.conn.finish_ids(batch.ids)
        return sum(len(b) for b in batches)

    def _stop_taking(self) -> None:
        self.finished = True
        self._rebalance()

    async def _close(self) -> None:
        self.closing = True
        for task in list(self.tasks):
            task.cancel()
        for conn in list(self.conns):
            conn.close()
        if self.poller is not None:
            await self.poller.close()

    # --- the runner's thread ----------------------------------------------------------------

    def held_count(self) -> int:
        with self.lock:
            return sum(map(len, self.buffer)) + sum(
                len(b) for batches in self.pending.values() for b in batches)

    def _take(self, limit: int, timeout: float) -> list[MessageBatch]:
        """Up to ``limit`` buffered messages, whole reads (the last one split if need be)."""
        deadline = time.monotonic() + timeout
        buffer = self.buffer
        while not buffer:
            self.wakeup.clear()
            if buffer:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.error is not None:
                return []
            self.wakeup.wait(remaining)
        out: list[MessageBatch] = []
        room = limit
        with self.lock:
            while buffer and room > 0:
                batch = buffer[0]
                if len(batch) > room:
                    batch = batch.split(room)
                else:
                    buffer.popleft()
                if batch.conn.is_closed:
                    continue  # cannot be FINed any more; nsqd will redeliver them
                out.append(batch)
                room -= len(batch)
        return out

    def read(self, start: dict[str, Any]) -> tuple[Iterator[Any], dict[str, Any]]:
        seq = int(start.get("seq", 0))
        flush = int(start.get("flush", 0))
        while True:
            if self.error is not None:
                raise RuntimeError(self.error)
            if self.available_now and not self.finished:
                self._check_available_now_done()
            timeout = 0.0 if self.finished else self.cfg.poll_timeout
            batches = self._take(self.cfg.max_batch_size, timeout)
            if batches:
                self.an_idle_since = None
                rows = self._to_arrow(batches)
                end = {"seq": seq + rows.num_rows, "flush": flush}
                with self.lock:
                    self.pending[end["seq"]] = batches
                return iter([rows]), end
            with self.lock:
                unacked = bool(self.pending)
            if unacked:
                # no new data, but the last batch waits for commit(): an empty batch makes
                # Spark commit it now instead of whenever data comes again
                return iter([]), {"seq": seq, "flush": flush + 1}
            if not self.available_now or self.finished:
                return iter([]), start
            # AvailableNow: returning `start` would end the query, so wait here until the
            # backlog has been read (or is known to be gone)
            self._available_now_idle()

    def _to_arrow(self, batches: list[MessageBatch]) -> Any:
        """One Arrow record batch; every column is built from whole lists by Arrow itself."""
        ids: list[bytes] = []
        bodies: list[bytes] = []
        timestamps: list[int] = []
        attempts: list[int] = []
        addresses: list[str] = []
        for b in batches:
            ids += b.ids
            bodies += b.bodies
            timestamps += b.timestamps
            attempts += b.attempts
            addresses += [b.conn.address] * len(b.ids)
        return record_batch(ids, bodies, timestamps, attempts, addresses, self.cfg.topic,
                            self.cfg.channel, self.arrow_schema)

    def commit(self, end: dict[str, Any]) -> None:
        upto = int(end.get("seq", 0))
        with self.lock:
            keys = [k for k in self.pending if k <= upto]
            batches = [b for k in sorted(keys) for b in self.pending.pop(k)]
        if not batches:
            return
        n = self.io.run(lambda: self._finish_messages(batches), timeout=60)
        self.io.run(asyncio.sleep(0), timeout=60)  # the FINs' write happened before this turn
        log.debug("nsq source: FIN %d messages up to seq %d", n, upto)

    # --- AvailableNow -------------------------------------------------------------------------

    def start_available_now(self, target: int | None, counted_from: int) -> None:
        """``target`` messages were waiting when ``received`` was ``counted_from``."""
        self.available_now = True
        self.an_target = target
        self.an_start_received = counted_from
        log.info("nsq source: trigger AvailableNow, backlog %s", "unknown" if target is None else target)
        if target == 0:
            self._finish_available_now()

    def _check_available_now_done(self) -> None:
        if self.an_target is not None and self.received - self.an_start_received >= self.an_target:
            self._finish_available_now()

    def _available_now_idle(self) -> None:
        """Nothing arrived within the poll timeout: is the backlog gone?"""
        now = time.monotonic()
        if self.an_idle_since is None:
            self.an_idle_since = now
        if self.an_target is None:
            if now - self.an_idle_since >= self.cfg.available_now_idle and any(c.is_usable for c in list(self.conns)):
                self._finish_available_now()
            return
        # fewer messages than the snapshot may ever come (another consumer FINed some of what
        # was in flight): ask nsqd whether anything is left that is not ours
        if now - self.an_last_check < 1.0:
            return
        self.an_last_check = now
        parts = backlog_parts(self.cfg)
        if parts is None:  # nsqd's HTTP side unreachable: fall back to the idle rule
            if now - self.an_idle_since >= max(self.cfg.available_now_idle, self.cfg.msg_timeout):
                self._finish_available_now()
            return
        queued, in_flight = parts
        if queued == 0 and in_flight <= self.held_count():
            self._finish_available_now()

    def _finish_available_now(self) -> None:
        if not self.finished:
            self.io.run(self._stop_taking, timeout=30)
            log.info("nsq source: AvailableNow backlog read (%d messages)", self.received - self.an_start_received)

    def close(self) -> None:
        try:
            self.io.run(self._close(), timeout=10)
        finally:
            self.io.stop()
