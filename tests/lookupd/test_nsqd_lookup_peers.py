"""nsqd's registration client (nsqpy.nsqd.lookup.LookupdPeers) against real nsqlookupd processes."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

from nsqpy.nsqd.lookup import LookupdPeers

pytestmark = pytest.mark.timeout(40)


class FakeNsqd:
    """Just what LookupdPeers needs from nsqd: its IDENTIFY fields and its topics/channels."""

    def __init__(self, broadcast: str = "127.0.0.1", tcp_port: int = 4150, http_port: int = 4151):
        self.topics: dict[str, list[str]] = {}
        self.ident = {"version": "1.3.0", "tcp_port": tcp_port, "http_port": http_port,
                      "hostname": socket.gethostname(), "broadcast_address": broadcast,
                      "topology_zone": "", "topology_region": ""}
        self.identify_calls = 0

    def identify(self) -> dict:
        self.identify_calls += 1
        return dict(self.ident)

    def registrations(self):
        for topic, channels in self.topics.items():
            if not channels:
                yield topic, None
            for channel in channels:
                yield topic, channel


def make_peers(addresses, nsqd: FakeNsqd, **kwargs) -> LookupdPeers:
    kwargs.setdefault("backoff_min", 0.1)
    kwargs.setdefault("backoff_max", 0.5)
    logger = logging.getLogger("test.lookup_peers")
    return LookupdPeers(addresses, nsqd.identify, nsqd.registrations, logger, **kwargs)


async def until(predicate, timeout: float = 10.0, what: str = ""):
    """Poll a blocking predicate (HTTP to the subprocess) in a thread until it is truthy."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(predicate)
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def lookup(proc, topic):
    res = proc.get(f"/lookup?topic={topic}")
    return res.json() if res.status == 200 else None


def producers(proc, topic):
    doc = lookup(proc, topic)
    return None if doc is None else [(p["broadcast_address"], p["tcp_port"], p["http_port"])
                                     for p in doc["producers"]]


def run(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_initial_registration_and_http_addresses(lookupd):
    nsqd = FakeNsqd(tcp_port=5150, http_port=5151)
    nsqd.topics = {"orders": ["billing", "audit"], "lonely": []}

    async def scenario():
        peers = make_peers([lookupd.tcp_address], nsqd)
        assert peers.http_addresses() == []
        peers.start()
        try:
            await until(lambda: producers(lookupd, "orders") == [("127.0.0.1", 5150, 5151)],
                        what="orders registered")
            doc = lookup(lookupd, "orders")
            assert sorted(doc["channels"]) == ["audit", "billing"]
            assert producers(lookupd, "lonely") == [("127.0.0.1", 5150, 5151)]
            assert lookup(lookupd, "lonely")["channels"] == []
            node = lookupd.get("/nodes").json()["producers"][0]
            assert node["hostname"] == socket.gethostname()
            assert node["version"] == "1.3.0"
            assert peers.http_addresses() == [lookupd.http_address]
            assert peers.connected() == [lookupd.tcp_address]
        finally:
            await peers.close()
        # closing drops the connection, and lookupd drops the registrations
        await until(lambda: producers(lookupd, "orders") == [], what="unregistered on close")

    run(scenario())


def test_live_register_and_unregister(lookupd):
    nsqd = FakeNsqd()

    async def scenario():
        peers = make_peers([lookupd.tcp_address], nsqd)
        peers.start()
        try:
            await until(lambda: peers.connected(), what="connected")
            nsqd.topics["t"] = []
            peers.register("t")
            await until(lambda: producers(lookupd, "t") == [("127.0.0.1", 4150, 4151)],
                        what="topic registered")
            nsqd.topics["t"] = ["c"]
            peers.register("t", "c")
            await until(lambda: (lookup(lookupd, "t") or {}).get("channels") == ["c"],
                        what="channel registered")
            debug = lookupd.get("/debug").json()
            assert "channel:t:c" in debug
            nsqd.topics["t"] = []
            peers.unregister("t", "c")
            await until(lambda: "channel:t:c" not in lookupd.get("/debug").json(),
                        what="channel unregistered")
            del nsqd.topics["t"]
            peers.unregister("t")
            await until(lambda: producers(lookupd, "t") == [], what="topic unregistered")
            # an ephemeral channel vanishes entirely on UNREGISTER
            nsqd.topics["e"] = ["c#ephemeral"]
            peers.register("e", "c#ephemeral")
            await until(lambda: (lookup(lookupd, "e") or {}).get("channels") == ["c#ephemeral"])
            peers.unregister("e", "c#ephemeral")
            await until(lambda: (lookup(lookupd, "e") or {}).get("channels") == [])
            # the connection survived all of it
            assert peers.connected() == [lookupd.tcp_address]
            assert nsqd.identify_calls == 1
        finally:
            await peers.close()

    run(scenario())


def test_reregisters_after_lookupd_restart(lookupd_factory):
    proc = lookupd_factory()
    nsqd = FakeNsqd()
    nsqd.topics = {"t1": ["c1"], "t2": []}

    async def scenario():
        nonlocal proc
        peers = make_peers([proc.tcp_address], nsqd)
        peers.start()
        try:
            await until(lambda: producers(proc, "t1") == [("127.0.0.1", 4150, 4151)])
            proc = await asyncio.to_thread(lookupd_factory.restart, proc)
            # a change made while it was down is part of the snapshot sent on reconnect
            nsqd.topics["t3"] = []
            peers.register("t3")
            await until(lambda: producers(proc, "t1") == [("127.0.0.1", 4150, 4151)]
                        and producers(proc, "t2") == [("127.0.0.1", 4150, 4151)]
                        and producers(proc, "t3") == [("127.0.0.1", 4150, 4151)],
                        timeout=15, what="re-registration")
            assert lookup(proc, "t1")["channels"] == ["c1"]
            assert nsqd.identify_calls >= 2
        finally:
            await peers.close()

    run(scenario())


def test_pings_keep_producer_active(lookupd_factory):
    proc = lookupd_factory("--inactive-producer-timeout=1s")
    nsqd = FakeNsqd()
    nsqd.topics = {"t": []}

    async def scenario():
        peers = make_peers([proc.tcp_address], nsqd, ping_interval=0.3)
        peers.start()
        try:
            await until(lambda: producers(proc, "t") == [("127.0.0.1", 4150, 4151)])
            await asyncio.sleep(2.0)
            assert await asyncio.to_thread(producers, proc, "t") == [("127.0.0.1", 4150, 4151)]
        finally:
            await peers.close()

    run(scenario())


def test_without_pings_producer_goes_inactive(lookupd_factory):
    proc = lookupd_factory("--inactive-producer-timeout=1s")
    nsqd = FakeNsqd()
    nsqd.topics = {"t": []}

    async def scenario():
        peers = make_peers([proc.tcp_address], nsqd, ping_interval=30.0)
        peers.start()
        try:
            await until(lambda: producers(proc, "t") == [("127.0.0.1", 4150, 4151)])
            await until(lambda: producers(proc, "t") == [], timeout=5, what="inactive")
        finally:
            await peers.close()

    run(scenario())


def test_set_addresses_adds_and_removes_peers(lookupd_factory):
    a = lookupd_factory()
    b = lookupd_factory()
    nsqd = FakeNsqd()
    nsqd.topics = {"t": ["c"]}

    async def scenario():
        peers = make_peers([a.tcp_address], nsqd)
        peers.start()
        try:
            await until(lambda: producers(a, "t") == [("127.0.0.1", 4150, 4151)])
            assert lookup(b, "t") is None
            peers.set_addresses([a.tcp_address, b.tcp_address])
            await until(lambda: producers(b, "t") == [("127.0.0.1", 4150, 4151)])
            await until(lambda: sorted(peers.http_addresses()) ==
                        sorted([a.http_address, b.http_address]))
            peers.register("t2")
            await until(lambda: producers(a, "t2") and producers(b, "t2"), what="t2 on both")
            peers.set_addresses([b.tcp_address])
            await until(lambda: producers(a, "t") == [], what="removed peer disconnected")
            assert peers.http_addresses() == [b.http_address]
            assert peers.addresses() == [b.tcp_address]
            peers.register("t3")
            await until(lambda: producers(b, "t3"), what="t3 on b")
            assert lookup(a, "t3") is None
        finally:
            await peers.close()

    run(scenario())


def test_unreachable_lookupd_retries_quietly(lookupd_factory, helpers):
    port = helpers.free_port()
    nsqd = FakeNsqd()
    nsqd.topics = {"t": []}

    async def scenario():
        peers = make_peers([f"127.0.0.1:{port}"], nsqd, backoff_min=0.05, backoff_max=0.1)
        peers.start()
        try:
            await asyncio.sleep(0.5)
            assert peers.connected() == []
            assert peers.http_addresses() == []
            peers.register("ignored")  # dropped while disconnected, no error
            # the lookupd comes up on that port: the next attempt registers the snapshot
            proc = await asyncio.to_thread(lookupd_factory, tcp_port=port)
            await until(lambda: producers(proc, "t") == [("127.0.0.1", 4150, 4151)])
            assert lookup(proc, "ignored") is None
        finally:
            await peers.close()

    run(scenario())


def test_a_reply_in_time_counts_when_the_loop_was_busy_past_the_deadline(lookupd):
    """nsqd's loop blocked longer than the 1 s deadline right after a REGISTER went out (a busy
    or starved process): the reply came in time and sits unread when the deadline fires. It
    counts: the session stays up (a drop would wipe and redo every registration at lookupd)."""
    nsqd = FakeNsqd()

    async def scenario():
        peers = make_peers([lookupd.tcp_address], nsqd, timeout=0.3)
        peers.start()
        try:
            await until(lambda: peers.connected(), what="connected")
            loop = asyncio.get_running_loop()
            for i in range(3):
                nsqd.topics[f"t{i}"] = []
                peers.register(f"t{i}")
                await asyncio.sleep(0)  # the peer's task writes the REGISTER and waits
                loop.call_soon(time.sleep, 0.6)  # then the loop is blocked twice the deadline
                await until(lambda i=i: producers(lookupd, f"t{i}") == [("127.0.0.1", 4150, 4151)],
                            what=f"t{i} registered")
            assert peers.connected() == [lookupd.tcp_address]
            assert nsqd.identify_calls == 1, "the session was dropped and made again"
        finally:
            await peers.close()

    run(scenario())


def test_lookupd_error_reply_causes_reconnect(lookupd):
    """An nsqd with an invalid name in its snapshot gets a fatal error, logs it and retries."""
    nsqd = FakeNsqd()
    nsqd.topics = {"bad!name": []}

    async def scenario():
        peers = make_peers([lookupd.tcp_address], nsqd, backoff_min=0.05, backoff_max=0.1)
        peers.start()
        try:
            await until(lambda: nsqd.identify_calls >= 3, what="retries")
            nsqd.topics = {"good": []}
            await until(lambda: producers(lookupd, "good") == [("127.0.0.1", 4150, 4151)])
        finally:
            await peers.close()

    run(scenario())


def test_missing_identify_fields_are_rejected_and_retried(lookupd):
    nsqd = FakeNsqd(broadcast="")

    async def scenario():
        peers = make_peers([lookupd.tcp_address], nsqd, backoff_min=0.05, backoff_max=0.1)
        peers.start()
        try:
            await until(lambda: nsqd.identify_calls >= 2, what="retries")
            assert peers.connected() == []
            nsqd.ident["broadcast_address"] = "127.0.0.1"
            nsqd.topics = {"t": []}
            await until(lambda: producers(lookupd, "t") == [("127.0.0.1", 4150, 4151)])
        finally:
            await peers.close()

    run(scenario())


def test_close_before_start_and_twice():
    async def scenario():
        peers = make_peers(["127.0.0.1:1"], FakeNsqd())
        assert peers.addresses() == ["127.0.0.1:1"]
        await peers.close()
        await peers.close()
        peers.start()  # no-op after close
        assert peers.connected() == []

    run(scenario())
