"""nsqlookupd's TCP server: one :class:`LookupV1Protocol` per connection (reference §3.2).

Parsing and every protocol check live in :mod:`nsqpy.protocol.lookup`; this module executes the
commands against the registration DB, coalesces the replies of one read into one write, and on
disconnect (or a fatal error, which closes the connection) removes the peer from every
registration, as upstream's IOLoop does on exit.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..common.addr import join_host_port
from ..common.flags import format_duration
from ..protocol.lookup import (
    IDENTIFY, OK_RESPONSE, PING, REGISTER, BadMagic, LookupParser, V1Error, encode_response,
    parse_identify,
)
from .registration_db import PeerInfo, Producer
from .state import LookupdState

CLIENT_REG = ("client", "", "")


class LookupV1Protocol(asyncio.Protocol):
    __slots__ = ("_lookupd", "_server", "_transport", "_parser", "id", "peer", "_done",
                 "_magic_logged")

    def __init__(self, server: "TCPServer") -> None:
        self._server = server
        self._lookupd = server.lookupd
        self._transport: asyncio.Transport | None = None
        self._parser = LookupParser(self._lookupd.opts.max_body_size)
        self.id = "?"
        self.peer: PeerInfo | None = None
        self._done = False
        self._magic_logged = False

    # --- asyncio callbacks ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peername = transport.get_extra_info("peername")
        if peername:
            self.id = join_host_port(peername[0], peername[1])
        self._server.add(self)
        self._lookupd.logger.info("TCP: new client(%s)", self.id)

    def data_received(self, data: bytes) -> None:
        results = self._parser.feed(data)
        if not self._magic_logged and self._parser.magic is not None:
            self._magic_logged = True
            self._lookupd.logger.info("CLIENT(%s): desired protocol magic '%s'", self.id,
                                      self._parser.magic.decode("utf-8", "replace"))
        if results:
            self._execute(results)

    def eof_received(self) -> bool:
        if self._parser.magic is None and not self._done:
            # closed before the 4 magic bytes: upstream never starts an IOLoop for it
            self._done = True
            self._parser.eof()
            self._lookupd.logger.error("failed to read protocol version - EOF")
            return False
        results = self._parser.eof()
        if results:
            self._execute(results)
        elif not self._done:
            self._finish("EOF")
        return False  # let the transport close (after flushing what we wrote)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.discard(self)
        if not self._done and self._parser.magic is None:
            self._done = True
            self._lookupd.logger.error("failed to read protocol version - %s", exc or "EOF")
        elif not self._done:
            self._finish(str(exc) if exc else "EOF")

    def pause_writing(self) -> None:
        # a client that does not read its replies must not grow our buffer: stop reading it
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    # --- commands -------------------------------------------------------------------------------

    def _execute(self, results: list) -> None:
        out: list[bytes] = []
        error: V1Error | None = None
        for item in results:
            if isinstance(item, V1Error):
                error = item
                break
            name = item[0]
            try:
                if name == REGISTER:
                    self._register(item[1], item[2])
                    out.append(OK_RESPONSE)
                elif name == PING:
                    self._ping()
                    out.append(OK_RESPONSE)
                elif name == IDENTIFY:
                    out.append(self._identify(item[1]))
                else:
                    self._unregister(item[1], item[2])
                    out.append(OK_RESPONSE)
            except V1Error as err:
                error = err
                break
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if error is None:
            if out:
                transport.write(b"".join(out) if len(out) > 1 else out[0])
            return
        logger = self._lookupd.logger
        if isinstance(error, BadMagic):
            transport.write(encode_response(error.payload))
            transport.close()
            logger.error("client(%s) bad protocol magic '%s'", self.id,
                         error.magic.decode("utf-8", "replace"))
            self._done = True
            return
        logger.error("[%s] - %s", self.id, error)
        if not error.silent:
            out.append(encode_response(error.payload))
        if out:
            transport.write(b"".join(out))
        self._finish(str(error))
        transport.close()

    def _identify(self, body: bytes) -> bytes:
        fields = parse_identify(body)
        fields["remote_address"] = self.id
        peer = PeerInfo(self.id, **fields)
        peer.last_update = time.time_ns()
        lookupd = self._lookupd
        logger = lookupd.logger
        logger.info("CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s", self.id,
                    peer.broadcast_address, peer.tcp_port, peer.http_port, peer.version)
        self.peer = peer
        if lookupd.db.add_producer(CLIENT_REG, Producer(peer)):
            logger.info("DB: client(%s) REGISTER category:client key: subkey:", self.id)
        return lookupd.identify_response

    def _ping(self) -> None:
        peer = self.peer
        if peer is not None:
            now = time.time_ns()
            logger = self._lookupd.logger
            if logger.isEnabledFor(logging.INFO):
                logger.info("CLIENT(%s): pinged (last ping %s)", peer.id,
                            format_duration((now - peer.last_update) / 1e9))
            peer.last_update = now
            self._lookupd.db.touch()  # a silent producer may be active again

    def _register(self, topic: str, channel: str) -> None:
        lookupd = self._lookupd
        db = lookupd.db
        peer = self.peer
        assert peer is not None  # the parser rejects REGISTER before IDENTIFY
        info = lookupd.log_info
        if channel:
            if db.add_producer(("channel", topic, channel), Producer(peer)) and info:
                lookupd.logger.info("DB: client(%s) REGISTER category:channel key:%s subkey:%s",
                                    self.id, topic, channel)
        if db.add_producer(("topic", topic, ""), Producer(peer)) and info:
            lookupd.logger.info("DB: client(%s) REGISTER category:topic key:%s subkey:",
                                self.id, topic)

    def _unregister(self, topic: str, channel: str) -> None:
        lookupd = self._lookupd
        db = lookupd.db
        peer = self.peer
        assert peer is not None
        info = lookupd.log_info
        logger = lookupd.logger
        if channel:
            key = ("channel", topic, channel)
            removed, left = db.remove_producer(key, peer.id)
            if removed and info:
                logger.info("DB: client(%s) UNREGISTER category:channel key:%s subkey:%s",
                            self.id, topic, channel)
            # an ephemeral channel disappears with its last producer
            if left == 0 and channel.endswith("#ephemeral"):
                db.remove_registration(key)
            return
        # a topic unregistration also drops this peer from the topic's channels; nsqd
        # unregisters channels first, so anything removed here is unexpected
        for reg in db.find_registrations("channel", topic, "*"):
            removed, _ = db.remove_producer(reg, peer.id)
            if removed:
                logger.warning("client(%s) unexpected UNREGISTER category:channel key:%s "
                               "subkey:%s", self.id, topic, reg[2])
        key = ("topic", topic, "")
        removed, left = db.remove_producer(key, peer.id)
        if removed and info:
            logger.info("DB: client(%s) UNREGISTER category:topic key:%s subkey:", self.id, topic)
        if left == 0 and topic.endswith("#ephemeral"):
            db.remove_registration(key)

    def _finish(self, reason: str) -> None:
        """Upstream's IOLoop exit: log, then drop every registration of this peer."""
        if self._done:
            return
        self._done = True
        lookupd = self._lookupd
        logger = lookupd.logger
        logger.info("PROTOCOL(V1): [%s] exiting ioloop", self.id)
        peer = self.peer
        if peer is not None:
            db = lookupd.db
            info = lookupd.log_info
            for reg in db.lookup_registrations(peer.id):
                removed, _ = db.remove_producer(reg, peer.id)
                if removed and info:
                    logger.info("DB: client(%s) UNREGISTER category:%s key:%s subkey:%s",
                                self.id, reg[0], reg[1], reg[2])
        logger.error("client(%s) - %s", self.id, reason)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class TCPServer:
    """Accepts V1 clients on an already-bound socket; :meth:`close` drops every client."""

    def __init__(self, lookupd: LookupdState) -> None:
        self.lookupd = lookupd
        self.connections: set[LookupV1Protocol] = set()
        self._server: asyncio.AbstractServer | None = None

    def add(self, conn: LookupV1Protocol) -> None:
        self.connections.add(conn)
        self.lookupd.tcp_clients = len(self.connections)

    def discard(self, conn: LookupV1Protocol) -> None:
        self.connections.discard(conn)
        self.lookupd.tcp_clients = len(self.connections)

    async def start(self, sock) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: LookupV1Protocol(self), sock=sock,
                                                backlog=1024)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            except (asyncio.TimeoutError, Exception):
                pass
