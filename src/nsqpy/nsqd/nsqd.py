"""The NSQD object: topics, clients, health, metadata, lookupd registration and the periodic scans.

This is the core every other part of nsqd stands on. It opens no listener and imports no feature:
the server (``server.py``) runs it, puts the V2 and HTTP listeners in front of it and installs the
features the flags ask for through the hooks of ``hooks.py`` (``lifecycle``, ``replicator``,
``replicas``, ``auth``, ``http_routes``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Iterator

from .. import NSQ_COMPAT_VERSION
from ..common.daemon import Fatal
from ..common.goweb import go_json
from ..protocol.commands import Limits
from ..protocol.message import MESSAGE_HEADER_SIZE, IdFactory
from ..protocol.names import is_ephemeral, is_valid_name
from .diskqueue import DiskQueue, DummyQueue
from .hooks import Lifecycle, Replication, RouteProvider, Upstream
from .lookup import LookupdPeers
from .metadata import (
    METADATA_FILE, DataPathLock, GoPathError, MetadataDamaged, MetadataWriter, queues_on_disk,
    read_metadata, take_deferred_sidecar, write_deferred_sidecar,
)
from .options import Options, topology_set
from .storage.commit import GroupCommit
from .topic import Topic

if TYPE_CHECKING:
    from .channel import Channel
    from .hooks import Consumer

SCAN_INTERVAL = 0.1  # upstream's QueueScanInterval
BACKEND_TICK_INTERVAL = 0.25


def _name(owner: "Channel") -> str:
    return owner.name


def _call(put: Callable[..., None], *args: Any) -> None:
    put(*args)


class NSQD:
    def __init__(self, options: Options, logger: logging.Logger) -> None:
        self.options = options
        self.logger = logger
        self.loop: asyncio.AbstractEventLoop = asyncio.get_event_loop()
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, "Consumer"] = {}
        self.id_factory = IdFactory(options.node_id)
        self.limits = Limits(
            max_msg_size=options.max_msg_size,
            max_body_size=options.max_body_size,
            max_req_timeout_ms=int(options.max_req_timeout * 1000),
            max_defer_timeout_ms=int(options.max_defer_timeout * 1000),
        )
        self.start_time = int(time.time())
        self.exiting = False
        self.draining = False  # POST /drain or SIGUSR2 (see lifecycle/drain.py)
        self.internal_publish = False  # dead-lettering under way: a drain lets it publish
        self.health_error: str | None = None
        self.data_path = options.data_path or os.getcwd()
        # --keep-deferred-delays: deferred due times saved beside the disk queues at shutdown
        # (off: the data directory holds only upstream's files, delays are lost as upstream's)
        self.keep_deferred_delays = bool(options.values.get("keep_deferred_delays"))
        self.tcp_port = 0  # the listeners' ports, once the server has them open
        self.http_port = 0
        self.https_port = 0
        self._client_ids = itertools.count(1)
        self._tasks: list[asyncio.Task] = []
        self._lock = DataPathLock(self.data_path)
        self._started = False  # metadata loaded: shutdown persists and flushes
        self._loading = False
        self.metadata = MetadataWriter(os.path.normpath(os.path.join(self.data_path, METADATA_FILE)),
                                       self._metadata_entries, self.loop, logger)
        #: channels with consumers, orphaned in-flight messages or deferred ones: the only ones
        #: the 100 ms scan visits (a channel adds itself; the scan drops it once it has none)
        self.busy_channels: set["Channel"] = set()
        #: disk queues read or written since their last sync: the only ones the sync tick visits
        self.active_backends: set[DiskQueue] = set()
        #: with --sync-every=1 every write that must be on disk before its answer goes through
        #: one group commit (storage/commit.py): the disk queues', the history's
        self.commit: GroupCommit | None = None
        #: ``publish(put, *args)``: how the publishing commands call the topic's ``put_many``,
        #: ``put_deferred`` and ``put_run`` (their answer waits for the group commit's flush, so
        #: their writes wait for its batch: ``GroupCommit.publish``); a plain call without it
        self.publish: Callable[..., None] = _call
        if options.sync_every <= 1:
            self.commit = GroupCommit(self.loop, logger)
            self.commit.on_result = self._commit_result
            self.publish = self.commit.publish
        #: the data directory's queue files at start, by queue name (see :meth:`make_backend`)
        self._files_at_start: dict[str, list[str]] | None = None
        # --- hooks (hooks.py): what the server installs for the features the flags ask for ---
        self.lifecycle: Lifecycle = Upstream()
        self.http_routes: list[RouteProvider] = []
        self.tls_context: Any = None  # ssl.SSLContext with --tls-cert/--tls-key (v2/tls.py)
        self.auth: Any = None  # auth.client.AuthClient with --auth-http-address
        self.http_auth: Any = None  # auth.http.HttpAuth with it: the HTTP routes' check
        self.replicator: Replication | None = None  # with --replicate-to (replication/origin.py)
        self.replicas: Any = None  # replication.peer.ReplicaHost with --accept-replicas
        self.leases: Any = None  # leases.registry.Leases with --leases (docs/leases.md)
        self.history: Any = None  # history.room.History once a topic keeps history
        self.http_apps: list[Any] = []  # the HTTP(S) listeners' APIs (a late feature adds routes)
        #: a returning replicating origin delivers nothing until it has reconciled with its peer
        self.holding_delivery = False
        self.lookup = LookupdPeers(options.lookupd_tcp_address, self.lookupd_identity,
                                   self.registrations, logger,
                                   max_body_size=options.max_body_size)

    # --- health --------------------------------------------------------------------------------

    def set_health_error(self, err: BaseException) -> None:
        if self.health_error is None:
            self.logger.error("diskqueue write failed, health NOK - %s", err)
        self.health_error = str(err)

    def set_health_ok(self) -> None:
        if self.health_error is not None:
            self.logger.info("health restored")
            self.health_error = None

    def _commit_result(self, err: OSError | None) -> None:
        if err is not None:
            self.set_health_error(err)
        elif self.health_error is not None:
            self.set_health_ok()

    @property
    def health(self) -> str:
        return "OK" if self.health_error is None else f"NOK - {self.health_error}"

    # --- backends ------------------------------------------------------------------------------

    def make_backend(self, name: str, ephemeral: bool,
                     on_commit: Callable[[], None] | None = None) -> Any:
        """A topic's or channel's disk queue; with ``--sync-every=1`` it writes through the
        group commit and calls ``on_commit`` once what it staged is readable."""
        if ephemeral:
            return DummyQueue()
        opts = self.options
        name = name.replace("/", "_")
        queue = DiskQueue(
            name=name,
            data_path=self.data_path,
            max_bytes_per_file=opts.max_bytes_per_file,
            min_msg_size=MESSAGE_HEADER_SIZE,
            max_msg_size=opts.max_msg_size + MESSAGE_HEADER_SIZE,
            sync_every=opts.sync_every,
            sync_timeout=opts.sync_timeout,
            logger=self.logger,
            files=self._leftover_files(name),
        )
        queue.commit = self.commit
        queue.on_commit = on_commit
        queue.watch = self.active_backends  # it adds itself when read or written
        if not queue.idle:
            self.active_backends.add(queue)
        return queue

    def _leftover_files(self, queue_name: str) -> list[str]:
        """The files a new queue may find of its own: only those already there at start (a
        queue deleted since removed its files, and no other writes them). The directory is
        listed once, not once per queue: with thousands of queues that listing was most of what
        a create cost."""
        if self._files_at_start is None:
            self._files_at_start = {}
            try:
                names = os.listdir(self.data_path)
            except OSError:
                names = []
            for fn in names:
                cut = fn.rfind(".diskqueue.")
                if cut > 0:
                    self._files_at_start.setdefault(fn[:cut], []).append(fn)
        return self._files_at_start.pop(queue_name, [])

    # --- topics --------------------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = Topic(name, self)
            self.topics[name] = topic
            self.logger.info("TOPIC(%s): created", name)
            self.on_topic_created(topic)
        return topic

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        self.logger.info("TOPIC(%s): deleting", name)
        channels = list(topic.channels)
        topic.delete()
        self.on_topic_deleted(topic)
        # as upstream, each of its channels is unregistered after the topic (nsqlookupd then
        # drops an ephemeral channel's registration)
        for channel in channels:
            self.lookup.unregister(name, channel)
        return True

    def get_existing_topic(self, name: str) -> Topic | None:
        return self.topics.get(name)

    # --- lookupd registration and metadata: every create/delete is announced and persisted ---

    def on_topic_created(self, topic: Topic) -> None:
        self.lookup.register(topic.name)
        self._schedule_persist(topic.ephemeral)
        if not self._loading and (self.lookup.http_addresses() or self.lookup.identifying()):
            topic.ready = False  # messages wait until lookupd's channels exist
            task = self.loop.create_task(self._precreate_channels(topic))
            self._tasks.append(task)
            task.add_done_callback(self._forget_task)
        elif not self._loading and self.options.lookupd_tcp_address:
            self.logger.error("no available nsqlookupd to query for channels to pre-create for "
                              "topic %s", topic.name)

    def on_topic_deleted(self, topic: Topic) -> None:
        self.lookup.unregister(topic.name)
        self._schedule_persist(topic.ephemeral)
        if self.replicator is not None:
            self.replicator.topic_deleted(topic)

    def on_channel_created(self, topic: Topic, channel: "Channel") -> None:
        self.lookup.register(topic.name, channel.name)
        self._schedule_persist(channel.ephemeral)
        if self.replicator is not None:
            self.replicator.channel_created(channel)

    def on_channel_deleted(self, topic: Topic, channel: "Channel") -> None:
        self.lookup.unregister(topic.name, channel.name)
        self._schedule_persist(channel.ephemeral)
        if self.replicator is not None:
            self.replicator.channel_deleted(channel)

    def _forget_task(self, task: asyncio.Task) -> None:
        try:
            self._tasks.remove(task)
        except ValueError:
            pass

    async def _precreate_channels(self, topic: Topic) -> None:
        """Ask every lookupd which channels the topic has, so none misses the first messages."""
        from urllib.parse import quote_plus

        import aiohttp
        from yarl import URL

        opts = self.options
        timeout = aiohttp.ClientTimeout(total=opts.http_client_request_timeout,
                                        connect=opts.http_client_connect_timeout)
        names: set[str] = set()
        errors: list[str] = []
        try:
            await self.lookup.first_answers()
            addrs = self.lookup.http_addresses()
            if not addrs:
                self.logger.error("no available nsqlookupd to query for channels to pre-create "
                                  "for topic %s", topic.name)
                return
            async with aiohttp.ClientSession(timeout=timeout) as session:
                for addr in addrs:
                    # upstream's clusterinfo line, which operators grep for
                    url = f"http://{addr}/channels?topic={quote_plus(topic.name)}"
                    self.logger.info("CI: querying nsqlookupd %s", url)
                    try:
                        async with session.get(URL(url, encoded=True), headers={
                                "Accept": "application/vnd.nsq; version=1.0"}) as resp:
                            if resp.status != 200:
                                errors.append(f"got response {resp.status} {resp.reason} "
                                              f"{(await resp.read())!r}")
                                continue
                            doc = await resp.json(content_type=None)
                    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as err:
                        errors.append(f"Get \"{url}\": {err or type(err).__name__}")
                        continue
                    for name in doc.get("channels") or []:
                        if isinstance(name, str) and is_valid_name(name) and not is_ephemeral(name):
                            names.add(name)
            if errors:
                text = "\n".join(errors)
                if len(errors) == len(addrs):
                    text = f"failed to query any nsqlookupd: {text}"
                self.logger.warning("failed to query nsqlookupd for channels to pre-create for "
                                    "topic %s - %s", topic.name, text)
        finally:
            if not topic.exiting:
                for name in sorted(names):
                    topic.get_channel(name)
                topic.start()

    def registrations(self) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = []
        for topic in self.topics.values():
            if not topic.channels:
                out.append((topic.name, None))
            for name in topic.channels:
                out.append((topic.name, name))
        return out

    def lookupd_identity(self) -> dict[str, Any]:
        opts = self.options
        return {
            "version": NSQ_COMPAT_VERSION,
            "tcp_port": opts.broadcast_tcp_port or self.tcp_port,
            "http_port": opts.broadcast_http_port or self.http_port,
            "hostname": socket.gethostname(),
            "broadcast_address": opts.broadcast_address,
            **({"topology_zone": opts.topology_zone, "topology_region": opts.topology_region}
               if topology_set(opts) else {}),
        }

    def set_lookupd_addresses(self, addresses: list[str]) -> None:
        """``PUT /config/nsqlookupd_tcp_addresses``: add and drop peers live."""
        self.lookup.set_addresses(addresses)

    def _schedule_persist(self, ephemeral: bool) -> None:
        if ephemeral or self._loading:
            return
        self.metadata.changed()

    def persisted(self) -> "asyncio.Future[None]":
        """Done once nsqd.dat holds every change made so far (a pause is answered then, as
        upstream answers it after its PersistMetadata); the event loop does not wait for it."""
        return self.metadata.persisted()

    def persist_metadata(self) -> None:
        """Write nsqd.dat now, on the calling thread (start-up and exit; upstream's JSON,
        ephemeral topics and channels left out). GoPathError when it cannot be written."""
        self.metadata.write()

    def _metadata_entries(self) -> Iterator[bytes]:
        """nsqd.dat's topic entries, encoded one by one, sorted by name. Run by the metadata
        thread too: each dict is copied in one C call (atomic under the GIL) before it is walked,
        and a topic deleted meanwhile is skipped, so every change made before the call is in."""
        topics = self.topics
        for name in sorted(topics):
            topic = topics.get(name)
            if topic is None or topic.ephemeral:
                continue
            channels = [self._entry({"name": c.name, "paused": c.paused}, c)
                        for c in sorted(topic.channels.copy().values(), key=_name)
                        if not c.ephemeral]
            yield go_json(self._entry({"name": topic.name, "paused": topic.paused,
                                       "channels": channels or None}, topic))

    def _entry(self, entry: dict[str, Any], owner: "Topic | Channel") -> dict[str, Any]:
        """An nsqd.dat entry; a feature's settings go under an extra ``"config"`` key, which
        upstream's decoder ignores (see lifecycle/config.py)."""
        extra = self.lifecycle.persisted(owner)
        if extra is not None:
            entry["config"] = extra
        return entry

    def load_metadata(self) -> None:
        """Recreate topics and channels (and their pause state) from nsqd.dat; from the disk
        queues' names when nsqd.dat is damaged (see :meth:`_rebuild_metadata`)."""
        try:
            topics = read_metadata(self.data_path)
        except MetadataDamaged as err:
            topics = self._rebuild_metadata(err)
        except OSError as err:
            path = os.path.join(self.data_path, METADATA_FILE)
            raise Fatal(f"failed to load metadata - failed to read metadata from {path} - "
                        f"{GoPathError('open', path, err)}") from None
        if topics is None:
            return
        self._loading = True
        try:
            for t in topics:
                name = t["name"]
                if not is_valid_name(name):
                    self.logger.warning("skipping creation of invalid topic %s", name)
                    continue
                topic = self.get_topic(name)
                self.lifecycle.restore(topic, t.get("config"))
                if t["paused"]:
                    topic.pause()
                for c in t["channels"]:
                    cname = c["name"]
                    if not is_valid_name(cname):
                        self.logger.warning("skipping creation of invalid channel %s", cname)
                        continue
                    channel = topic.get_channel(cname)
                    self.lifecycle.restore(channel, c.get("config"))
                    if c["paused"]:
                        channel.pause()
        finally:
            self._loading = False

    def _rebuild_metadata(self, damage: MetadataDamaged) -> list[dict[str, Any]]:
        """nsqd.dat is damaged (issue #36): rather than start with no topics while their
        messages wait on disk, rebuild the topics and channels from the disk queues' names,
        unpaused and with default settings; keep the damaged file as ``nsqd.dat.bad``. Refuse
        to start, with upstream's FATAL line, when a queue-like file belongs to no valid name."""
        found, strays = queues_on_disk(self.data_path)
        if strays:
            self.logger.error("nsqd.dat is damaged and %s belong to no valid durable topic or "
                              "channel: not guessing what to restore", ", ".join(strays))
            raise Fatal(f"failed to load metadata - {damage}")
        path = os.path.join(self.data_path, METADATA_FILE)
        try:
            os.replace(path, path + ".bad")
        except OSError as err:
            self.logger.error("cannot keep the damaged nsqd.dat aside - %s",
                              GoPathError("rename", f"{path} {path}.bad", err))
            raise Fatal(f"failed to load metadata - {damage}") from None
        self.logger.error("%s; kept as %s.bad; rebuilding %d topic(s) from the disk queues in %s",
                          damage, path, len(found), self.data_path)
        for name, channels in found.items():
            self.logger.warning("TOPIC(%s): restored from its disk queues with channels [%s]: "
                                "unpaused, default settings", name, " ".join(channels))
        return [{"name": name, "paused": False,
                 "channels": [{"name": c, "paused": False} for c in channels]}
                for name, channels in found.items()]

    # --- clients -------------------------------------------------------------------------------

    def next_client_id(self) -> int:
        return next(self._client_ids)

    def add_client(self, client: "Consumer") -> None:
        self.clients[client.id] = client

    def remove_client(self, client: "Consumer") -> None:
        self.clients.pop(client.id, None)

    # --- periodic work -------------------------------------------------------------------------

    async def _scan_loop(self) -> None:
        """Requeue timed-out in-flight messages and release due deferred ones (every 100 ms).

        Only channels in :attr:`busy_channels` are visited: those with consumers, orphaned
        in-flight messages or deferred ones. An idle channel costs nothing here, however many
        there are; a channel that gets work adds itself, so nothing is found later than when
        every channel was visited."""
        busy = self.busy_channels
        while True:
            await asyncio.sleep(SCAN_INTERVAL)
            now = time.monotonic()
            for channel in list(busy):
                # orphans too: a closed connection's (or a lease's) messages time out
                # whether or not anyone is still subscribed
                if channel.exiting or not (channel.deferred or channel.clients or channel.orphans):
                    busy.discard(channel)
                else:
                    channel.scan(now)

    async def _backend_loop(self) -> None:
        """Lets disk queues fsync at least every ``--sync-timeout`` while active: only those
        read or written since their last sync (:attr:`active_backends`) are visited."""
        active = self.active_backends
        while True:
            await asyncio.sleep(BACKEND_TICK_INTERVAL)
            now = time.monotonic()
            for backend in list(active):
                backend.tick(now)
                if backend.idle:
                    active.discard(backend)

    # --- running: the server (server.py) calls these in order around its listeners -------------

    def keep_task(self, task: asyncio.Task) -> None:
        """A background task that lives until shutdown (cancelled by :meth:`close`)."""
        self._tasks.append(task)
        task.add_done_callback(self._forget_task)

    def take_deferred_due(self, queue_name: str) -> dict[bytes, int]:
        """Due times (unix ns) saved for a queue's deferred messages at the last shutdown; with
        --keep-deferred-delays only (without it the directory holds upstream's files alone)."""
        if not self.keep_deferred_delays:
            return {}
        return take_deferred_sidecar(self.data_path, queue_name)

    def save_deferred_due(self, queue_name: str, due: dict[bytes, int]) -> None:
        """Save (or, empty, remove) a queue's deferred due times; --keep-deferred-delays only."""
        if self.keep_deferred_delays:
            write_deferred_sidecar(self.data_path, queue_name, due)

    def open(self) -> None:
        """Lock the data path (OSError / RuntimeError when another nsqd holds it)."""
        self._lock.acquire()

    def load(self) -> None:
        """Recreate topics and channels from nsqd.dat, and write it back at once (upstream's
        FATAL lines when either cannot be done)."""
        self.load_metadata()
        if self.history is not None:  # logs on disk whose topic nsqd.dat did not list yet
            self._loading = True
            try:
                self.history.restore_topics()
            finally:
                self._loading = False
        try:
            self.persist_metadata()
        except OSError as err:
            raise Fatal(f"failed to persist metadata - {err}") from None
        self._started = True

    def run(self) -> None:
        """Start the periodic scans (in-flight timeouts, deferred messages, disk syncs)."""
        self._tasks.append(self.loop.create_task(self._scan_loop()))
        self._tasks.append(self.loop.create_task(self._backend_loop()))

    def close_clients(self) -> None:
        for client in list(self.clients.values()):
            client.close_connection()

    def persist_at_exit(self) -> None:
        """The final nsqd.dat, complete: written after the metadata thread has stopped."""
        self.metadata.close()
        if self._started:
            try:
                self.persist_metadata()
            except OSError as err:
                self.logger.error("failed to persist metadata - %s", err)

    async def close(self) -> None:
        """Flush every queue to disk, leave nsqlookupd, stop the scans, unlock the data path."""
        if self.commit is not None:  # what is being flushed is answered before the files close
            self.commit.drain()
        self.logger.info("NSQ: closing topics")
        for topic in list(self.topics.values()):
            topic.close(flush=True)
        if self.commit is not None:
            self.commit.close()
        self.logger.info("NSQ: stopping subsystems")
        await self.lookup.close()
        self.logger.info("QUEUESCAN: closing")
        for task in list(self._tasks):
            task.cancel()
        self._lock.release()
        self.logger.info("NSQ: bye")
