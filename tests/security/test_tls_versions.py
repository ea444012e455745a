"""TLS as upstream's Go 1.19 build accepts it: certificates with 1024-bit RSA keys (asyncnsq's test
setup) and TLS 1.0/1.1 clients when ``--tls-min-version`` allows them, on the in-band TCP upgrade
and on the HTTPS listener; TLS 1.2/1.3 no weaker than OpenSSL's defaults (docs/security.md).

Handshakes are made at exactly one version each: ``openssl s_client`` against HTTPS (then a GET
/ping over it), and on TCP the V2 magic + IDENTIFY with ``tls_v1`` followed by the handshake of a
Python client pinned to that version (then a PUB over it). Both clients run OpenSSL at security
level 0, as OpenSSL 3 refuses TLS 1.0/1.1 client-side otherwise. The same handshakes run against
upstream nsqd with the same certificates and flags and the outcomes are compared: live with its
binaries (``NSQ_UPSTREAM_BIN``), else as recorded (``tests/recordings/tls/``).
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from helpers.polling import wait_for
from helpers.servers import VENV_BIN, ServerProcess, free_port, unique_name
from helpers.recording import recording
from helpers.wire import Wire
from helpers.upstream import upstream_binary
from nsqpy.nsqd.v2.tls import client_context, client_max_version
from nsqpy.protocol.frames import FRAME_TYPE_RESPONSE
from helpers.certs import OPENSSL, openssl

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command")]

RECORDED = recording("tls", "test_tls_versions")

VERSIONS = ("tls1.0", "tls1.1", "tls1.2", "tls1.3")
S_CLIENT_FLAG = {"tls1.0": "-tls1", "tls1.1": "-tls1_1", "tls1.2": "-tls1_2", "tls1.3": "-tls1_3"}
OPENSSL_NAME = {"tls1.0": "TLSv1", "tls1.1": "TLSv1.1", "tls1.2": "TLSv1.2", "tls1.3": "TLSv1.3"}
PY_VERSION = dict(zip(VERSIONS, (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1,
                                 ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)))
ANY_CIPHER = "DEFAULT:@SECLEVEL=0"
REFUSED = "refused"
# Go 1.19's default suites below TLS 1.2 (an RSA certificate can use these four)
GO_LEGACY_RSA = ["ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA", "AES128-SHA", "AES256-SHA"]
# Go's first choice for a client offering everything, with an RSA certificate
GO_FIRST_CHOICE = {"tls1.0": "ECDHE-RSA-AES128-SHA", "tls1.1": "ECDHE-RSA-AES128-SHA",
                   "tls1.2": "ECDHE-RSA-AES128-GCM-SHA256", "tls1.3": "TLS_AES_128_GCM_SHA256"}
# what /stats says of such a client (upstream's prettyConnectionState names)
STATS_NAMES = {"tls1.0": ("TLS1.0", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
               "tls1.1": ("TLS1.1", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
               "tls1.2": ("TLS1.2", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
               "tls1.3": ("TLS1.3", "Unknown 4865")}


# --- certificates ---------------------------------------------------------------------------------

@dataclass
class RsaCerts:
    ca: Path
    pairs: dict[str, tuple[Path, Path]]  # "rsa1024"/"rsa2048" -> (cert, key), signed by the CA


@pytest.fixture(scope="module")
def rsa(tmp_path_factory) -> RsaCerts:
    """A 2048-bit RSA CA and two leaves for localhost/127.0.0.1 (server and client use)."""
    d = tmp_path_factory.mktemp("rsa")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=nsqpy rsa test CA", cwd=d)
    (d / "leaf.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                "extendedKeyUsage=serverAuth,clientAuth\n"
                                "basicConstraints=CA:FALSE\n")
    pairs = {}
    for bits in (1024, 2048):
        name = f"rsa{bits}"
        openssl("req", "-newkey", f"rsa:{bits}", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", "leaf.ext",
                cwd=d)
        pairs[name] = (d / f"{name}.pem", d / f"{name}.key")
    return RsaCerts(d / "ca.pem", pairs)


# --- nsqd processes (ours or upstream's) ----------------------------------------------------------

class Node(ServerProcess):
    """An nsqd with TLS on free loopback ports, ready once its TCP, HTTP and HTTPS ports accept
    (plain HTTP may answer 403: a client certificate policy implies --tls-required=true)."""

    def __init__(self, binary: Path, data_path: Path, cert: tuple[Path, Path], *flags: str) -> None:
        self.tcp_port, self.http_port, self.https_port = free_port(), free_port(), free_port()
        data_path.mkdir(parents=True)
        self.argv = [str(binary), f"--data-path={data_path}", "--broadcast-address=127.0.0.1",
                     f"--tcp-address=127.0.0.1:{self.tcp_port}",
                     f"--http-address=127.0.0.1:{self.http_port}",
                     f"--https-address=127.0.0.1:{self.https_port}",
                     f"--tls-cert={cert[0]}", f"--tls-key={cert[1]}", *flags]
        self.log_path = data_path / "nsqd.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        for port in (self.tcp_port, self.http_port, self.https_port):
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        self.stop()
                        raise AssertionError(f"nsqd did not start: {self.log()}") from None
                    time.sleep(0.05)

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"


@pytest.fixture
def start(tmp_path):
    """``start("ours" | "upstream", cert_pair, *flags)``; every process is stopped by PID."""
    started: list[Node] = []

    def run(which: str, cert: tuple[Path, Path], *flags: str) -> Node:
        binary = VENV_BIN / "nsqd" if which == "ours" else upstream_binary("nsqd")
        node = Node(binary, tmp_path / f"{which}{len(started)}", cert, *flags)
        started.append(node)
        return node

    yield run
    for node in started:
        node.stop()


# --- handshakes -----------------------------------------------------------------------------------

def https_handshake(node: Node, version: str, cipher: str = ANY_CIPHER,
                    *extra: str) -> tuple[str, str] | str:
    """``openssl s_client`` at exactly ``version``: (protocol, cipher) after a GET /ping answered
    over it, or REFUSED."""
    out = subprocess.run([OPENSSL, "s_client", "-brief", "-ign_eof", S_CLIENT_FLAG[version],
                          "-cipher", cipher, "-connect", f"127.0.0.1:{node.https_port}", *extra],
                         input=b"GET /ping HTTP/1.0\r\nHost: localhost\r\n\r\n",
                         capture_output=True, timeout=20)
    text = out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")
    fields = dict(line.split(": ", 1) for line in text.splitlines()
                  if line.startswith(("Protocol version: ", "Ciphersuite: ")))
    if "Protocol version" not in fields:
        return REFUSED
    assert out.stdout.rstrip().endswith(b"OK"), text  # the listener answers over that handshake
    return fields["Protocol version"], fields["Ciphersuite"]


def client_ctx(version: str, cipher: str = ANY_CIPHER,
               cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """A Python client pinned to ``version``, at security level 0, not verifying the server."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_ciphers(cipher)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0/1.1 on purpose
        ctx.minimum_version = ctx.maximum_version = PY_VERSION[version]
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def tcp_upgrade(node: Node, ctx: ssl.SSLContext, client_id: str = "") -> Wire:
    """Magic, IDENTIFY with tls_v1, nsqd's answer, then the handshake and its OK over TLS."""
    wire = Wire(node.tcp_address, timeout=10)
    answer = wire.identify(feature_negotiation=True, tls_v1=True,
                           **({"client_id": client_id} if client_id else {}))
    assert answer["tls_v1"] is True and not wire.pending, answer
    wire.sock = ctx.wrap_socket(wire.sock)
    frame = wire.read_frame()
    assert (frame.frame_type, frame.data) == (FRAME_TYPE_RESPONSE, b"OK"), frame
    return wire


def tcp_handshake(node: Node, version: str, cipher: str = ANY_CIPHER,
                  cert: tuple[Path, Path] | None = None) -> tuple[str, str] | str:
    """(protocol, cipher) after a PUB answered over the upgraded connection, or REFUSED."""
    try:
        wire = tcp_upgrade(node, client_ctx(version, cipher, cert))
    except (ssl.SSLError, ConnectionError):
        return REFUSED
    try:
        wire.pub(unique_name("v"), b"over " + version.encode())
        return wire.sock.version(), wire.sock.cipher()[0]
    finally:
        wire.close()


def outcomes(node: Node) -> dict[tuple[str, str], tuple[str, str] | str]:
    return {(transport, v): handshake(node, v) for v in VERSIONS
            for transport, handshake in (("https", https_handshake), ("tcp", tcp_handshake))}


def expected_versions(min_version: str) -> dict[tuple[str, str], str]:
    floor = VERSIONS.index(min_version)
    return {(t, v): OPENSSL_NAME[v] if VERSIONS.index(v) >= floor else REFUSED
            for v in VERSIONS for t in ("https", "tcp")}


def versions_only(got: dict) -> dict:
    return {k: v if v == REFUSED else v[0] for k, v in got.items()}


# --- the sans-I/O part: which clients get the legacy settings -------------------------------------

@pytest.mark.parametrize("legacy, supported, expected", [
    (0x0301, None, 0x0301),                                  # TLS 1.0 client, no extension
    (0x0302, None, 0x0302),
    (0x0303, None, 0x0303),
    (0x0303, bytes([4, 0x03, 0x04, 0x03, 0x03]), 0x0304),  # TLS 1.3 + 1.2
    (0x0303, bytes([4, 0x3A, 0x3A, 0x03, 0x02]), 0x0302),  # GREASE skipped: 1.1 only
    (0x0303, bytes([2, 0x7F, 0x1C]), 0),                    # nothing TLS offered
    (0x0303, b"", 0),                                        # empty extension
    (0x0303, bytes([5, 0x03, 0x04, 0x03]), 0x0304),         # odd length: whole pairs only
])
def test_client_max_version(legacy, supported, expected):
    assert client_max_version(legacy, supported) == expected


# --- ours, pinned ---------------------------------------------------------------------------------

def test_small_key_starts_with_one_warning(start, rsa):
    small = start("ours", rsa.pairs["rsa1024"])
    warnings_logged = [line for line in small.log().splitlines() if "WARNING" in line]
    assert len(warnings_logged) == 1, warnings_logged
    assert ("WARNING: TLS: " + str(rsa.pairs["rsa1024"][0]) +
            ": key too small for OpenSSL's default security level 2 (EE_KEY_TOO_SMALL); served "
            "at level 1 as upstream nsqd would") in warnings_logged[0]
    normal = start("ours", rsa.pairs["rsa2048"])
    assert "WARNING" not in normal.log()


@pytest.mark.parametrize("key", ["rsa1024", "rsa2048"])
@pytest.mark.parametrize("min_version", VERSIONS)
def test_each_version_against_min_version(start, rsa, key, min_version):
    node = start("ours", rsa.pairs[key], f"--tls-min-version={min_version}")
    got = outcomes(node)
    assert versions_only(got) == expected_versions(min_version)
    for (transport, version), result in got.items():
        if result != REFUSED:
            assert result[1] == GO_FIRST_CHOICE[version], (transport, result)
    assert "Traceback" not in node.log()


def test_default_min_version_is_tls10(start, rsa):
    node = start("ours", rsa.pairs["rsa1024"])
    assert versions_only(outcomes(node)) == expected_versions("tls1.0")


def test_legacy_suites_are_gos(start, rsa, certs):
    """Below TLS 1.2 exactly Go's AES-CBC-SHA suites, for RSA and for ECDSA certificates."""
    rsa_node = start("ours", rsa.pairs["rsa1024"])
    for version in ("tls1.0", "tls1.1"):
        for cipher in GO_LEGACY_RSA:
            assert https_handshake(rsa_node, version, f"{cipher}:@SECLEVEL=0")[1] == cipher
            assert tcp_handshake(rsa_node, version, f"{cipher}:@SECLEVEL=0")[1] == cipher
        for cipher in ("DHE-RSA-AES128-SHA", "CAMELLIA128-SHA", "ECDHE-ECDSA-AES128-SHA"):
            assert https_handshake(rsa_node, version, f"{cipher}:@SECLEVEL=0") == REFUSED
    ec_node = start("ours", (certs.server_cert, certs.server_key))
    for cipher in ("ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA"):
        assert tcp_handshake(ec_node, "tls1.0", f"{cipher}:@SECLEVEL=0") == ("TLSv1", cipher)
    assert https_handshake(ec_node, "tls1.0") == ("TLSv1", "ECDHE-ECDSA-AES128-SHA")


@pytest.mark.parametrize("key", ["rsa1024", "rsa2048"])
def test_tls12_is_not_weakened(start, rsa, key):
    """What only TLS 1.0/1.1 need stays off at TLS 1.2: SHA-1 CBC suites, RSA key exchange and
    SHA-1 signatures are refused there (Go 1.19 accepts them: docs/security.md)."""
    node = start("ours", rsa.pairs[key])
    for cipher in GO_LEGACY_RSA + ["AES128-GCM-SHA256"]:
        assert https_handshake(node, "tls1.2", f"{cipher}:@SECLEVEL=0") == REFUSED, cipher
        assert tcp_handshake(node, "tls1.2", f"{cipher}:@SECLEVEL=0") == REFUSED, cipher
    assert https_handshake(node, "tls1.2", ANY_CIPHER, "-sigalgs", "RSA+SHA1") == REFUSED
    assert https_handshake(node, "tls1.2")[0] == "TLSv1.2"


def test_client_preferring_chacha20_gets_it(start, rsa):
    node = start("ours", rsa.pairs["rsa2048"])
    assert https_handshake(node, "tls1.2", "ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256"
                           ) == ("TLSv1.2", "ECDHE-RSA-CHACHA20-POLY1305")
    assert https_handshake(node, "tls1.3", ANY_CIPHER, "-ciphersuites", CHACHA_FIRST_13
                           ) == ("TLSv1.3", "TLS_CHACHA20_POLY1305_SHA256")


CHACHA_FIRST_13 = "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"


def test_stats_name_each_version_as_upstream(start, rsa):
    node = start("ours", rsa.pairs["rsa1024"])
    assert {v: stats_names(node, v) for v in VERSIONS} == STATS_NAMES


def stats_names(node: Node, version: str) -> tuple[str, str]:
    """/stats ``tls_version`` and ``tls_cipher_suite`` of a producer connected at ``version``."""
    client_id = f"at-{version}"
    wire = tcp_upgrade(node, client_ctx(version), client_id=client_id)
    try:
        wire.pub(unique_name("st"), b"x")
        with urllib.request.urlopen(f"http://{node.http_address}/stats?format=json",
                                    timeout=5) as resp:
            doc = orjson.loads(resp.read())
        [client] = [c for c in doc["producers"] if c["client_id"] == client_id]
        return client["tls_version"], client["tls_cipher_suite"]
    finally:
        wire.close()


@pytest.mark.parametrize("server_key, version, expected", [
    ("rsa1024", "tls1.0", "TLSv1"), ("rsa1024", "tls1.2", "TLSv1.2"),
    ("rsa1024", "tls1.3", "TLSv1.3"), ("rsa2048", "tls1.0", "TLSv1"),
    ("rsa2048", "tls1.2", REFUSED),  # level 2 kept: Go takes it (docs/security.md)
])
def test_small_client_certificate_verified(start, rsa, server_key, version, expected):
    node = start("ours", rsa.pairs[server_key], "--tls-client-auth-policy=require-verify",
                 f"--tls-root-ca-file={rsa.ca}")
    got = tcp_handshake(node, version, cert=rsa.pairs["rsa1024"])
    assert (got if got == REFUSED else got[0]) == expected
    assert tcp_handshake(node, version) == REFUSED  # no certificate: refused at every version


def test_outbound_contexts_are_not_weakened(rsa):
    """The auth client and the replication link stay TLS 1.2+ at the default level; only a small
    own key (presented on the replication link) lowers the level, as far as it needs."""
    def opts(min_version: str, pair: str | None = None) -> SimpleNamespace:
        cert, key = rsa.pairs[pair] if pair else ("", "")
        return SimpleNamespace(tls_root_ca_file=str(rsa.ca), tls_min_version=min_version,
                               tls_cert=str(cert), tls_key=str(key))

    for min_version in ("tls1.0", "tls1.1", "tls1.2"):
        ctx = client_context(opts(min_version))
        assert (ctx.minimum_version, ctx.security_level) == (ssl.TLSVersion.TLSv1_2, 2)
    assert client_context(opts("tls1.3")).minimum_version == ssl.TLSVersion.TLSv1_3
    assert client_context(opts("tls1.0", "rsa2048"), own_certificate=True).security_level == 2
    ctx = client_context(opts("tls1.0", "rsa1024"), own_certificate=True)
    assert (ctx.minimum_version, ctx.security_level) == (ssl.TLSVersion.TLSv1_2, 1)
    assert client_context(opts("tls1.0", "rsa1024")).security_level == 2  # the auth client


def test_replication_link_with_small_keys(start, rsa):
    """A cluster on 1024-bit certificates: the origin presents its own and verifies the peer's."""
    peer = start("ours", rsa.pairs["rsa1024"], "--accept-replicas",
                 "--tls-client-auth-policy=require-verify", f"--tls-root-ca-file={rsa.ca}")
    origin = start("ours", rsa.pairs["rsa1024"], f"--replicate-to={peer.tcp_address}",
                   "--replication-tls", f"--tls-root-ca-file={rsa.ca}")

    def state() -> str:
        with urllib.request.urlopen(f"http://{origin.http_address}/stats?format=json",
                                    timeout=5) as resp:
            return orjson.loads(resp.read())["replication"]["state"]

    wait_for(lambda: state() == "up", timeout=20, what="the replication link up over TLS")


# --- side by side with upstream -------------------------------------------------------------------

@pytest.mark.parametrize("key", ["rsa1024", "rsa2048"])
@pytest.mark.parametrize("min_version", VERSIONS)
def test_each_version_as_upstream(start, rsa, key, min_version):
    flag = f"--tls-min-version={min_version}"
    theirs = RECORDED.answer(None, lambda: outcomes(start("upstream", rsa.pairs[key], flag)))
    ours = outcomes(start("ours", rsa.pairs[key], flag))
    assert versions_only(theirs) == expected_versions(min_version)
    assert ours == theirs  # the same version and suite, or refused, everywhere


def test_suites_and_stats_as_upstream(start, rsa, certs):
    candidates = GO_LEGACY_RSA + ["DHE-RSA-AES128-SHA", "CAMELLIA128-SHA", "ECDHE-ECDSA-AES128-SHA"]

    def results(which: str) -> tuple:
        node = start(which, rsa.pairs["rsa1024"])
        ec_node = start(which, (certs.server_cert, certs.server_key))
        return (
            {(v, c): https_handshake(node, v, f"{c}:@SECLEVEL=0")
             for v in ("tls1.0", "tls1.1") for c in candidates},
            {c: tcp_handshake(ec_node, "tls1.0", f"{c}:@SECLEVEL=0")
             for c in ("ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA", "ECDHE-RSA-AES128-SHA")},
            {v: stats_names(node, v) for v in VERSIONS},
            https_handshake(node, "tls1.3", ANY_CIPHER, "-ciphersuites", CHACHA_FIRST_13),
            https_handshake(node, "tls1.2",
                            "ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256"))

    assert results("ours") == RECORDED.answer(None, lambda: results("upstream"))


def test_tls12_differences_from_upstream(start, rsa):
    """The documented differences at TLS 1.2: Go 1.19 also takes SHA-1 CBC suites, RSA key
    exchange, SHA-1 signatures and client keys below our level, ours does not; ours keeps the
    ECDHE CBC-SHA256/384 suites it had, which Go lacks."""
    weak = [("ECDHE-RSA-AES128-SHA:@SECLEVEL=0",), ("AES128-GCM-SHA256:@SECLEVEL=0",),
            (ANY_CIPHER, "-sigalgs", "RSA+SHA1")]
    kept = ("ECDHE-RSA-AES128-SHA256", "ECDHE-RSA-AES256-SHA384")  # kept from before
    policy = ("--tls-client-auth-policy=require-verify", f"--tls-root-ca-file={rsa.ca}")
    small = rsa.pairs["rsa1024"]  # a client certificate under the server's security level

    def results(which: str) -> tuple:
        node = start(which, rsa.pairs["rsa2048"])
        verifying = start(which, rsa.pairs["rsa2048"], *policy)
        return ([https_handshake(node, "tls1.2", *args) for args in weak],
                [https_handshake(node, "tls1.2", cipher) for cipher in kept],
                https_handshake(node, "tls1.2", "DHE-RSA-AES128-GCM-SHA256"),
                tcp_handshake(verifying, "tls1.2", cert=small))

    theirs = RECORDED.answer(None, lambda: results("upstream"))
    ours = results("ours")
    assert [got[0] for got in theirs[0]] == ["TLSv1.2"] * len(weak)
    assert ours[0] == [REFUSED] * len(weak)
    assert theirs[1] == [REFUSED] * len(kept)
    assert ours[1] == [("TLSv1.2", cipher) for cipher in kept]
    assert theirs[2] == ours[2] == REFUSED  # no DH params
    assert theirs[3][0] == "TLSv1.2"
    assert ours[3] == REFUSED
