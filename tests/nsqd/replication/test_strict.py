"""Sync replication's strict default and its bounded wait (issue #25, docs/replication.md §6).

With ``--replication-ack=sync`` a publish is answered ``OK`` only once the peer stored it. When
the peer cannot (frozen, down) the publisher waits at most ``--replication-sync-timeout``; then
``--replication-degraded=fail`` (the default) answers the command's error (``E_PUB_FAILED``,
``E_MPUB_FAILED``, ``E_DPUB_FAILED``, then closes the connection as upstream does after them)
or HTTP 503 ``REPLICA_UNAVAILABLE``; ``accept`` answers ``OK`` with one copy, as before."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from helpers.replication import get_json, linked, post, replica, wait_for
from helpers.servers import VENV_BIN, unique_name
from helpers.wire import Wire
from nsqpy.protocol.commands import encode_mpub

pytestmark = pytest.mark.timeout(90)


def rep_stats(node) -> dict:
    return get_json(node, "/stats?format=json")["replication"]


def http_pub(node, path: str, body: bytes) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://{node.http_address}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.fixture
def frozen_pair(nsqd_factory):
    """A -> B with a 1.5 s sync timeout; B is stopped (SIGSTOP) by the test and resumed here."""
    b = nsqd_factory("--accept-replicas")
    frozen: list = []

    def start(*flags: str):
        a = nsqd_factory(f"--replicate-to={b.tcp_address}", "--replication-sync-timeout=1.5s", *flags)
        wait_for(lambda: linked(a), what="link up")
        return a

    def freeze() -> None:
        os.kill(b.pid, signal.SIGSTOP)
        frozen.append(b)

    yield b, start, freeze
    for node in frozen:
        os.kill(node.pid, signal.SIGCONT)


def test_strict_by_default_every_publish_kind_fails_without_a_copy(frozen_pair):
    b, start, freeze = frozen_pair
    a = start()
    assert rep_stats(a)["degraded_setting"] == "fail"
    topic = unique_name()
    assert post(a, f"/channel/create?topic={topic}&channel=c") == 200
    freeze()
    watched: dict = {}

    def watch() -> None:  # what /stats says while the publishes wait
        time.sleep(0.8)
        watched.update(rep_stats(a))
    t = threading.Thread(target=watch)
    t.start()
    results = []
    for cmd in (b"PUB", b"MPUB", b"DPUB"):
        w = Wire(a.tcp_address, timeout=10)
        t0 = time.monotonic()
        if cmd == b"MPUB":
            w.send(encode_mpub(topic, [b"m1", b"m2"]))
        elif cmd == b"DPUB":
            w.cmd(b"DPUB", topic, b"1000", body=b"d")
        else:
            w.cmd(b"PUB", topic, body=b"p")
        frame = w.read_frame()
        results.append((frame.data.split(b" ")[0], time.monotonic() - t0, w.is_closed(2)))
        w.close()
    t.join()
    status, body = http_pub(a, f"/pub?topic={topic}", b"h")
    assert (status, body) == (503, b'{"message":"REPLICA_UNAVAILABLE"}')
    status, body = http_pub(a, f"/mpub?topic={topic}", b"h1\nh2")
    assert status == 503
    for (code, waited, closed), want in zip(results, (b"E_PUB_FAILED", b"E_MPUB_FAILED",
                                                      b"E_DPUB_FAILED")):
        assert code == want
        assert 1.3 < waited < 4.0, waited  # the bound, with a busy machine's margin
        assert closed  # as upstream after E_PUB_FAILED
    assert watched["waiting_publishes"] == 1 and watched["longest_wait_ms"] >= 500, watched
    stats = rep_stats(a)
    assert stats["failed_publishes"] == 5 and stats["waiting_publishes"] == 0
    assert stats["sync_timeout_ms"] == 1500
    os.kill(b.pid, signal.SIGCONT)
    w = Wire(a.tcp_address)
    w.pub(topic, b"after")  # the peer is back: OK again, and the copy is there
    # at-least-once: the failed publishes were queued too, and are replicated like the rest
    assert replica(b, topic)["messages"] == 8
    with urllib.request.urlopen(f"http://{a.http_address}/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    labels = f'{{peer="{b.tcp_address}",degraded="fail"}}'
    for line in (f"nsqd_replication_failed_publishes_total{labels} 5",
                 f"nsqd_replication_waiting_publishes{labels} 0",
                 f"nsqd_replication_link_up{labels} 1"):
        assert line in metrics, metrics
    with urllib.request.urlopen(f"http://{b.http_address}/metrics", timeout=5) as resp:
        assert "nsqd_replica_messages{" in resp.read().decode()


def test_strict_publish_waits_for_the_link_to_come_back(nsqd_factory):
    b = nsqd_factory("--accept-replicas")
    a = nsqd_factory(f"--replicate-to={b.tcp_address}", "--replication-sync-timeout=10s")
    wait_for(lambda: linked(a), what="link up")
    topic = unique_name()
    assert post(a, f"/channel/create?topic={topic}&channel=c") == 200
    b.stop()
    wait_for(lambda: rep_stats(a)["state"] == "degraded", what="link down")
    w = Wire(a.tcp_address, timeout=15)
    w.cmd(b"PUB", topic, body=b"waits")
    wait_for(lambda: rep_stats(a)["waiting_publishes"] == 1, what="the publish waiting for a copy")
    b2 = b.restart("--accept-replicas")
    try:
        w.expect_ok()  # answered once the returning peer stored it (re-ship)
        assert replica(b2, topic)["messages"] == 1
    finally:
        b2.stop()


def test_accept_answers_ok_with_one_copy_after_the_wait(frozen_pair):
    b, start, freeze = frozen_pair
    a = start("--replication-degraded=accept")
    topic = unique_name()
    assert post(a, f"/channel/create?topic={topic}&channel=c") == 200
    freeze()
    w = Wire(a.tcp_address, timeout=60)
    t0 = time.monotonic()
    w.pub(topic, b"single")  # answered once the sync timeout passed, not before
    assert time.monotonic() - t0 > 1.3
    assert http_pub(a, f"/pub?topic={topic}", b"h")[0] == 200
    stats = rep_stats(a)
    assert stats["accepted_single_copy"] == 2 and stats["failed_publishes"] == 0


@pytest.mark.parametrize("flags,needs", [
    (["--replication-degraded=fail"], "needs --replicate-to"),
    (["--replication-sync-timeout=2s"], "needs --replicate-to"),
    (["--replicate-to=127.0.0.1:1", "--replication-ack=async", "--replication-degraded=fail"],
     "needs --replication-ack=sync"),
    (["--replicate-to=127.0.0.1:1", "--replication-degraded=maybe"], "fail or accept"),
])
def test_strictness_flags_need_sync_replication(tmp_path, flags, needs):
    out = subprocess.run([str(VENV_BIN / "nsqd"), *flags, f"--data-path={tmp_path}"],
                         capture_output=True, text=True, timeout=20)
    assert out.returncode != 0
    assert needs in out.stderr + out.stdout


def test_a_publish_that_creates_its_topic_waits_for_lookupd_and_for_the_copy(frozen_pair, tmp_path):
    """With nsqlookupd, a new topic's publish is answered after the channel query (upstream's
    GetTopic blocks on it); with sync replication the same publish still joins the wait of its
    own batch: OK with the copy, the error without it."""
    from helpers.servers import Nsqlookupd

    b, start, freeze = frozen_pair
    lookupd = Nsqlookupd(tmp_path / "lookupd")
    try:
        a = start(f"--lookupd-tcp-address={lookupd.tcp_address}")
        wait_for(lambda: get_json(lookupd, "/nodes")["producers"], what="registration")
        w = Wire(a.tcp_address, timeout=10)
        w.cmd(b"PUB", unique_name(), body=b"first")
        assert w.read_frame().data == b"OK"
        assert http_pub(a, f"/pub?topic={unique_name()}", b"h") == (200, b"OK")
        freeze()
        w.cmd(b"PUB", unique_name(), body=b"second")
        assert w.read_frame().data.startswith(b"E_PUB_FAILED")
        assert w.is_closed(2)
        assert http_pub(a, f"/pub?topic={unique_name()}", b"h") == (
            503, b'{"message":"REPLICA_UNAVAILABLE"}')
    finally:
        lookupd.stop()
