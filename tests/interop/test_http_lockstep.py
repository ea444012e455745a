"""nsqd's and nsqlookupd's HTTP APIs side by side with upstream v1.3.0's binaries, in lockstep.

Both clusters (nsqlookupd + an nsqd registered with it, same flags) get the same raw requests in
the same order: every route with every parameter it reads, with valid, invalid, encoded, repeated
and missing values, odd methods and paths, bodies at and past the limits, then a seeded random mix
of the same. Each answer (status line, headers, body) must be upstream's once times, ports and
memory figures are masked (see ``http_lockstep.py``). The seed is printed; ``NSQ_HTTP_SEEDS`` (a
comma-separated list) and ``NSQ_HTTP_REQUESTS`` (per seed) run more.

Upstream's cluster runs live with its binaries (``NSQ_UPSTREAM_BIN``). Without them ours gets the
same requests in the same order and each answer is compared with upstream's as recorded
(``tests/recordings/http/test_http_lockstep.json``: the request and upstream's normalised answer,
in order); seeds or request counts other than the defaults have no recording.
"""

from __future__ import annotations

import os
import random
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers.recording import live, recording
from helpers.servers import VENV_BIN, ServerProcess, free_port
from helpers.wire import Wire
from helpers.upstream import upstream_binary
from interop import http_lockstep as hl
from nsqpy.nsqd.options import config_key_map

pytestmark = pytest.mark.timeout(300)

RECORDED = recording("http", "test_http_lockstep")
#: the machine's name is in nsqd's answers (its broadcast address, nsqlookupd's node list)
HOST_MASK = {socket.gethostname(): "<hostname>"}
SEEDS = [int(s) for s in os.environ.get("NSQ_HTTP_SEEDS", "1,2,3").split(",")]
REQUESTS = int(os.environ.get("NSQ_HTTP_REQUESTS", "200"))
NSQD_FLAGS = ["--max-msg-size=2048", "--max-body-size=8192", "--mem-queue-size=100"]
#: a tombstone outlives the slowest run (the default 45 s can end mid-run on a busy machine,
#: and the recording was made before any expired); no answer shows the lifetime itself
LOOKUPD_FLAGS = ["--tombstone-lifetime=1h"]
#: the seconds one comparison may take in all: past it the test reports what it found so far
#: (and where it stopped) instead of running into pytest's timeout with nothing to show
BUDGET = 240

hl.CONFIG_KEYS[:] = sorted(config_key_map())


#: the TCP clients each nsqd has for the whole run, so /stats shows consumers and producers
#: (names the random requests never use; a thread answers their heartbeats)
TCP_TOPIC, TCP_CHANNEL = "tcp_t", "tcp_c"
IDENTITY = {"client_id": "lockstep", "hostname": "lockstep", "user_agent": "lockstep/1.0"}


def _keep_alive(wire: Wire) -> None:
    """Read (and so answer heartbeats) until the connection closes."""
    wire.sock.settimeout(None)
    try:
        while True:
            wire.read_frame()
    except OSError:
        pass


class Side:
    """One cluster: nsqlookupd and an nsqd registered with it, from one binary directory, and
    a consumer (RDY 0) and a producer connected to the nsqd over TCP."""

    def __init__(self, name: str, bin_dir: Path, tmp: Path) -> None:
        self.name = name
        self.ports = {k: free_port() for k in ("lookupd_tcp", "lookupd_http", "nsqd_tcp", "nsqd_http")}
        self.procs: list[ServerProcess] = []
        data = tmp / name
        data.mkdir()
        p = self.ports
        try:
            self.procs.append(ServerProcess(
                [str(bin_dir / "nsqlookupd"), f"--tcp-address=127.0.0.1:{p['lookupd_tcp']}",
                 f"--http-address=127.0.0.1:{p['lookupd_http']}", *LOOKUPD_FLAGS],
                f"http://127.0.0.1:{p['lookupd_http']}/ping", data / "nsqlookupd.log"))
            self.procs.append(ServerProcess(
                [str(bin_dir / "nsqd"), f"--tcp-address=127.0.0.1:{p['nsqd_tcp']}",
                 f"--http-address=127.0.0.1:{p['nsqd_http']}", f"--data-path={data}",
                 f"--lookupd-tcp-address=127.0.0.1:{p['lookupd_tcp']}", *NSQD_FLAGS],
                f"http://127.0.0.1:{p['nsqd_http']}/ping", data / "nsqd.log"))
            self.wires = [Wire(f"127.0.0.1:{p['nsqd_tcp']}") for _ in range(2)]
            consumer, producer = self.wires
            for wire in self.wires:
                wire.identify(**IDENTITY)
            consumer.sub(TCP_TOPIC, TCP_CHANNEL, rdy=0)
            producer.pub(TCP_TOPIC, b"over tcp")
            for wire in self.wires:
                threading.Thread(target=_keep_alive, args=(wire,), daemon=True).start()
        except BaseException:
            self.stop()
            raise
        self.masks: dict = {port: f"<{role}>" for role, port in self.ports.items()}
        self.masks[str(data)] = "<data-path>"
        self.masks.update(HOST_MASK)

    def port_of(self, daemon: str) -> int:
        return self.ports["nsqd_http" if daemon == "nsqd" else "lookupd_http"]

    def ask(self, request: hl.Request) -> hl.Answer:
        """Send ``request`` with this side's own values in its placeholders."""
        values = {"<node>": f"{socket.gethostname()}:{self.ports['nsqd_http']}",
                  "<lookupd_tcp_port>": str(self.ports["lookupd_tcp"])}
        target, body = request.target, request.body
        for key, value in values.items():
            target = target.replace(key, value)
            body = body.replace(key.encode(), value.encode()) if body is not None else None
        port = self.port_of(request.daemon)
        mine = hl.Request(request.daemon, request.method, target, body, request.headers)
        return hl.parse(hl.send(port, mine.encode(port)))

    def lookupd_troubles(self) -> list[str]:
        """The nsqd's log lines saying its session with its nsqlookupd broke (a dropped session
        wipes its registrations there and the reconnect re-registers everything: lookupd's
        answers then follow the nsqd, not the requests). Port 1 is one the requests set."""
        log = self.procs[1].log() if len(self.procs) > 1 else ""
        return [line for line in log.splitlines()
                if ("ERROR: LOOKUPD(" in line and "127.0.0.1:1)" not in line)
                or "failed to query nsqlookupd" in line]

    def stop(self) -> None:
        for wire in getattr(self, "wires", ()):
            try:
                wire.sock.shutdown(socket.SHUT_RDWR)  # (ends its keep-alive thread)
            except OSError:
                pass
            wire.close()
        for proc in reversed(self.procs):
            proc.stop()


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """(upstream's cluster, ours); upstream's None without its binaries (its answers are
    recorded)."""
    tmp = tmp_path_factory.mktemp("lockstep")
    upstream = None
    if live():
        upstream = Side("upstream", Path(upstream_binary("nsqd")).parent, tmp)
        upstream_binary("nsqlookupd")  # (or skip)
    try:
        ours = Side("ours", VENV_BIN, tmp)
    except BaseException:
        if upstream is not None:
            upstream.stop()
        raise
    yield upstream, ours
    ours.stop()
    if upstream is not None:
        upstream.stop()


def _compare(sides, requests: list[hl.Request]) -> list[str]:
    """Each request to both clusters in turn, the answers compared; without upstream's cluster
    its answers come from the recording, in the same order."""
    upstream, ours = sides
    recorded = None if upstream is not None else RECORDED.answer(None, list)
    theirs: list[tuple[str, tuple]] = []
    diffs = []
    give_up = time.monotonic() + BUDGET
    for i, req in enumerate(requests):
        if time.monotonic() >= give_up:
            diffs.insert(0, f"#{i} and the {len(requests) - i} requests after it not compared: "
                            f"the {BUDGET} s budget is spent")
            break
        if recorded is not None and (i >= len(recorded) or recorded[i][0] != str(req)):
            return diffs + [f"#{i} {req}: not the request recorded (`make record-upstream`)"]
        if req.daemon == "nsqlookupd" and (i == 0 or requests[i - 1].daemon == "nsqd"):
            # nsqd registers with nsqlookupd in the background: let both settle first
            probe = hl.Request("nsqlookupd", "GET", "/debug")
            hl.settle(lambda side: hl.normalise(side.ask(probe), side.masks),
                      [side for side in sides if side is not None])
        deadline = min(time.monotonic() + 30, give_up)
        while True:
            a = upstream.ask(req) if upstream is not None else None
            b = ours.ask(req)
            na = hl.normalise(a, upstream.masks) if a is not None else recorded[i][1]
            nb = hl.normalise(b, ours.masks)
            if na == nb or not _reads_state(req) or time.monotonic() >= deadline:
                break
            # both daemons finish some work in the background (registrations, an ephemeral
            # topic's deletion); a snapshot taken mid-way is asked again until both agree
            time.sleep(0.1)
        theirs.append((str(req), na))
        if na != nb:
            shown = a.raw[:600] if a is not None else "(recorded) " + repr(na)[:600]
            diffs.append(f"#{i} {req}\n  upstream: {shown!r}\n  ours:     {b.raw[:600]!r}"
                         f"\n  {hl.explain(na, nb)}")
    if upstream is not None and len(theirs) == len(requests):
        RECORDED.answer(None, lambda: theirs)
    if diffs:  # first, as the likely cause of what follows
        diffs[:0] = [f"{side.name}'s nsqd: {line}" for side in sides if side is not None
                     for line in side.lookupd_troubles()]
    return diffs


#: read-only views of state other work changes in the background
STATE_VIEWS = ("/stats", "/debug", "/lookup", "/topics", "/channels", "/nodes")


def _reads_state(req: hl.Request) -> bool:
    path = req.target.split("?", 1)[0]
    return req.method == "GET" and path in STATE_VIEWS


def _report(diffs: list[str], what: str) -> None:
    assert not diffs, f"{len(diffs)} answers differ from upstream's ({what}):\n" + "\n".join(diffs[:int(os.environ.get("NSQ_HTTP_SHOW", "12"))])


def every_route() -> list[hl.Request]:
    """Each route with each parameter it reads: a fixed list, in an order that builds state."""
    R = hl.Request
    out = []
    for name in hl.NAMES:
        q = f"?topic={name}"
        out += [R("nsqd", "POST", "/topic/create" + q, b""), R("nsqd", "POST", "/pub" + q, b"m"),
                R("nsqd", "POST", f"/channel/create{q}&channel={name}", b"")]
    for path in ["/pub?topic=t1", "/pub?topic=t1&defer=3600000", "/pub?topic=t1&defer=-1",
                 "/pub?topic=t1&defer=18446744073709551615", "/pub?topic=t1&defer=3600001",
                 "/pub?topic=t1&defer=x", "/pub", "/pub?", "/pub?topic=", "/pub?topic=x#ephemeral",
                 "/pub?topic=a#b&defer=5", "/pub?topic=t1&topic=t2"]:
        out += [R("nsqd", "POST", path, b"hello"), R("nsqd", "POST", path, b""),
                R("nsqd", "POST", path, b"x" * 2049)]
    for binary in ["", "&binary=true", "&binary=false", "&binary=yes"]:
        for body in [b"a\nb\n", b"", b"\n", b"x" * 2049, hl._binary_mpub([b"a", b"b"]),
                     hl._binary_mpub([]), hl._binary_mpub([b"x" * 2049])]:
            out.append(R("nsqd", "POST", "/mpub?topic=t1" + binary, body))
    for path in hl.NSQD_POST_ROUTES:
        for q in ["", "?", "?topic=t1", "?topic=nope", "?topic=bad!", "?topic=t1&channel=c1",
                  "?topic=t1&channel=nope", "?topic=t1&channel=bad!", "?channel=c1"]:
            out.append(R("nsqd", "POST", path + q, b""))
        out += [R("nsqd", "GET", path + "?topic=t1"), R("nsqd", "OPTIONS", path)]
    for q in ["", "?format=json", "?format=text", "?topic=t1", "?topic=t1&channel=c1",
              "?format=json&topic=t1&include_clients=false", "?include_mem=false&format=json",
              "?format=json&topic=nope", "?format=json&channel=c1", "?include_mem=false",
              "?include_clients=false", "?include_clients=0&format=json",
              "?include_clients=1&include_mem=1&format=json", "?include_clients=x&format=json",
              f"?format=json&topic={TCP_TOPIC}", f"?topic={TCP_TOPIC}&channel={TCP_CHANNEL}",
              f"?format=json&topic={TCP_TOPIC}&channel=nope", "?format=json&format=text",
              "?format=%zz", "?topic=t1;x"]:
        out.append(R("nsqd", "GET", "/stats" + q))
    for opt in hl.CONFIG_KEYS + ["nope", ""]:
        out.append(R("nsqd", "GET", f"/config/{opt}"))
    for body in [b'["127.0.0.1:1"]', b"null", b"[]", b"{}", b"x", b""]:
        out += [R("nsqd", "PUT", "/config/nsqlookupd_tcp_addresses", body),
                R("nsqd", "GET", "/config/nsqlookupd_tcp_addresses")]
    out.append(R("nsqd", "PUT", "/config/nsqlookupd_tcp_addresses",
                 b'["127.0.0.1:<lookupd_tcp_port>"]'))
    for body in [b"debug", b"INFO", b"nope", b""]:
        out += [R("nsqd", "PUT", "/config/log_level", body), R("nsqd", "GET", "/config/log_level")]
    out += transport_variants()
    out += [R("nsqd", "PUT", "/config/msg_timeout", b"1"), R("nsqd", "PUT", "/debug/setblockrate?rate=1"),
            R("nsqd", "PUT", "/debug/setblockrate?rate=x"), R("nsqd", "POST", "/debug/freememory"),
            R("nsqd", "GET", "/ping"), R("nsqd", "GET", "/info"), R("nsqd", "OPTIONS", "/ping"),
            R("nsqd", "GET", "/Ping"), R("nsqd", "GET", "/ping/"), R("nsqd", "GET", "/ping?"),
            R("nsqd", "POST", "/Pub?topic=t1", b"m"), R("nsqd", "GET", "//ping"),
            R("nsqd", "GET", "/nope"), R("nsqd", "HEAD", "/ping"), R("nsqd", "DELETE", "/pub")]
    for path in ["/config//", "/config/", "/config///", "/CONFIG//", "/config/log_level/",
                 "/config//log_level", "/Config/Log_Level/", "/config/x/y", "/ping//", "/ping/x"]:
        out += [R("nsqd", "GET", path), R("nsqd", "PUT", path, b"x"), R("nsqd", "OPTIONS", path)]
    for path in hl.LOOKUPD_GET_ROUTES:
        for q in ["", "?", "?topic=t1", "?topic=nope", "?topic=bad!", "?topic=x#ephemeral"]:
            out.append(R("nsqlookupd", "GET", path + q))
    for path in hl.LOOKUPD_POST_ROUTES:
        for q in ["", "?topic=t9", "?topic=t9&channel=c9", "?topic=bad!", "?topic=t9&channel=bad!",
                  "?topic=t1&node=<node>", "?topic=t1&node=nope", "?topic=t9#x&channel=c"]:
            out.append(R("nsqlookupd", "POST", path + q, b""))
        out += [R("nsqlookupd", "GET", path), R("nsqlookupd", "OPTIONS", path)]
    out += [R("nsqlookupd", "GET", "/Lookup?topic=t1"), R("nsqlookupd", "GET", "/nodes/"),
            R("nsqlookupd", "OPTIONS", "/ping"), R("nsqlookupd", "GET", "/nope")]
    return out


def transport_variants() -> list[hl.Request]:
    """The publishing routes with the ways a body can come: chunked (no length to refuse
    early), after ``Expect: 100-continue``, a malformed chunk."""
    R = hl.Request
    chunked = [("Transfer-Encoding", "chunked")]
    expect = [("Expect", "100-continue")]
    out = []
    for body in [b"hello", b"x" * 2048, b"x" * 2049, b""]:
        out += [R("nsqd", "POST", "/pub?topic=t1", hl.chunked(body), chunked),
                R("nsqd", "POST", "/pub?topic=t1", body, expect)]
    for body in [b"a\nb\n", b"x" * 2049 + b"\n", b"ab\n" * 3000, b"y" * 8193]:
        out += [R("nsqd", "POST", "/mpub?topic=t1", hl.chunked(body, 1000), chunked),
                R("nsqd", "POST", "/mpub?topic=t1", body, expect)]
    for body in [hl._binary_mpub([b"a", b"b"]), hl._binary_mpub([b"x" * 2049]),
                 hl._binary_mpub([b"m"] * 2000)]:
        out += [R("nsqd", "POST", "/mpub?topic=t1&binary=true", hl.chunked(body, 100), chunked),
                R("nsqd", "POST", "/mpub?topic=t1&binary=true", body, expect)]
    out += [R("nsqd", "POST", "/pub?topic=t1", b"zz\r\nhello\r\n0\r\n\r\n", chunked),
            R("nsqd", "POST", "/topic/delete?topic=nope", hl.chunked(b"ignored"), chunked),
            R("nsqd", "PUT", "/config/log_level", hl.chunked(b"info"), chunked),
            R("nsqd", "PUT", "/config/log_level", b"info", expect)]
    return out


def test_every_route_answers_as_upstream(sides):
    _report(_compare(sides, every_route()), "every route")


@pytest.mark.parametrize("seed", SEEDS)
def test_random_requests_answer_as_upstream(sides, seed):
    rng = random.Random(seed)
    print(f"seed {seed}, {REQUESTS} requests")
    requests = []
    while len(requests) < REQUESTS:
        make = hl.nsqd_request if rng.random() < 0.6 else hl.lookupd_request
        batch = [make(rng) for _ in range(rng.randint(1, 8))]
        requests += batch
    _report(_compare(sides, requests), f"seed {seed}")


# --- TLS: the plain listener under --tls-required=true, the HTTPS one with client certificates --

def _tls_nsqd(bin_dir: Path, data: Path, certs, *extra: str) -> tuple[subprocess.Popen, dict]:
    ports = {"tcp": free_port(), "http": free_port(), "https": free_port()}
    data.mkdir(parents=True)
    log = open(data / "nsqd.log", "wb")
    proc = subprocess.Popen(
        [str(bin_dir / "nsqd"), f"--tcp-address=127.0.0.1:{ports['tcp']}",
         f"--http-address=127.0.0.1:{ports['http']}", f"--https-address=127.0.0.1:{ports['https']}",
         f"--data-path={data}", f"--tls-cert={certs.server_cert}", f"--tls-key={certs.server_key}",
         f"--tls-root-ca-file={certs.ca}", *extra], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 15
    for port in ports.values():
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise AssertionError((data / "nsqd.log").read_text())
                time.sleep(0.05)
    return proc, ports


def _ask(port: int, request: hl.Request, ctx: ssl.SSLContext | None) -> bytes:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1") if ctx else raw
        try:
            sock.sendall(request.encode(port))
        except OSError:  # a refused large body: the answer may have come, and the close
            pass
        chunks = []
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except (ConnectionResetError, ssl.SSLError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        raw.close()


@pytest.mark.parametrize("policy", ["", "require-verify"])
def test_tls_required_and_https_answer_as_upstream(tmp_path, policy):
    from security.support import OPENSSL, make_certs

    if OPENSSL is None:
        pytest.skip("needs the openssl command to make test certificates")
    certs = make_certs(tmp_path / "certs")
    extra = ["--tls-required=true"] + ([f"--tls-client-auth-policy={policy}"] if policy else [])
    R = hl.Request
    plain = [R("nsqd", "GET", "/ping"), R("nsqd", "POST", "/pub?topic=t", b"m"),
             R("nsqd", "GET", "/nope"), R("nsqd", "POST", "/pub?topic=t", b"x" * 400000)]
    secure = [R("nsqd", "GET", "/ping"), R("nsqd", "POST", "/pub?topic=t", b"m"),
              R("nsqd", "GET", "/config/tls_required"), R("nsqd", "GET", "/config/tls_client_auth_policy"),
              R("nsqd", "GET", "/stats?format=json&include_mem=false"), R("nsqd", "GET", "/Ping")]

    def answers_of(name: str, bin_dir: Path) -> list:
        proc, ports = _tls_nsqd(bin_dir, tmp_path / name, certs, *extra)
        try:
            masks = {port: f"<{role}>" for role, port in ports.items()}
            masks[str(tmp_path / name)] = "<data-path>"
            masks.update(HOST_MASK)
            got = [hl.normalise(hl.parse(_ask(ports["http"], r, None)), masks) for r in plain]
            with_cert = certs.client_context("client")
            got += [hl.normalise(hl.parse(_ask(ports["https"], r, with_cert)), masks)
                    for r in secure]
            try:  # without a client certificate: refused when the policy asks for one
                got.append(hl.normalise(hl.parse(_ask(ports["https"], secure[0],
                                                      certs.client_context())), masks))
            except (ssl.SSLError, OSError) as err:
                got.append(("refused", type(err).__name__))
            return got
        finally:
            proc.terminate()
            proc.wait(10)

    answers = {"upstream": RECORDED.answer(None, lambda: answers_of(
        "upstream", Path(upstream_binary("nsqd")).parent)), "ours": answers_of("ours", VENV_BIN)}
    requests = [f"http {r}" for r in plain] + [f"https {r}" for r in secure] + ["https no cert"]
    diffs = [f"{req}\n  upstream: {a}\n  ours:     {b}"
             for req, a, b in zip(requests, answers["upstream"], answers["ours"]) if a != b]
    assert not diffs, "\n".join(diffs)
