"""nsqadmin's ``--http-client-tls-*`` flags against an nsqd that serves its API over HTTPS only.

The nsqd requires TLS (``--tls-required=true``: its plain HTTP port answers 403 with its
``https_port``) and a client certificate signed by the test CA
(``--tls-client-auth-policy=require-verify``). nsqadmin follows the 403 to HTTPS, as upstream's
HTTP client does, and presents the certificate given by the flags. Certificates are made for
the test with the openssl CLI. Upstream's nsqadmin is given the same flags and must answer the
same, start-up refusals included: live where its binaries are (``NSQ_UPSTREAM_BIN``), else as
recorded (``tests/recordings/http/`` and ``exits/test_http_client_tls.json``).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest

from admin.admin_util import NsqAdmin, request, wait_until
from admin.upstream_util import HAVE_UPSTREAM, UpstreamNsqAdmin, answer, canonical, same_answer
from helpers.recording import recording
from helpers.servers import VENV_BIN, Nsqlookupd
from helpers.upstream import upstream_binary
from security.support import OPENSSL, SecureNsqd, make_certs

pytestmark = [pytest.mark.timeout(90),
              pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command")]

TOPIC = "tls_topic"
RECORDED = recording("http", "test_http_client_tls")
RECORDED_EXITS = recording("exits", "test_http_client_tls")  # nsqadmin's start-up refusals


def https_post(nsqd: SecureNsqd, ctx, path: str, body: bytes = b"") -> None:
    req = urllib.request.Request(f"https://{nsqd.https_address}{path}", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
        assert resp.status == 200


def https_stats(nsqd: SecureNsqd, ctx) -> dict:
    url = f"https://{nsqd.https_address}/stats?format=json&topic={TOPIC}"
    with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admin_tls")
    certs = make_certs(tmp / "certs")
    started = []
    try:
        lookupd = Nsqlookupd(tmp / "lookupd")
        started.append(lookupd)
        nsqd = SecureNsqd(tmp / "nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}",
                          "--tls-required=true", "--tls-client-auth-policy=require-verify",
                          f"--tls-root-ca-file={certs.ca}", certs=certs)
        started.append(nsqd)
        ctx = certs.client_context("client")
        https_post(nsqd, ctx, f"/topic/create?topic={TOPIC}")
        https_post(nsqd, ctx, f"/channel/create?topic={TOPIC}&channel=ch")
        https_post(nsqd, ctx, f"/mpub?topic={TOPIC}", b"a\nb\nc")
        wait_until(lambda: request(f"http://{lookupd.http_address}/lookup?topic={TOPIC}")
                   .status == 200, what="topic registered")
        # plain HTTP is refused: what nsqadmin meets first
        refused = request(f"http://{nsqd.http_address}/stats?format=json")
        assert refused.status == 403 and refused.json()["https_port"] == nsqd.https_port
        yield lookupd, nsqd, certs
    finally:
        for proc in reversed(started):
            proc.stop()


@pytest.fixture
def admin(tmp_path):
    started: list = []

    def start(*flags: str, upstream: bool = False):
        cls = UpstreamNsqAdmin if upstream else NsqAdmin
        proc = cls(tmp_path / f"admin{len(started)}", *flags)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def client_flags(certs, ca: bool = True, cert: bool = True) -> list[str]:
    flags = [f"--http-client-tls-root-ca-file={certs.ca}"] if ca else []
    if cert:
        flags += [f"--http-client-tls-cert={certs.client_cert}",
                  f"--http-client-tls-key={certs.client_key}"]
    return flags


def test_nsqd_given_directly_is_read_and_acted_on_over_https(secure, admin):
    lookupd, nsqd, certs = secure
    adm = admin(f"--nsqd-http-address={nsqd.http_address}", *client_flags(certs))
    nodes = request(f"{adm.url}/api/nodes").json()
    assert nodes["message"] == ""
    assert [n["http_port"] for n in nodes["nodes"]] == [nsqd.http_port]
    topic = request(f"{adm.url}/api/topics/{TOPIC}").json()
    assert (topic["message"], topic["message_count"]) == ("", 3)
    assert topic["channels"][0]["depth"] == 3
    node = request(f"{adm.url}/api/nodes/{nsqd.http_address}").json()
    assert node["total_messages"] == 3
    # an action reaches the nsqd over HTTPS too
    resp = request(f"{adm.url}/api/topics/{TOPIC}/ch", "POST", {"action": "pause"})
    assert (resp.status, resp.json()) == (200, {"message": ""})
    chan = https_stats(nsqd, certs.client_context("client"))["topics"][0]["channels"][0]
    assert chan["paused"] is True
    resp = request(f"{adm.url}/api/topics/{TOPIC}/ch", "POST", {"action": "unpause"})
    assert resp.status == 200


def test_lookupd_listed_nsqd_is_read_over_https(secure, admin):
    lookupd, nsqd, certs = secure
    adm = admin(f"--lookupd-http-address={lookupd.http_address}", *client_flags(certs))
    doc = request(f"{adm.url}/api/topics/{TOPIC}/ch").json()
    assert doc["message"] == "" and doc["depth"] == 3
    assert [n["node"] for n in doc["nodes"]] == [nsqd.http_address]
    counter = request(f"{adm.url}/api/counter").json()
    assert counter["message"] == "" and counter["stats"]


def test_insecure_skip_verify_needs_no_ca(secure, admin):
    lookupd, nsqd, certs = secure
    adm = admin(f"--nsqd-http-address={nsqd.http_address}",
                "--http-client-tls-insecure-skip-verify", *client_flags(certs, ca=False))
    doc = request(f"{adm.url}/api/topics/{TOPIC}").json()
    assert (doc["message"], doc["message_count"]) == ("", 3)


@pytest.mark.parametrize("ca, cert", [(True, False), (False, True)],
                         ids=["no client certificate", "server not trusted"])
def test_without_what_nsqd_requires_the_node_cannot_be_read(secure, admin, ca, cert):
    """The same refusal as upstream's nsqadmin (live, or as recorded), nsqd's ports by role."""
    lookupd, nsqd, certs = secure
    flags = [f"--nsqd-http-address={nsqd.http_address}", *client_flags(certs, ca, cert)]

    def refusal(upstream: bool) -> tuple[int, dict]:
        resp = request(f"{admin(*flags, upstream=upstream).url}/api/topics/{TOPIC}")
        doc = resp.json()
        for port, role in ((nsqd.https_port, "<nsqd-https>"), (nsqd.http_port, "<nsqd-http>")):
            doc["message"] = doc["message"].replace(f"127.0.0.1:{port}", role)
        return resp.status, doc

    def stable(answer: tuple[int, dict]) -> tuple[int, dict]:
        """What of a refusal is the same on every run: refused mid-handshake (no client
        certificate), the request that failed but not how it ended, which is the alert nsqd
        sends (TLS 1.3: OpenSSL's certificate_required, docs/security.md), or EOF or a reset
        as the timing goes."""
        status, doc = answer
        return status, doc if cert else doc | {"message": doc["message"].split('": ')[0]}

    theirs = RECORDED.answer(None, lambda: refusal(True), kept=stable)
    ours = refusal(False)
    assert ours[0] == 502
    assert ours[1]["message"].startswith(
        'UPSTREAM_ERROR: failed to query any nsqd: Get "https://<nsqd-https>/'), ours
    assert stable(ours) == stable(theirs)
    if RECORDED.live and not cert:  # (how upstream's ended: seen live only)
        assert theirs[1]["message"].endswith((": EOF", "connection reset by peer",
                                              "remote error: tls: certificate required",
                                              "remote error: tls: bad certificate")), theirs


def test_same_answers_as_upstream_over_https(secure, admin):
    """Upstream's nsqadmin live (``NSQ_UPSTREAM_BIN``), else its answers as recorded
    (``tests/recordings/http/test_http_client_tls.json``, ports by role)."""
    lookupd, nsqd, certs = secure
    roles = {lookupd.tcp_port: "<lookupd-tcp>", lookupd.http_port: "<lookupd-http>",
             nsqd.tcp_port: "<nsqd-tcp>", nsqd.http_port: "<nsqd-http>",
             nsqd.https_port: "<nsqd-https>"}
    flags = [f"--lookupd-http-address={lookupd.http_address}", *client_flags(certs)]
    ours = admin(*flags)
    theirs = admin(*flags, upstream=True) if HAVE_UPSTREAM else None
    for path in ("/api/nodes", f"/api/nodes/{nsqd.http_address}", f"/api/topics/{TOPIC}",
                 f"/api/topics/{TOPIC}/ch", "/api/counter"):
        mine = answer(ours.http_port, "GET", path)
        if theirs is not None:
            mine, other = same_answer(lambda: answer(ours.http_port, "GET", path),
                                      lambda: answer(theirs.http_port, "GET", path))
            assert mine == other, path
        up = RECORDED.answer(canonical(path, roles), lambda: other,
                             kept=lambda a: canonical(a, roles))
        if theirs is None:
            assert canonical(mine, roles) == up, path
        assert mine.status == 200 and mine.body["message"] == ""


# --- start-up refusals -------------------------------------------------------------------------

def fatal_line(binary: Path, flags: list[str]) -> tuple[int, str]:
    """Exit code and the FATAL text (after the timestamp) of an nsqadmin refusing to start."""
    out = subprocess.run([str(binary), "--http-address=127.0.0.1:0",
                          "--nsqd-http-address=127.0.0.1:1", *flags],
                         capture_output=True, text=True, timeout=15)
    lines = [ln for ln in out.stderr.splitlines() if "FATAL" in ln]
    return out.returncode, lines[-1].split("FATAL: ", 1)[-1] if lines else out.stderr


def startup_cases(certs, tmp: Path) -> list[tuple[list[str], str]]:
    junk = tmp / "junk.pem"
    junk.write_text("not a certificate\n")
    missing = tmp / "missing.pem"
    other_key = certs.dir / "ca.key"  # a key, but not the certificate's
    return [
        ([f"--http-client-tls-cert={certs.client_cert}"],
         "--http-client-tls-key must be specified with --http-client-tls-cert"),
        ([f"--http-client-tls-key={certs.client_key}"],
         "--http-client-tls-cert must be specified with --http-client-tls-key"),
        ([f"--http-client-tls-cert={missing}", f"--http-client-tls-key={certs.client_key}"],
         f"failed to LoadX509KeyPair {missing}, {certs.client_key} - "
         f"open {missing}: no such file or directory"),
        ([f"--http-client-tls-cert={junk}", f"--http-client-tls-key={certs.client_key}"],
         f"failed to LoadX509KeyPair {junk}, {certs.client_key} - "
         "tls: failed to find any PEM data in certificate input"),
        ([f"--http-client-tls-cert={certs.client_cert}", f"--http-client-tls-key={junk}"],
         f"failed to LoadX509KeyPair {certs.client_cert}, {junk} - "
         "tls: failed to find any PEM data in key input"),
        ([f"--http-client-tls-cert={certs.client_cert}", f"--http-client-tls-key={other_key}"],
         f"failed to LoadX509KeyPair {certs.client_cert}, {other_key} - "
         "tls: private key does not match public key"),
        ([f"--http-client-tls-root-ca-file={missing}"],
         f"failed to read TLS root CA file {missing} - open {missing}: no such file or directory"),
        ([f"--http-client-tls-root-ca-file={junk}"], f"failed to AppendCertsFromPEM {junk}"),
    ]


def test_startup_refusals(secure, tmp_path):
    """Upstream's nsqadmin (live, or as recorded in ``tests/recordings/exits/``) refuses each
    with the same status and FATAL text, the certificates' and the test's directories masked."""
    _, _, certs = secure
    cases = startup_cases(certs, tmp_path)

    def masked(text: str) -> str:
        return text.replace(str(certs.dir), "<certs>").replace(str(tmp_path), "<tmp>")

    def refusals(binary: Path) -> dict[str, tuple[int, str]]:
        out = {}
        for flags, _ in cases:
            code, text = fatal_line(binary, flags)
            out[masked(" ".join(flags))] = (code, masked(text))
        return out

    upstream = RECORDED_EXITS.answer(None, lambda: refusals(Path(upstream_binary("nsqadmin"))))
    ours = refusals(VENV_BIN / "nsqadmin")
    for flags, message in cases:
        case = masked(" ".join(flags))
        assert ours[case] == (1, masked(f"failed to instantiate nsqadmin - {message}")), flags
        assert case in upstream, f"{case}: not recorded; `make record-upstream` (docs/testing.md)"
        assert ours[case] == upstream[case], flags
