"""Every TLS client context nsqpy makes verifies a server as Go's ``crypto/x509`` does, on every
Python (common/gotls.py): certificates made the ways operators make them (helpers/certs.py:
openssl's defaults, a CA whose basicConstraints is not critical, a CA file holding an
intermediate, a self-signed leaf), which Python 3.13's ``ssl.create_default_context()`` refuses
in part, and two that Go refuses. Go's verdicts come from Go itself (the oracle) where ``go`` is
installed; the utilities are compared with upstream's (its binaries live, or what they did as
recorded in ``tests/recordings/tls/test_gotls.json``).

``make test`` runs this module on every CPython it finds (3.11, 3.12, 3.13; docs/testing.md).
"""

from __future__ import annotations

import signal
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from helpers.certs import OPENSSL, CertKind, make_kinds
from helpers.polling import wait_for
from helpers.recording import recording
from helpers.servers import unique_name
from security.support import SecureNsqd
from tools.sidebyside import Running, binary, run_once
from tools.tool_util import files_under, http

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command")]

ACCEPTED = ("openssl-defaults", "noncritical-ca", "intermediate-root", "self-signed-leaf")
RECORDED = recording("tls", "test_gotls")  # upstream's utilities over TLS: status and output


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> dict[str, CertKind]:
    return make_kinds(tmp_path_factory.mktemp("kinds"))


@pytest.fixture(scope="module")
def servers(kinds, tmp_path_factory):
    """One nsqd per kind, presenting that kind's chain on HTTPS and on the TCP ``tls_v1`` upgrade."""
    nodes: dict[str, SecureNsqd] = {}
    try:
        for name, kind in kinds.items():
            nodes[name] = SecureNsqd(tmp_path_factory.mktemp(name), certs=kind)
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()


def verdict(ctx: ssl.SSLContext, node: SecureNsqd) -> str:
    """``"accepted"`` when an HTTPS GET /ping through ``ctx`` is answered, else OpenSSL's reason."""
    try:
        with urllib.request.urlopen(f"https://{node.https_address}/ping", context=ctx,
                                    timeout=10) as resp:
            return "accepted" if resp.read() == b"OK" else "bad answer"
    except urllib.error.URLError as err:
        if isinstance(err.reason, ssl.SSLCertVerificationError):
            return err.reason.verify_message
        raise


# --- every place that makes a client context ------------------------------------------------------

def _nsqd_outbound(roots: Path) -> ssl.SSLContext:
    """nsqd's auth-server client and replication link (nsqd/v2/tls.py)."""
    from nsqpy.nsqd.v2 import tls
    opts = SimpleNamespace(tls_root_ca_file=str(roots), tls_min_version="tls1.2", tls_cert="",
                           tls_key="")
    return tls.client_context(opts, own_certificate=True)


def _spark(roots: Path) -> ssl.SSLContext:
    """The Spark source and sink (``tls``, ``tlsCaFile`` options)."""
    from nsqpy.spark.options import tls_context
    ctx = tls_context({"tls": True, "tls_ca_file": str(roots)})
    assert ctx is not None
    return ctx


def _utilities(roots: Path) -> ssl.SSLContext:
    """nsq_tail, nsq_to_file, ... (go-nsq's ``tls_v1`` and ``tls_root_ca_file`` options)."""
    from nsqpy.tools.goconfig import parse_go_nsq_options
    ctx = parse_go_nsq_options(["tls_v1", f"tls_root_ca_file,{roots}"], "--consumer-opt").ssl_context()
    assert ctx is not None
    return ctx


def _nsqadmin(roots: Path) -> ssl.SSLContext:
    """nsqadmin's HTTP client (``--http-client-tls-root-ca-file``)."""
    from nsqpy.admin.v1client import client_tls_context
    return client_tls_context(False, str(roots), "", "")


def _helper(roots: Path) -> ssl.SSLContext:
    from nsqpy.common.gotls import client_context
    return client_context(str(roots))


MAKERS: dict[str, Callable[[Path], ssl.SSLContext]] = {
    "gotls": _helper, "nsqd": _nsqd_outbound, "spark": _spark, "utilities": _utilities,
    "nsqadmin": _nsqadmin}


@pytest.mark.parametrize("maker", MAKERS)
def test_every_client_context_accepts_what_go_accepts(kinds, servers, maker):
    make = MAKERS[maker]
    got = {name: verdict(make(kind.roots), servers[name]) for name, kind in kinds.items()}
    assert {name: v == "accepted" for name, v in got.items()} == \
        {name: kind.go_accepts for name, kind in kinds.items()}, got


def test_the_kinds_are_what_go_says(kinds, go_oracle):
    """The table's expectations are Go 1.19's own verdicts (crypto/x509, for 127.0.0.1)."""
    replies = go_oracle.ask(("x", [kind.roots.read_bytes(), kind.server_cert.read_bytes(),
                                   "127.0.0.1"]) for kind in kinds.values())
    got = {name: reply.error or "accepted" for name, reply in zip(kinds, replies)}
    assert {name: v == "accepted" for name, v in got.items()} == \
        {name: kind.go_accepts for name, kind in kinds.items()}, got


def test_the_replication_link_verifies_as_go(kinds, tmp_path):
    """An origin whose peer presents an ``openssl x509 -req`` leaf (no Authority Key Identifier)
    under a CA of openssl's defaults: the link comes up over TLS on every Python."""
    kind = kinds["openssl-defaults"]
    peer = SecureNsqd(tmp_path / "peer", "--accept-replicas", certs=kind)
    try:
        origin = SecureNsqd(tmp_path / "origin", f"--replicate-to={peer.tcp_address}",
                            "--replication-tls", f"--tls-root-ca-file={kind.roots}", certs=kind)
        try:
            wait_for(lambda: _replication_state(origin) == "up", timeout=30,
                     what="the replication link up over TLS")
        finally:
            origin.stop()
    finally:
        peer.stop()


def _replication_state(node: SecureNsqd) -> str:
    import orjson
    status, body = http("GET", f"http://{node.http_address}/stats?format=json")
    return orjson.loads(body)["replication"]["state"] if status == 200 else ""


# --- the utilities over TLS, ours and upstream's ---------------------------------------------------

def _tls_opts(kind: CertKind) -> list[str]:
    return ["--consumer-opt=tls_v1,true", f"--consumer-opt=tls_root_ca_file,{kind.roots}"]


def upstream_and_ours(attempt: Callable[[str], tuple]) -> tuple[tuple, tuple]:
    """``attempt(side)`` -> ``(status, output, stderr)`` for upstream's utility (live, or its
    status and output as recorded) and for ours."""
    upstream = RECORDED.answer(None, lambda: attempt("upstream"), kept=lambda up: up[:2])
    return upstream, attempt("nsqpy")


@pytest.mark.parametrize("name", ACCEPTED)
def test_nsq_tail_over_tls(kinds, servers, name):
    def attempt(side: str) -> tuple:
        node, topic = servers[name], unique_name("tail")
        assert http("POST", f"http://{node.http_address}/pub?topic={topic}", b"over tls")[0] == 200
        outcome = run_once([binary(side, "nsq_tail"), f"--topic={topic}",
                            f"--nsqd-tcp-address={node.tcp_address}", "--n=1",
                            *_tls_opts(kinds[name])], timeout=30)
        return outcome.code, outcome.stdout, outcome.stderr

    upstream, ours = upstream_and_ours(attempt)
    assert ours[:2] == upstream[:2] == (0, b"over tls\n"), (ours[2], upstream[2:])


@pytest.mark.parametrize("name", ACCEPTED)
def test_nsq_to_file_over_tls(kinds, servers, name, tmp_path):
    def attempt(side: str) -> tuple:
        node, topic, out = servers[name], unique_name("file"), tmp_path / side
        assert http("POST", f"http://{node.http_address}/pub?topic={topic}", b"archived")[0] == 200
        running = Running([binary(side, "nsq_to_file"), f"--topic={topic}", f"--output-dir={out}",
                           f"--nsqd-tcp-address={node.tcp_address}", *_tls_opts(kinds[name])],
                          tmp_path / f"{side}-logs")
        try:
            wait_for(lambda: files_under(out), timeout=30, what=f"{side}'s nsq_to_file's file")
        finally:
            outcome = running.finish(signal.SIGTERM)
        return outcome.code, [f.read_bytes() for f in files_under(out)], outcome.stderr

    upstream, ours = upstream_and_ours(attempt)
    assert ours[:2] == upstream[:2] == (0, [b"archived\n"]), (ours[2], upstream[2:])
