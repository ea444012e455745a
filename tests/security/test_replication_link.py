"""The replication link (docs/replication.md) to a peer that requires TLS, a client certificate or
AUTH: the origin handshakes as a V2 client would (--replication-tls, --replication-auth-secret)
and its messages reach the peer's replica; without them, or with a refused secret, the origin
stays degraded (publishes still answered) and says why."""

from __future__ import annotations

import pytest

from helpers.polling import wait_for
from helpers.replication import get_json, replica
from helpers.wire import Wire
from security.support import grant

pytestmark = pytest.mark.timeout(60)

REPLICATION_GRANT = {"topic": "^nsqpy-replication$", "channels": [".*"],
                     "permissions": ["publish", "subscribe"]}


def state(origin) -> str:
    return get_json(origin, "/stats?format=json")["replication"]["state"]


def publish_and_expect_replica(origin, n: int = 20) -> None:
    """In sync mode the MPUB's OK means the peer stored the batch (the peer's own /stats may
    be HTTPS-only here, so the origin's account is read)."""
    w = Wire(origin.tcp_address)
    w.mpub("repl_sec", [b"m%d" % i for i in range(n)])
    w.close()
    rep = get_json(origin, "/stats?format=json")["replication"]
    assert (rep["state"], rep["shipped_messages"], rep["degraded_messages"], rep["unacked_batches"]) \
        == ("up", n, 0, 0), rep


def test_tls_with_client_certificate_required(secure_nsqd, certs):
    peer = secure_nsqd("--accept-replicas", "--tls-required=true",
                       "--tls-client-auth-policy=require-verify", f"--tls-root-ca-file={certs.ca}",
                       certs=certs)
    origin = secure_nsqd(f"--replicate-to={peer.tcp_address}", "--replication-tls",
                         f"--tls-root-ca-file={certs.ca}", f"--tls-cert={certs.client_cert}",
                         f"--tls-key={certs.client_key}")
    wait_for(lambda: state(origin) == "up", what="link up over TLS")
    publish_and_expect_replica(origin)


def test_plain_link_to_a_tls_only_peer_stays_degraded(secure_nsqd, certs):
    peer = secure_nsqd("--accept-replicas", "--tls-required=true", certs=certs)
    origin = secure_nsqd(f"--replicate-to={peer.tcp_address}", "--replication-degraded=accept")
    wait_for(lambda: "refused" in origin.log(), what="the refusal logged")
    assert state(origin) == "degraded"
    w = Wire(origin.tcp_address)
    w.pub("repl_sec", b"still answered")  # degraded (accept): accepted, held once
    w.close()


def test_auth_secret_granted_and_refused(secure_nsqd, auth_server):
    auth_server.answers["repl-secret"] = grant(identity="origin", auths=[REPLICATION_GRANT])
    auth_server.answers["consumer-secret"] = grant(identity="c", auths=[
        {"topic": ".*", "channels": [".*"], "permissions": ["subscribe"]}])
    peer = secure_nsqd("--accept-replicas", f"--auth-http-address={auth_server.address}")
    good = secure_nsqd(f"--replicate-to={peer.tcp_address}", "--replication-auth-secret=repl-secret")
    wait_for(lambda: state(good) == "up", what="link up after AUTH")
    publish_and_expect_replica(good)
    assert replica(peer, "repl_sec")["messages"] == 20
    # a secret the auth server grants only subscribing is not enough for a replica
    weak = secure_nsqd(f"--replicate-to={peer.tcp_address}",
                       "--replication-auth-secret=consumer-secret")
    wait_for(lambda: "E_UNAUTHORIZED" in weak.log(), what="the refusal logged")
    assert state(weak) == "degraded"
    # no secret at all: the origin knows before sending anything
    none = secure_nsqd(f"--replicate-to={peer.tcp_address}")
    wait_for(lambda: "refused" in none.log() or "E_AUTH_FIRST" in none.log(), what="refusal")
    assert state(none) == "degraded"
