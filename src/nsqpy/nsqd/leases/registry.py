"""The leases of one nsqd (``nsqd.leases``), and what a V2 connection asks of them.

``protocol_v2.py`` calls :meth:`Leases.identify` for an IDENTIFY with a ``lease`` field,
:meth:`subscribe` on SUB, :meth:`ready` on RDY and :meth:`touch` on TOUCH of a leased connection;
``connection.py`` calls :meth:`closed` when a leased connection ends. The HTTP routes
(``http.py``) call :meth:`select`, :meth:`finish`, :meth:`requeue` and :meth:`renew`. The core
sees only ``client.lease`` (:class:`~.lease.Lease`, for a FIN/REQ of an id held by another
connection of the lease) and the channel methods the group calls use.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from ...protocol.commands import go_quote
from ...protocol.errors import E_BAD_BODY, E_BAD_LEASE, E_LEASE_ENDED, FatalError
from ...protocol.frames import encode_error
from .lease import Lease
from .names import parse_name

if TYPE_CHECKING:
    from ..channel import Channel
    from ..nsqd import NSQD

LEASE_VERSION = 1
SWEEP_INTERVAL = 1.0
_monotonic = time.monotonic


class Leases:
    """Every lease of the nsqd by name, and per channel (for ``/stats``)."""

    def __init__(self, nsqd: "NSQD") -> None:
        self.nsqd = nsqd
        self.by_name: dict[str, Lease] = {}
        self.by_channel: dict["Channel", dict[str, Lease]] = {}

    # --- IDENTIFY ---------------------------------------------------------------------------

    def identify(self, client: Any, data: dict) -> dict[str, Any]:
        """The ``lease`` part of IDENTIFY's answer; names the connection's lease (FatalError on
        bad input, docs/leases.md §5)."""
        name = data.get("lease")
        replay = data.get("lease_replay", False)
        if not isinstance(name, str) or not isinstance(replay, bool):
            raise FatalError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")
        if not data.get("feature_negotiation"):
            raise FatalError(E_BAD_LEASE, "IDENTIFY lease needs feature_negotiation")
        if client.lease is not None:
            raise FatalError(E_BAD_LEASE, "IDENTIFY lease already set")
        answer: dict[str, Any] = {"version": LEASE_VERSION,
                                  "max_rdy_count": self.nsqd.options.max_lease_rdy_count,
                                  "http_port": self.nsqd.http_port}
        if name == "":
            return answer  # a probe: the client learns that leases are here, and where
        parts = parse_name(name)
        if parts is None:
            raise FatalError(E_BAD_LEASE, f"IDENTIFY lease name {go_quote(name)} is not valid")
        lease = self.by_name.get(name)
        if lease is None:
            lease = self.by_name[name] = Lease(name, parts, client.msg_timeout)
            if replay:  # nothing was read under this name, and nothing ever will be
                self._close(lease)
            state = "replay" if replay else "new"
        else:
            if replay and lease.clients:
                self._end_clients(lease, "taken over")
                self._close(lease)
            state = "replay" if lease.closed else "joined"
            client.msg_timeout = lease.timeout
        lease.clients.append(client)
        client.lease = lease
        answer.update(name=name, state=state, held=lease.held,
                      msg_timeout=int(lease.timeout * 1000))
        return answer

    # --- SUB, RDY, TOUCH, the connection's end ----------------------------------------------

    def subscribe(self, client: Any, channel: "Channel") -> None:
        """SUB under a lease: bind the lease to the channel (once) and follow the connection's
        in-flight dict."""
        lease = client.lease
        if channel.ephemeral:
            raise FatalError(E_BAD_LEASE, f"SUB lease on ephemeral channel {go_quote(channel.name)}")
        bound = lease.channel
        if bound is not channel:
            if bound is not None and not (bound.exiting and (bound.topic_name, bound.name)
                                          == (channel.topic_name, channel.name)):
                raise FatalError(E_BAD_LEASE, f"SUB lease {go_quote(lease.name)} belongs to "
                                              f"{bound.topic_name}:{bound.name}")
            if bound is not None:  # its channel was deleted and made again: start over there
                self.by_channel.get(bound, {}).pop(lease.name, None)
            lease.channel = channel
            self.by_channel.setdefault(channel, {})[lease.name] = lease
        lease.tables.append(client.in_flight)

    def ready(self, client: Any, count: int) -> int:
        """RDY under a lease: the count the channel should see. A connection replaying a closed
        lease gets every held message on its first ``RDY > 0`` and never a new one."""
        lease = client.lease
        if not lease.closed:
            return count
        if count > 0 and client.id not in lease.replayed:
            lease.replay(client)
        return 0

    def touch(self, client: Any, mid: bytes) -> None:
        """TOUCH on a leased connection renews the whole lease (docs/leases.md §3)."""
        lease = client.lease
        if mid not in client.in_flight and not lease.holds(mid):
            client.channel.touch(client, mid)  # not ours: upstream's E_TOUCH_FAILED
        lease.renew(self.nsqd.options.max_msg_timeout)

    def closed(self, client: Any) -> None:
        """A leased connection ended (after the core moved its in-flight dict to the orphans,
        untouched). The last one to go closes the lease for good."""
        lease = client.lease
        client.lease = None
        if client in lease.clients:
            lease.clients.remove(client)
        lease.replayed.discard(client.id)
        if lease.clients:
            return
        if lease.channel is None and not lease.closed:
            self._forget(lease)  # never subscribed: nothing was read under it
        elif not lease.closed:
            self._close(lease)
        else:
            lease.closed_at = _monotonic()
        lease.drop_empty_tables()

    # --- the group calls (HTTP) -------------------------------------------------------------

    def select(self, group: str, upto: int) -> list[Lease]:
        """The leases of ``group`` with a sequence number up to ``upto``, oldest first."""
        return [lease for lease in self.by_name.values()
                if lease.parts[0] == group and lease.parts[1] <= upto]

    def finish(self, leases: list[Lease]) -> int:
        """FIN everything the leases hold; end their connections; forget them."""
        done = 0
        for lease in leases:
            entries = lease.take_all()
            if entries:
                lease.channel.finish_entries(entries)  # type: ignore[union-attr]
                done += len(entries)
            self._end_clients(lease, "finished")
            self._forget(lease)
        return done

    def requeue(self, leases: list[Lease]) -> int:
        """Requeue everything the leases hold (attempts counted, as REQ); forget them."""
        done = 0
        for lease in leases:
            entries = lease.take_all()
            if entries:
                lease.channel.requeue_entries(entries)  # type: ignore[union-attr]
                done += len(entries)
            self._end_clients(lease, "requeued")
            self._forget(lease)
        return done

    def renew(self, leases: list[Lease]) -> int:
        max_timeout = self.nsqd.options.max_msg_timeout
        return sum(lease.renew(max_timeout) for lease in leases)

    # --- /stats -------------------------------------------------------------------------------

    def channel_stats(self, channel: "Channel", stats: dict[str, Any]) -> dict[str, Any]:
        """The lease keys of a channel's ``/stats`` entry, only when it has leases."""
        leases = self.by_channel.get(channel)
        if leases:
            stats["lease_count"] = len(leases)
            stats["lease_held_count"] = sum(lease.held for lease in leases.values())
            oldest = min(lease.created for lease in leases.values())
            stats["lease_oldest_ms"] = int((_monotonic() - oldest) * 1000)
        return stats

    # --- housekeeping -------------------------------------------------------------------------

    async def sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            self.sweep(_monotonic())

    def sweep(self, now: float) -> None:
        """Forget closed leases that hold nothing once their timeout has passed since they
        closed (until then their name still replays: possibly nothing)."""
        for lease in list(self.by_name.values()):
            if lease.clients:
                continue
            lease.drop_empty_tables()
            if not lease.tables and now - lease.closed_at >= lease.timeout:
                self._forget(lease)

    def _close(self, lease: Lease) -> None:
        lease.closed = True
        lease.closed_at = _monotonic()

    def _forget(self, lease: Lease) -> None:
        if self.by_name.get(lease.name) is lease:
            del self.by_name[lease.name]
        channel = lease.channel
        if channel is not None:
            leases = self.by_channel.get(channel)
            if leases is not None and leases.get(lease.name) is lease:
                del leases[lease.name]
                if not leases:
                    del self.by_channel[channel]

    def _end_clients(self, lease: Lease, why: str) -> None:
        """Detach the lease's live connections now (their in-flight messages stay with the
        lease) and close them with ``E_LEASE_ENDED``."""
        frame = encode_error(f"{E_LEASE_ENDED} lease {go_quote(lease.name)} was {why}".encode())
        for client in list(lease.clients):
            channel = client.channel
            if channel is not None:
                channel.remove_client(client)  # orphans its dict, not requeued: still leased
            client.lease = None
            client.out.append(frame)
            client.close_connection()
        lease.clients.clear()
        lease.replayed.clear()
