"""NSQ's TCP protocol V2 as a state machine, without I/O.

:class:`ProtocolV2` is fed parsed commands (``CommandParser`` output) and answers by appending
frames to the client's outbox, by raising the NSQ error to send (``FatalError`` ends the
connection, ``ClientError`` does not), or by returning / raising a request for I/O that only the
connection can do: :class:`Upgrade` after IDENTIFY (TLS, compression) and :class:`NeedAuth` when
the auth server must be asked first. It never touches a socket, so it is tested by feeding it
commands (``tests/nsqd/test_protocol_v2.py``).

Which command is allowed in which state, what handles it and which state follows is the table
``STATES`` at the end of this module, written once. A command a state does not list is refused
with upstream's ``E_INVALID cannot X in current state`` (an unknown one with ``invalid command
X``); on a TLS-required nsqd a connection without TLS yet answers from ``TLS_PENDING``, where
only IDENTIFY exists. The refusal comes before the command's body is read (``pre_body``), as
upstream checks the state before reading a body.
"""

from __future__ import annotations

from functools import partial
from itertools import repeat
from time import time_ns as _time_ns
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional

from ... import NSQ_COMPAT_VERSION
from ...protocol.commands import (
    BASE10_ERROR, MPUB_HEAD, MS, Limits, arg_text, as_int64, byte_to_base10, check_topic, go_quote,
    ms_to_duration_ns, pre_body_checks,
)
from ...protocol.errors import (
    E_AUTH_DISABLED, E_AUTH_ERROR, E_BAD_BODY, E_BAD_CHANNEL, E_DPUB_FAILED, E_IDENTIFY_FAILED,
    E_INVALID, E_MPUB_FAILED, E_PUB_FAILED, E_SUB_FAILED, E_UNAUTHORIZED, E_AUTH_FIRST,
    FatalError,
)
from ...protocol.fin_run import FIN_RUN
from ...protocol.frames import CLOSE_WAIT_FRAME, OK_FRAME, encode_error, encode_response
from ...protocol.names import is_valid_name
from .client import (
    STATE_CLOSING, STATE_INIT, STATE_SUBSCRIBED, ClientV2, decode_identify, go_identify_text,
)
from ...protocol.gojson import GoJSONError
from ...common.goweb import go_json
from ..options import topology_set

if TYPE_CHECKING:
    from ..auth.client import AuthState
    from ..nsqd import NSQD

#: the topic and channel an auth server must open to an origin for ``RSUB`` (docs/replication.md)
REPLICATION_AUTH_NAME = "nsqpy-replication"


class Upgrade:
    """IDENTIFY's request to the connection: after the answer in the outbox is sent, switch the
    stream to TLS and/or a compression codec (none of them: just go on reading)."""

    __slots__ = ("tls", "snappy", "deflate_level")

    def __init__(self, tls: bool = False, snappy: bool = False, deflate_level: int = 0) -> None:
        self.tls = tls
        self.snappy = snappy
        self.deflate_level = deflate_level  # 0: no deflate


class Handover:
    """RSUB's request to the connection: leave protocol V2 and hand the socket to the
    replication link (``ReplicaHost.hand_over``); only on an nsqd with ``--accept-replicas``."""

    __slots__ = ("params",)

    def __init__(self, params: list[bytes]) -> None:
        self.params = params


class NeedAuth(Exception):
    """The auth server must answer before this command can be decided. The connection asks it
    (``client.auth_secret``), hands the answer to :meth:`ProtocolV2.auth_answered`, and runs the
    command again when ``retry`` (an expired answer was re-queried) or goes on after it."""

    def __init__(self, first: bool, retry: bool) -> None:
        super().__init__()
        self.first = first
        self.retry = retry


class NeedTopic(Exception):
    """A publish created its topic and the topic still waits for lookupd's channel list: the
    messages are queued, the answer is owed. The connection answers once ``topic.wait_ready()``
    is done (and ``acked``, sync replication's future, says whether the peer has the copy:
    ``no_copy`` is the error frame otherwise) and holds the commands after it until then, as
    upstream's publish blocks in ``GetTopic`` on that query. With the group commit busy,
    ``settled`` is a future of ``(error, acked)``: the flush's outcome (``failed`` names the
    command for its error) and the replication wait joined once the flush returned."""

    def __init__(self, topic: Any, acked: Any, no_copy: bytes, settled: Any = None,
                 failed: tuple[str, str] = ("", "")) -> None:
        super().__init__()
        self.topic = topic
        self.acked = acked
        self.no_copy = no_copy
        self.settled = settled
        self.failed = failed


Handler = Callable[["ProtocolV2", list, Any], Optional[Upgrade]]


class ProtocolV2:
    """The V2 conversation of one client (see the module docstring)."""

    __slots__ = ("nsqd", "client", "commands", "acked", "_auth_recheck", "_tls_pending", "owed",
                 "on_settled")

    def __init__(self, nsqd: "NSQD", client: ClientV2) -> None:
        self.nsqd = nsqd
        self.client = client
        self.acked = False  # a FIN/REQ/RDY made room under RDY: the channel should dispatch
        #: publishes whose answer waits for the group commit's flush (``--sync-every=1``); the
        #: connection runs no other command until they are answered, so answers keep their order
        self.owed = 0
        #: the connection's callback once an owed answer is given: None, or the fatal error that
        #: refused the publish (the connection sends it and closes, as for an immediate failure)
        self.on_settled: Callable[[FatalError | None], None] | None = None
        self._auth_recheck = False  # the command being retried follows a fresh re-query
        self._tls_pending = nsqd.options.tls_required != "false"  # (v2/tls.py: TLS_REQUIRED_FALSE)
        # the current state's row of the table: command name -> (handler, next state)
        self.commands: dict[bytes, tuple[Handler, int | None]] = (
            TLS_PENDING if self._tls_pending else STATES[client.state])

    # --- the table's mechanics ------------------------------------------------------------------

    def receive(self, name: bytes, params: list[bytes], body: Any) -> Upgrade | None:
        """Run one parsed command: refuse it, or handle it and move to the next state.
        (``V2Connection._process`` does the same steps inline, one call less per command.)"""
        entry = self.commands.get(name)
        if entry is None:
            self.refuse(name)
        handler, next_state = entry
        upgrade = handler(self, params, body)
        if next_state is not None:
            self.enter(next_state)
        return upgrade

    def enter(self, state: int) -> None:
        self.client.state = state
        if not self._tls_pending:
            self.commands = STATES[state]

    def refuse(self, name: bytes) -> NoReturn:
        if name == FIN_RUN:
            name = b"FIN"  # a parsed run of FINs is refused as its first FIN would be
        elif name == MPUB_HEAD:
            name = b"MPUB"
        text = name.decode("utf-8", "replace")
        if self._tls_pending:
            raise FatalError(E_INVALID, f"cannot {text} in current state (TLS required)")
        if name in KNOWN_COMMANDS:
            raise FatalError(E_INVALID, f"cannot {text} in current state")
        raise FatalError(E_INVALID, f"invalid command {text}")

    def tls_established(self) -> None:
        self.client.tls = True
        self._tls_pending = False
        self.commands = STATES[self.client.state]

    def pre_body(self, name: bytes, params: list[bytes], limits: Limits) -> int:
        """The parser's check of a body command's line, before its body is read: the state
        first, then the arguments (returns the largest body allowed)."""
        if name not in self.commands:
            self.refuse(name)
        limit = pre_body_checks(name, params, limits)
        if name == b"MPUB" and self.nsqd.auth is None:
            try:  # upstream's MPUB creates its topic before reading the body (with AUTH: mpub_head)
                self.nsqd.get_topic(check_topic("MPUB", params))
            except OSError:
                pass  # the handler reports it once the body is read
        return limit

    # --- IDENTIFY and AUTH ----------------------------------------------------------------------

    def identify(self, params: list[bytes], body: bytes) -> Upgrade:
        try:
            data = decode_identify(body, topology_set(self.nsqd.options), self.nsqd.leases is not None)
        except GoJSONError:
            raise FatalError(E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
        client = self.client
        nsqd = self.nsqd
        opts = nsqd.options
        nsqd.logger.info("[%s] IDENTIFY: %s", client.remote_address, go_identify_text(data))
        client.identify(data, opts)
        lease = None
        if "lease" in data and nsqd.leases is not None:  # upstream ignores the field (--leases off)
            lease = nsqd.leases.identify(client, data)
        if not data.get("feature_negotiation"):
            client.out.append(OK_FRAME)
            return Upgrade()
        # a stream is upgraded once: a repeated IDENTIFY cannot stack a second TLS or codec layer
        compressed = client.snappy or client.deflate
        tls = bool(nsqd.tls_context is not None and data.get("tls_v1") and not client.tls)
        deflate = bool(opts.deflate and data.get("deflate") and not compressed)
        level = 6
        if deflate and data.get("deflate_level", 0) > 0:
            level = data["deflate_level"]
        level = min(level, opts.max_deflate_level)
        snappy = bool(opts.snappy and data.get("snappy") and not compressed)
        if deflate and snappy:
            raise FatalError(E_IDENTIFY_FAILED, "cannot enable both deflate and snappy compression")
        answer = {
            "max_rdy_count": opts.max_rdy_count,
            "version": NSQ_COMPAT_VERSION,
            "max_msg_timeout": int(opts.max_msg_timeout * 1000),
            "msg_timeout": int(client.msg_timeout * 1000),
            "tls_v1": tls,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": client.sample_rate,
            "auth_required": nsqd.auth is not None,
            "output_buffer_size": client.output_buffer_size,
            "output_buffer_timeout": int(client.output_buffer_timeout * 1000),
        }
        if lease is not None:
            answer["lease"] = lease
        client.out.append(encode_response(go_json(answer)))
        return Upgrade(tls, snappy, level if deflate else 0)

    def auth(self, params: list[bytes], body: bytes) -> None:
        client = self.client
        if client.auth_state is not None and client.auth_state.authorizations:
            raise FatalError(E_INVALID, "AUTH already set")
        if self.nsqd.auth is None:
            raise FatalError(E_AUTH_DISABLED, "AUTH disabled")
        client.auth_secret = body
        raise NeedAuth(first=True, retry=False)

    def auth_answered(self, state: "AuthState", first: bool) -> None:
        """The auth server's answer to :class:`NeedAuth` (its failure is E_AUTH_FAILED)."""
        self.client.auth_state = state
        if not first:
            self._auth_recheck = True
            return
        if not state.authorizations:
            raise FatalError(E_UNAUTHORIZED, "AUTH no authorizations found")
        try:
            answer = go_json({"identity": state.identity, "identity_url": state.identity_url,
                              "permission_count": len(state.authorizations)})
        except (TypeError, ValueError) as err:  # upstream's json.Marshal failure path
            raise FatalError(E_AUTH_ERROR, f"AUTH error {err}") from None
        self.client.out.append(encode_response(answer))

    def _check_auth(self, cmd: str, topic: str, channel: str) -> None:
        """Upstream's CheckAuth; an expired answer is re-queried first (the command waits)."""
        state = self.client.auth_state
        if self._auth_recheck:
            self._auth_recheck = False
        elif state is None or not state.authorizations:
            raise FatalError(E_AUTH_FIRST, f"AUTH required before {cmd}")
        elif state.expired():
            raise NeedAuth(first=False, retry=True)
        if state is None or not state.allows(topic, channel):
            raise FatalError(E_UNAUTHORIZED,
                             f"AUTH failed for {cmd} on {go_quote(topic)} {go_quote(channel)}")

    # --- consuming ------------------------------------------------------------------------------

    def sub(self, params: list[bytes], body: None) -> None:
        client = self.client
        if client.heartbeat_interval <= 0:
            raise FatalError(E_INVALID, "cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise FatalError(E_INVALID, "SUB insufficient number of parameters")
        topic_name = check_topic("SUB", params)
        raw_channel = params[2]
        try:
            channel_name = raw_channel.decode("ascii")
        except UnicodeDecodeError:
            channel_name = ""
        if not is_valid_name(channel_name):
            raise FatalError(E_BAD_CHANNEL, f"SUB channel name {go_quote(raw_channel)} is not valid")
        nsqd = self.nsqd
        if nsqd.auth is not None:
            self._check_auth("SUB", topic_name, channel_name)
        if nsqd.exiting:
            raise FatalError(E_SUB_FAILED, "SUB failed exiting")
        channel = nsqd.get_topic(topic_name).get_channel(channel_name)
        limit = nsqd.options.max_channel_consumers
        if limit and len(channel.clients) >= limit:
            raise FatalError(E_SUB_FAILED,
                             f"SUB failed consumers for {topic_name}:{channel_name} exceeds limit of {limit}")
        if client.lease is not None:
            nsqd.leases.subscribe(client, channel)
        channel.add_client(client)
        client.channel = channel
        client.out.append(OK_FRAME)

    def rdy(self, params: list[bytes], body: None) -> None:
        count = 1
        if len(params) > 1:
            try:
                count = as_int64(byte_to_base10(params[1]))
            except ValueError:
                raise FatalError(E_INVALID, f"RDY could not parse count {arg_text(params[1])}",
                                 BASE10_ERROR) from None
        client = self.client
        if client.lease is not None:
            self._rdy_leased(count)
            return
        max_rdy = self.nsqd.options.max_rdy_count
        if count < 0 or count > max_rdy:
            raise FatalError(E_INVALID, f"RDY count {count} out of range 0-{max_rdy}")
        client.ready_count = count
        self.acked = True

    def _rdy_leased(self, count: int) -> None:
        """RDY under a lease: its own ceiling, and a replaying connection gets its replay."""
        max_rdy = self.nsqd.options.max_lease_rdy_count
        if count < 0 or count > max_rdy:
            raise FatalError(E_INVALID, f"RDY count {count} out of range 0-{max_rdy}")
        self.client.ready_count = self.nsqd.leases.ready(self.client, count)
        self.acked = True

    def rdy_after_cls(self, params: list[bytes], body: None) -> None:
        self.nsqd.logger.info("PROTOCOL(V2): [%s] ignoring RDY after CLS in state "
                              "ClientStateV2Closing", self.client.remote_address)

    def fin(self, params: list[bytes], body: None) -> None:
        if len(params) < 2:
            raise FatalError(E_INVALID, "FIN insufficient number of params")
        mid = params[1]
        if len(mid) != 16:
            raise FatalError(E_INVALID, "invalid message ID")
        client = self.client
        client.channel.finish(client, mid)  # type: ignore[union-attr]  # set by SUB
        self.acked = True

    def fin_run(self, params: list[bytes], ids: list[bytes]) -> None:
        """A run of FINs parsed in one step (``protocol.fin_run``): each id as :meth:`fin`."""
        client = self.client
        client.channel.finish_many(client, ids)  # type: ignore[union-attr]  # set by SUB
        self.acked = True

    def req(self, params: list[bytes], body: None) -> None:
        if len(params) < 3:
            raise FatalError(E_INVALID, "REQ insufficient number of params")
        mid = params[1]
        if len(mid) != 16:
            raise FatalError(E_INVALID, "invalid message ID")
        try:
            timeout_ns = ms_to_duration_ns(byte_to_base10(params[2]))
        except ValueError:
            raise FatalError(E_INVALID, f"REQ could not parse timeout {arg_text(params[2])}",
                             BASE10_ERROR) from None
        client = self.client
        max_ns = self.nsqd.limits.max_req_timeout_ms * MS
        clamped = 0 if timeout_ns < 0 else min(timeout_ns, max_ns)
        if clamped != timeout_ns:
            self.nsqd.logger.info("PROTOCOL(V2): [%s] REQ timeout %d out of range 0-%d. Setting to %d",
                                  client.remote_address, timeout_ns, max_ns, clamped)
        client.channel.requeue_in_flight(client, mid, clamped / 1e9)  # type: ignore[union-attr]
        self.acked = True

    def touch(self, params: list[bytes], body: None) -> None:
        if len(params) < 2:
            raise FatalError(E_INVALID, "TOUCH insufficient number of params")
        mid = params[1]
        if len(mid) != 16:
            raise FatalError(E_INVALID, "invalid message ID")
        client = self.client
        if client.lease is not None:
            self.nsqd.leases.touch(client, mid)  # renews the whole lease
            return
        client.channel.touch(client, mid)  # type: ignore[union-attr]

    def cls(self, params: list[bytes], body: None) -> None:
        self.client.ready_count = 0
        self.client.out.append(CLOSE_WAIT_FRAME)

    def nop(self, params: list[bytes], body: None) -> None:
        return None

    def rsub(self, params: list[bytes], body: None) -> Handover:
        """A peer nsqd opening a replication link (docs/replication.md): an unknown command
        unless this nsqd accepts replicas."""
        if self.nsqd.replicas is None:
            self.refuse(b"RSUB")
        if self.nsqd.auth is not None:
            # a replica holds every topic of its origin: the origin's secret must be granted
            # publishing and subscribing on the reserved name (a ".*" grant does)
            self._check_auth("RSUB", REPLICATION_AUTH_NAME, "")
            self._check_auth("RSUB", REPLICATION_AUTH_NAME, REPLICATION_AUTH_NAME)
        return Handover(params)

    def _ok(self, topic: Any, no_copy: bytes, failed: tuple[str, str]) -> None:
        """A publish's OK: now, once the topic is ready (:class:`NeedTopic`), once the group
        commit flushed what it wrote (``--sync-every=1``: :meth:`_settle`; ``failed`` is the
        command's error code and name if the flush fails), or once the replication peer stored
        it (``--replication-ack=sync``); ``no_copy``, the command's error frame, when the peer
        stored nothing within ``--replication-sync-timeout`` and ``--replication-degraded=fail``
        (docs/replication.md §6)."""
        commit = self.nsqd.commit
        if commit is None or not commit.busy:
            self._answer(topic, no_copy)
        elif not topic.ready:
            settled = self.nsqd.loop.create_future()
            commit.then(partial(_join_copy, settled, self.nsqd.replicator))
            raise NeedTopic(topic, None, no_copy, settled, failed)
        else:
            replicator = self.nsqd.replicator
            self.owed += 1  # (the replication wait of a fan-out made now is joined now)
            commit.then(partial(self._settle, no_copy, failed,
                                replicator.acked() if replicator is not None else None))

    def _answer(self, topic: Any, no_copy: bytes) -> None:
        replicator = self.nsqd.replicator
        if not topic.ready:
            # the replication wait is joined now: it belongs to this turn's batch
            raise NeedTopic(topic, replicator.acked() if replicator is not None else None, no_copy)
        if replicator is None:
            self.client.out.append(OK_FRAME)
        else:
            replicator.respond(self.client, OK_FRAME, no_copy)

    def _settle(self, no_copy: bytes, failed: tuple[str, str], acked: Any,
                err: OSError | None) -> None:
        """The group commit's outcome for a publish it held (see :meth:`_ok`); with sync
        replication the OK also waits for the peer's copy: the one shipped when the publish was
        made, or (a fan-out the history held until this flush) the one shipped just now."""
        if err is not None:
            self._settled(FatalError(failed[0], f"{failed[1]} failed {err}"))
            return
        replicator = self.nsqd.replicator
        if acked is None and replicator is not None:
            acked = replicator.acked()
        if acked is None:
            self._copied(no_copy, None)
        else:
            acked.add_done_callback(partial(self._copied, no_copy))

    def _copied(self, no_copy: bytes, acked: Any) -> None:
        if acked is not None and acked.result() is False:  # strict sync replication, no copy
            self.client.out.append(no_copy)
            self.client.close_connection()
        else:
            self.client.out.append(OK_FRAME)
            self.client.schedule_flush()
        self._settled(None)

    def _settled(self, fatal: FatalError | None) -> None:
        self.owed -= 1
        if self.on_settled is not None:
            self.on_settled(fatal)

    # --- publishing (topic names and sizes were checked by the parser) --------------------------

    def pub(self, params: list[bytes], body: bytes) -> None:
        topic_name = check_topic("PUB", params)  # (checked by the parser: the decoded name)
        nsqd = self.nsqd
        if nsqd.auth is not None:
            self._check_auth("PUB", topic_name, "")
        try:
            topic = nsqd.get_topic(topic_name)
            nsqd.publish(topic.put_many, [(nsqd.id_factory.next_id(), body, _time_ns(), 0)],
                         len(body))
        except OSError as err:
            raise FatalError(E_PUB_FAILED, f"PUB failed {err}") from None
        self.client.published(topic_name, 1)
        self._ok(topic, _PUB_NO_COPY, _PUB_FAILED)

    def mpub_head(self, params: list[bytes], body: None) -> None:
        """MPUB's line, before its body size is read (``CommandParser.mpub_head``): upstream
        checks the authorization and creates the topic there, so an unauthorized MPUB gets
        E_AUTH_FIRST / E_UNAUTHORIZED whatever its body holds."""
        topic_name = params[1].decode("ascii")
        nsqd = self.nsqd
        if nsqd.auth is not None:
            self._check_auth("MPUB", topic_name, "")
        try:
            nsqd.get_topic(topic_name)
        except OSError:
            pass  # reported by mpub once the body is read

    def mpub(self, params: list[bytes], bodies: list[bytes]) -> None:
        """The whole MPUB (authorized by :meth:`mpub_head`)."""
        topic_name = check_topic("MPUB", params)  # (checked by the parser: the decoded name)
        nsqd = self.nsqd
        try:
            topic = nsqd.get_topic(topic_name)
            n = len(bodies)
            if n == 1:  # (upstream's bench_writer --batch-size=1: one message per round trip)
                body = bodies[0]
                nsqd.publish(topic.put_many, [(nsqd.id_factory.next_id(), body, _time_ns(), 0)],
                             len(body))
            else:  # zip builds the (id, body, timestamp, attempts) tuples in C
                ids, idcol = nsqd.id_factory.next_id_column(n)
                msgs = list(zip(ids, bodies, repeat(_time_ns(), n), repeat(0, n)))
                if topic.history is None:
                    nsqd.publish(topic.put_many, msgs, sum(map(len, bodies)))
                else:  # the history's block is made of the columns read here (hooks.Columns)
                    sizes = list(map(len, bodies))
                    nsqd.publish(topic.put_many, msgs, sum(sizes), (idcol, bodies, sizes))
        except OSError as err:
            raise FatalError(E_MPUB_FAILED, f"MPUB failed {err}") from None
        self.client.published(topic_name, len(bodies))
        self._ok(topic, _MPUB_NO_COPY, _MPUB_FAILED)

    def dpub(self, params: list[bytes], body: bytes) -> None:
        topic_name = params[1].decode("ascii")
        nsqd = self.nsqd
        if nsqd.auth is not None:
            self._check_auth("DPUB", topic_name, "")
        delay_ns = ms_to_duration_ns(byte_to_base10(params[2]))  # checked by the parser
        try:
            topic = nsqd.get_topic(topic_name)
            nsqd.publish(topic.put_deferred, (nsqd.id_factory.next_id(), body, _time_ns(), 0),
                         delay_ns / 1e9)
        except OSError as err:
            raise FatalError(E_DPUB_FAILED, f"DPUB failed {err}") from None
        self.client.published(topic_name, 1)
        self._ok(topic, _DPUB_NO_COPY, _DPUB_FAILED)


# sync replication without a second copy in time (nsqpy, opt-in): the publish is not acknowledged
_NO_COPY = b"failed no replica stored within --replication-sync-timeout"
_PUB_NO_COPY = encode_error(E_PUB_FAILED.encode() + b" PUB " + _NO_COPY)
_MPUB_NO_COPY = encode_error(E_MPUB_FAILED.encode() + b" MPUB " + _NO_COPY)
_DPUB_NO_COPY = encode_error(E_DPUB_FAILED.encode() + b" DPUB " + _NO_COPY)
# a publish the group commit's flush refused: the error it would have raised at once
_PUB_FAILED, _MPUB_FAILED, _DPUB_FAILED = (E_PUB_FAILED, "PUB"), (E_MPUB_FAILED, "MPUB"), (E_DPUB_FAILED, "DPUB")


def _join_copy(settled: Any, replicator: Any, err: OSError | None) -> None:
    """A NeedTopic publish's flush returned: its outcome, and (the fan-out it held has run
    now) the replication wait joined in the same turn as the fan-out's records."""
    if not settled.done():
        settled.set_result((err, replicator.acked() if replicator is not None and err is None
                            else None))


# --- the V2 state table: state -> {command: (handler, next state or None)} ---------------------
P = ProtocolV2
_ANY_STATE: dict[bytes, tuple[Handler, int | None]] = {
    b"PUB": (P.pub, None), b"MPUB": (P.mpub, None), MPUB_HEAD: (P.mpub_head, None),
    b"DPUB": (P.dpub, None), b"NOP": (P.nop, None),
}
# in-flight messages are answered while subscribed and after CLS
_ACKS: dict[bytes, tuple[Handler, int | None]] = {
    b"FIN": (P.fin, None), FIN_RUN: (P.fin_run, None), b"REQ": (P.req, None), b"TOUCH": (P.touch, None),
}
STATES: dict[int, dict[bytes, tuple[Handler, int | None]]] = {
    STATE_INIT: {
        **_ANY_STATE,
        b"IDENTIFY": (P.identify, None),
        b"AUTH": (P.auth, None),
        b"SUB": (P.sub, STATE_SUBSCRIBED),
        b"RSUB": (P.rsub, None),  # nsqpy replication; otherwise refused as an unknown command
    },
    STATE_SUBSCRIBED: {**_ANY_STATE, **_ACKS, b"RDY": (P.rdy, None), b"CLS": (P.cls, STATE_CLOSING)},
    STATE_CLOSING: {**_ANY_STATE, **_ACKS, b"RDY": (P.rdy_after_cls, None)},
}
# a TLS-required nsqd, before the connection's TLS upgrade: nothing but IDENTIFY
TLS_PENDING: dict[bytes, tuple[Handler, int | None]] = {b"IDENTIFY": (P.identify, None)}
KNOWN_COMMANDS = frozenset(name for row in STATES.values() for name in row) - {
    FIN_RUN, MPUB_HEAD, b"RSUB"}
del P
