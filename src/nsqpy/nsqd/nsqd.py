"""The NSQD object: topics, clients, health, the periodic queue scan, and the listeners' lifecycle."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from ..common.addr import is_unix_socket, split_host_port
from ..protocol.commands import Limits
from ..protocol.message import MESSAGE_HEADER_SIZE, IdFactory
from .diskqueue import DiskQueue, DummyQueue
from .options import Options
from .topic import Topic

if TYPE_CHECKING:
    from .channel import Channel
    from .client import ClientV2

SCAN_INTERVAL = 0.1  # upstream's QueueScanInterval
BACKEND_TICK_INTERVAL = 0.25


class NSQD:
    def __init__(self, options: Options, logger: logging.Logger) -> None:
        self.options = options
        self.logger = logger
        self.loop: asyncio.AbstractEventLoop = asyncio.get_event_loop()
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, "ClientV2"] = {}
        self.id_factory = IdFactory(options.node_id)
        self.limits = Limits(
            max_msg_size=options.max_msg_size,
            max_body_size=options.max_body_size,
            max_req_timeout_ms=int(options.max_req_timeout * 1000),
        )
        self.start_time = int(time.time())
        self.exiting = False
        self.health_error: str | None = None
        self.data_path = options.data_path or os.getcwd()
        self.tcp_port = 0
        self.http_port = 0
        self._client_ids = itertools.count(1)
        self._tcp_server: asyncio.AbstractServer | None = None
        self._tasks: list[asyncio.Task] = []
        self.http_runner: Any = None

    # --- health --------------------------------------------------------------------------------

    def set_health_error(self, err: BaseException) -> None:
        if self.health_error is None:
            self.logger.error("diskqueue write failed, health NOK - %s", err)
        self.health_error = str(err)

    def set_health_ok(self) -> None:
        if self.health_error is not None:
            self.logger.info("health restored")
            self.health_error = None

    @property
    def health(self) -> str:
        return "OK" if self.health_error is None else f"NOK - {self.health_error}"

    # --- backends ------------------------------------------------------------------------------

    def make_backend(self, name: str, ephemeral: bool) -> Any:

        if ephemeral:
            return DummyQueue()
        opts = self.options
        return DiskQueue(
            name=name.replace("/", "_"),
            data_path=self.data_path,
            max_bytes_per_file=opts.max_bytes_per_file,
            min_msg_size=MESSAGE_HEADER_SIZE,
            max_msg_size=opts.max_msg_size + MESSAGE_HEADER_SIZE,
            sync_every=opts.sync_every,
            sync_timeout=opts.sync_timeout,
            logger=self.logger,
        )

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
        topic.delete()
        self.on_topic_deleted(topic)
        return True

    # hooks for lookupd registration and metadata persistence
    def on_topic_created(self, topic: Topic) -> None:
        pass

    def on_topic_deleted(self, topic: Topic) -> None:
        pass

    def on_channel_created(self, topic: Topic, channel: "Channel") -> None:
        pass

    def on_channel_deleted(self, topic: Topic, channel: "Channel") -> None:
        pass

    # --- clients -------------------------------------------------------------------------------

    def next_client_id(self) -> int:
        return next(self._client_ids)

    def add_client(self, client: "ClientV2") -> None:
        self.clients[client.id] = client

    def remove_client(self, client: "ClientV2") -> None:
        self.clients.pop(client.id, None)

    # --- periodic work -------------------------------------------------------------------------

    async def _scan_loop(self) -> None:
        """Requeue timed-out in-flight messages and release due deferred ones (every 100 ms)."""
        while True:
            await asyncio.sleep(SCAN_INTERVAL)
            now = time.monotonic()
            for topic in list(self.topics.values()):
                for channel in list(topic.channels.values()):
                    if channel.deferred or channel.clients:
                        channel.scan(now)

    async def _backend_loop(self) -> None:
        """Lets disk queues fsync at least every ``--sync-timeout`` while active."""
        while True:
            await asyncio.sleep(BACKEND_TICK_INTERVAL)
            now = time.monotonic()
            for topic in list(self.topics.values()):
                topic.backend.tick(now)
                for channel in list(topic.channels.values()):
                    channel.backend.tick(now)

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        from .client import ClientV2

        opts = self.options
        addr = opts.tcp_address
        if is_unix_socket(addr):
            self._tcp_server = await self.loop.create_unix_server(lambda: ClientV2(self), addr)
            self.tcp_port = -1
        else:
            host, port = split_host_port(addr)
            self._tcp_server = await self.loop.create_server(
                lambda: ClientV2(self), host or None, port, reuse_address=True, backlog=1024)
            self.tcp_port = self._tcp_server.sockets[0].getsockname()[1]
        self.logger.info("TCP: listening on %s", _sockname(self._tcp_server))
        if opts.http_address:
            from .http import start_http

            self.http_runner, self.http_port = await start_http(self, opts.http_address)
        self._tasks.append(self.loop.create_task(self._scan_loop()))
        self._tasks.append(self.loop.create_task(self._backend_loop()))

    async def shutdown(self) -> None:
        """Graceful exit: stop listening, close clients, flush queues to disk."""
        if self.exiting:
            return
        self.exiting = True
        self.logger.info("NSQ: closing")
        if self._tcp_server is not None:
            self._tcp_server.close()
        for client in list(self.clients.values()):
            client.close_connection()
        if self.http_runner is not None:
            await self.http_runner.cleanup()
        for task in self._tasks:
            task.cancel()
        for topic in list(self.topics.values()):
            topic.close(flush=True)
        self.logger.info("NSQ: bye")


def _sockname(server: asyncio.AbstractServer) -> str:
    sock = server.sockets[0]
    name = sock.getsockname()
    if sock.family == socket.AF_UNIX:
        return str(name)
    host, port = name[0], name[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
