"""What an idle nsqlookupd holds: no aiohttp, no OpenSSL (it serves no TLS), no Prometheus
client until a scrape asks (prometheus_client then brings OpenSSL along through urllib), and
a resident size well under what it was with aiohttp."""

from __future__ import annotations

import time

import pytest

from helpers.proc import mapped, rss_kib
from nsqpy.lookupd.registration_db import PeerInfo, Producer, RegistrationDB, next_change

pytestmark = pytest.mark.timeout(60)


def test_idle_lookupd_loads_no_tls_no_aiohttp(lookupd):
    maps = mapped(lookupd.pid)
    assert "libssl" not in maps and "libcrypto" not in maps
    assert "aiohttp" not in maps and "prometheus" not in maps
    # 20 MiB with bytecode caches; compiled from source (PYTHONDONTWRITEBYTECODE) ~1.5 more;
    # the bound is generous, the point is that nothing heavy came back (it was 40 MiB)
    assert rss_kib(lookupd.pid) < 26 * 1024
    assert lookupd.get("/metrics").status == 200  # a scrape loads what it needs


def test_lookup_answers_are_reused_until_the_db_moves():
    """RegistrationDB.version moves with every change a /lookup could show."""
    db = RegistrationDB()
    seen = [db.version]

    def moved() -> bool:
        seen.append(db.version)
        return seen[-1] != seen[-2]

    peer = PeerInfo("p:1", last_update=time.time_ns())
    db.add_registration(("topic", "t", ""))
    assert moved()
    db.add_registration(("topic", "t", ""))
    assert not moved()
    assert db.add_producer(("topic", "t", ""), Producer(peer)) and moved()
    assert not db.add_producer(("topic", "t", ""), Producer(peer)) and not moved()
    db.touch()
    assert moved()
    assert db.remove_producer(("topic", "t", ""), "p:1")[0] and moved()
    db.remove_registration(("topic", "t", ""))
    assert moved()


def test_next_change_is_when_activity_or_a_tombstone_runs_out():
    now = 1_000_000_000_000
    active = Producer(PeerInfo("a", last_update=now - 10))
    silent = Producer(PeerInfo("s", last_update=now - 500))
    tomb = Producer(PeerInfo("t", last_update=now))
    tomb.tombstone(now - 5)
    assert next_change([active], 100, 45, now) == now - 10 + 100
    assert next_change([silent], 100, 45, now) == 1 << 63  # back only with a PING
    assert next_change([tomb], 100, 45, now) == now - 5 + 45
    assert next_change([active, silent, tomb], 100, 45, now) == now + 40
