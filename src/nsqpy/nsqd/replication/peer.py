"""The peer side of replication (``--accept-replicas``): origins' replicas, out of clients' sight.

An origin connects to our ordinary TCP port and sends ``RSUB``; :meth:`ReplicaHost.hand_over` (called by the
connection when the V2 state machine accepts that command) takes the connection out of the V2 protocol and hands the transport
to a :class:`ReplicaSession`, which parses batches with the sans-I/O
:class:`~nsqpy.protocol.replication.LinkParser`, appends each to the origin's
:class:`~nsqpy.nsqd.replication.store.ReplicaStore` and answers ``OK <seq>`` (one answer per read,
acks being cumulative). Replicas are never topics: nothing can SUB to them; ``/stats`` shows them
under ``replicas``. What happens when an origin stays away is in :mod:`.failover`.
"""

from __future__ import annotations

import asyncio
from functools import partial
import os
import time
from typing import TYPE_CHECKING, Any

from ...protocol.gojson import loads
from ...common.goweb import go_json
from ...protocol.errors import E_INVALID, FatalError
from ...protocol.frames import encode_error, encode_response
from ...protocol.replication import LinkParser, ReplicationError, encode_ack, parse_rsub
from .adopt import adopt_messages, adopt_store
from .silence import Silence
from .store import ReplicaStore

if TYPE_CHECKING:
    from ..nsqd import NSQD

REPLICAS_DIR = "replicas"
IDLE_TIMEOUT = 5.0  # an origin sends a keep-alive every second
ADOPTED_FRAME_IDS = 32768  # adopted ids per frame sent to a returning origin (512 KiB)


class Origin:
    """What we hold for one origin address: its current incarnation's store and its link."""

    def __init__(self, address: str, incarnation: str, store: ReplicaStore) -> None:
        self.address = address
        self.incarnation = incarnation
        self.store = store
        self.http_port = 0
        self.session: "ReplicaSession | None" = None
        self.down_since = time.monotonic()
        self.last_batch = 0.0
        self.batches = 0

    def stats(self) -> dict:
        return {"origin": self.address, "incarnation": self.incarnation,
                "link": "up" if self.session is not None else "down",
                "down_for_s": 0 if self.session else round(time.monotonic() - self.down_since, 1),
                "batches": self.batches, **self.store.stats()}


class ReplicaHost:
    def __init__(self, nsqd: "NSQD") -> None:
        self.nsqd = nsqd
        self.logger = nsqd.logger
        self.root = os.path.join(nsqd.data_path, REPLICAS_DIR)
        self.fsync = nsqd.options.sync_every == 1
        self.origins: dict[str, Origin] = {}
        self.adopted = 0
        self.failover: Any = None  # failover.Failover, set up by setup.py

    def _store_path(self, address: str, incarnation: str) -> str:
        return os.path.join(self.root, address, incarnation)

    def load(self) -> None:
        """Replay every stored replica (the peer's own restart)."""
        if not os.path.isdir(self.root):
            return
        for address in sorted(os.listdir(self.root)):
            base = os.path.join(self.root, address)
            for inc in sorted(os.listdir(base)) if os.path.isdir(base) else ():
                if len(inc) != 16:
                    continue
                store = ReplicaStore(self._store_path(address, inc), self.fsync,
                                     logger=self.logger)
                if address in self.origins:  # two incarnations: the older is adopted at once
                    self.logger.warning("REPLICA(%s): more than one incarnation stored", address)
                    self.origins[f"{address}#{inc}"] = Origin(address, inc, store)
                    continue
                self.origins[address] = Origin(address, inc, store)
                self.origins[address].http_port = _read_port(store.path)
                self.logger.info("REPLICA(%s): loaded incarnation %s, %d messages", address, inc,
                                 len(store.live))

    def _adopted_path(self, address: str, incarnation: str) -> str:
        return os.path.join(self.root, address, f"adopted-{incarnation}.ids")

    def take_adopted(self, address: str, incarnation: str) -> bytes:
        """The ids we adopted from this incarnation (sent once, so it skips them), or b""."""
        base = os.path.join(self.root, address)
        out = b""
        for name in os.listdir(base) if os.path.isdir(base) else ():
            if not name.startswith("adopted-"):
                continue
            path = os.path.join(base, name)
            if name == f"adopted-{incarnation}.ids":
                with open(path, "rb") as f:
                    out = f.read()
            os.unlink(path)  # another incarnation's list: its data is gone anyway
        return out

    def attach(self, address: str, incarnation: str, http_port: int,
               session: "ReplicaSession") -> Origin:
        origin = self.origins.get(address)
        if origin is not None and origin.incarnation != incarnation:
            # the origin came back without its data: the old copies exist only here
            self.logger.warning("REPLICA(%s): new incarnation %s replaces %s, adopting the old one",
                                address, incarnation, origin.incarnation)
            if origin.session is not None:
                origin.session.close()
            self.origins.pop(address)
            self.adopt(origin)
            origin = None
        if origin is None:
            store = ReplicaStore(self._store_path(address, incarnation), self.fsync,
                                 logger=self.logger)
            origin = Origin(address, incarnation, store)
            self.origins[address] = origin
        elif origin.session is not None:
            origin.session.close()  # a stale link of the same origin
        origin.session = session
        if origin.http_port != http_port:
            origin.http_port = http_port
            _write_port(origin.store.path, http_port)
        self.logger.info("REPLICA(%s): linked (incarnation %s)", address, incarnation)
        return origin

    def detach(self, origin: Origin, session: "ReplicaSession") -> None:
        if origin.session is session:
            origin.session = None
            origin.down_since = time.monotonic()
            self.logger.warning("REPLICA(%s): link down", origin.address)

    def adopt(self, origin: Origin) -> int:
        ids = b"".join(origin.store.live)
        n = adopt_store(self.nsqd, origin.store)
        self.adopted += n
        # kept until the origin returns with this incarnation: it then skips what we delivered
        path = self._adopted_path(origin.address, origin.incarnation)
        with open(path + ".tmp", "wb") as f:
            f.write(ids)
        os.replace(path + ".tmp", path)
        self.logger.warning("REPLICA(%s): adopted %d messages of incarnation %s", origin.address,
                            n, origin.incarnation)
        origin.store.destroy()
        return n

    def stats(self) -> list[dict]:
        return [o.stats() for _, o in sorted(self.origins.items())]

    def hand_over(self, conn: Any, params: list[bytes]) -> None:
        """The V2 connection's hook for an accepted ``RSUB`` (see :func:`take_link`)."""
        take_link(self, conn, params)

    def start(self) -> None:
        if self.failover is not None:
            self.failover.start()

    def close(self) -> None:
        if self.failover is not None:
            self.failover.close()
        for origin in self.origins.values():
            if origin.session is not None:
                origin.session.close()
            origin.store.close()


def _write_port(path: str, port: int) -> None:
    with open(os.path.join(path, "origin.json"), "wb") as f:
        f.write(go_json({"http_port": port}))


def _read_port(path: str) -> int:
    try:
        with open(os.path.join(path, "origin.json"), "rb") as f:
            return int(loads(f.read())["http_port"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


class ReplicaSession(asyncio.Protocol):
    """A replication link after RSUB: batches in, acks out."""

    def __init__(self, host: ReplicaHost, transport: asyncio.Transport) -> None:
        self.host = host
        self.transport: asyncio.Transport | None = transport
        self.parser = LinkParser()
        self.origin: Origin | None = None
        # the origin's own silence, not the time this process was stopped (issue #25)
        self.silence = Silence(host.nsqd.loop, IDLE_TIMEOUT, self._idle)

    def data_received(self, data: bytes) -> None:
        self.silence.heard()
        origin = self.origin
        if origin is None or self.transport is None:
            return
        try:
            batches = self.parser.feed(data)
        except ReplicationError as err:
            self._fail(f"{E_INVALID} {err}")
            return
        top = -1
        store = origin.store
        for batch in batches:
            if batch.records:
                try:
                    store.append(batch.records, defer_sync=True)
                except ReplicationError as err:
                    self._fail(f"{E_INVALID} {err}")
                    return
                except OSError as err:  # disk full: nothing is acked, the origin degrades
                    self.host.logger.error("REPLICA(%s): cannot store - %s", origin.address, err)
                    self._fail(f"E_REPLICA_FAILED {err}")
                    return
                origin.batches += 1
            if batch.acked:
                top = batch.seq
        if store.orphans:
            self._deliver_orphans(origin)
        if top < 0:
            return
        commit = self.host.nsqd.commit
        if commit is not None and store.fsync:
            # group commit: the fsync of every batch of this read (and of whatever other links
            # and publishers wrote in this turn) on the writer thread; reading goes on meanwhile
            commit.stage(store)
            commit.then(partial(self._acked, origin, top))
            return
        try:
            store.sync()  # one fsync for every batch of this read
        except OSError as err:
            self._acked(origin, top, err)
            return
        self._acked(origin, top, None)

    def _acked(self, origin: Origin, top: int, err: OSError | None) -> None:
        """``OK <top>`` once the batches up to ``top`` are stored (and fsynced with
        ``--sync-every=1``); a failed sync fails the link, nothing is acked."""
        if err is not None:
            self.host.logger.error("REPLICA(%s): cannot sync - %s", origin.address, err)
            self._fail(f"E_REPLICA_FAILED {err}")
        elif self.transport is not None:
            self.transport.write(encode_response(encode_ack(top)))

    def _deliver_orphans(self, origin: Origin) -> None:
        """The origin re-shipped all it holds and these were not among them: it lost them
        (killed and restarted within the failover timeout), so we deliver them."""
        orphans, origin.store.orphans = origin.store.orphans, []
        n = adopt_messages(self.host.nsqd, orphans)
        self.host.adopted += n
        self.host.logger.warning("REPLICA(%s): the origin no longer holds %d replicated messages "
                                 "(restarted?); delivering them from here", origin.address, n)

    def _fail(self, text: str) -> None:
        if self.transport is not None:
            self.transport.write(encode_error(text.encode()))
            self.transport.close()

    def _idle(self, silent: float) -> None:
        if self.transport is not None:
            self.host.logger.error("REPLICA: no data for %.1fs, closing the link", silent)
            self.transport.abort()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.silence.cancel()
        if self.origin is not None:
            self.host.detach(self.origin, self)


def take_link(host: ReplicaHost, conn: Any, params: list[bytes]) -> None:
    """``RSUB`` accepted by the V2 state machine (``ProtocolV2.rsub``): the connection
    (``V2Connection``) leaves protocol V2 and its socket becomes this replica's link."""
    nsqd = host.nsqd
    record = conn.client
    if record.snappy or record.deflate:
        raise FatalError(E_INVALID, "RSUB not supported with compression")
    try:
        address, incarnation, http_port = parse_rsub(params)
    except ReplicationError as err:
        raise FatalError(E_INVALID, str(err)) from None
    transport = conn.transport
    if transport is None or conn.parser.buffered:
        raise FatalError(E_INVALID, "RSUB must be answered before anything else is sent")
    # the connection leaves the V2 protocol: no heartbeats, not a client in /stats
    if conn._heartbeat_handle is not None:
        conn._heartbeat_handle.cancel()
        conn._heartbeat_handle = None
    nsqd.remove_client(record)
    conn._closed = conn._lost = True
    conn.transport = None
    session = ReplicaSession(host, transport)
    transport.set_protocol(session)
    try:
        adopted = host.take_adopted(address, incarnation)
    except OSError as err:
        host.logger.error("REPLICA(%s): cannot read the adopted ids - %s", address, err)
        adopted = b""
    origin = host.attach(address, incarnation, http_port, session)
    session.origin = origin
    for i in range(0, len(adopted), ADOPTED_FRAME_IDS * 16):  # before OK: applied first
        transport.write(encode_response(b"ADOPTED " + adopted[i:i + ADOPTED_FRAME_IDS * 16]))
    transport.write(encode_response(b"OK " + go_json(
        {"incarnation": incarnation, "messages": len(origin.store.live),
         "adopted": len(adopted) // 16})))
