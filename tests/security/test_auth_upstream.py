"""AUTH side by side with upstream nsqd v1.3.0 (issue #35): the same conversations, the same auth
server, the same flags; every frame compared byte for byte, and the queries each side made to
the auth server compared too (how many, with which values).

Covered: every V2 command before and after AUTH (and subscribed, publish-only, denied), with bad
parameters and bad bodies, so the order of upstream's checks (TLS policy, state, arguments, body
size, body, authorization) is pinned command by command; every AUTH path (grant, refusal, bad
answers of every kind, upper-case keys, Go's regexp edges, expiry and the re-query after
``ttl``); the auth server down and slower than the 5 s request timeout; TLS required and mutual
TLS; and /stats' auth fields. With upstream's binaries (``NSQ_UPSTREAM_BIN``) both sides run;
without them ours is compared with upstream's recorded answers
(``tests/recordings/transcripts/test_auth_upstream.json``, ``helpers.recording``).

Every conversation runs against both nsqd at once, and all of them concurrently (threads), so
the waits for "nothing more comes" overlap: about 20 s for several hundred conversations.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import pytest

from helpers.recording import live, recording
from helpers.servers import free_port
from helpers.upstream import upstream_binary
from security.support import AuthServer, SecureNsqd, grant

pytestmark = pytest.mark.timeout(240)

I32 = struct.Struct(">i").pack
MID = b"0123456789abcdef"
SIDES = ("up", "us")  # same length: the AUTH body sizes stay equal
RECORDED = recording("transcripts", "test_auth_upstream")

ALL = {"topic": ".*", "channels": [".*"], "permissions": ["publish", "subscribe"]}
PUB_ONLY = {"topic": ".*", "channels": [".*"], "permissions": ["publish"]}
ONLY_OK = {"topic": "^ok", "channels": [".*"], "permissions": ["publish", "subscribe"]}


def only(topic_re: str, channels: list[str] | None = None, perms=("publish", "subscribe")) -> dict:
    return {"topic": topic_re, "channels": channels if channels is not None else [".*"],
            "permissions": list(perms)}


class Answers:
    """The auth server's answers by secret: ``base.case.side`` is answered as ``base``, so each
    conversation's queries can be told apart while both sides get the same answers. A list is
    answered in turn (the first query, the re-query, ...), its last item from then on."""

    def __init__(self) -> None:
        self.table: dict[str, Any] = {}
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, secret: str, default: Any = None) -> Any:
        answer = self.table.get(secret.split(".")[0], default)
        if isinstance(answer, list):
            with self._lock:
                n = self._calls.get(secret, 0)
                self._calls[secret] = n + 1
            return answer[min(n, len(answer) - 1)]
        return answer


def granted_to_client_one(values: dict) -> tuple[int, Any]:
    """Mutual TLS: only the certificate's common name gets the grant."""
    if values.get("common_name") == "client-one" and values.get("tls") == "true":
        return grant(identity="client-one", auths=[ALL])
    return grant(auths=[])


ANSWERS: dict[str, Any] = {
    "all": grant(identity="alice", identity_url="https://id.example/alice", auths=[ALL]),
    "pubonly": grant(auths=[PUB_ONLY]),
    "okonly": grant(auths=[ONLY_OK]),
    "none": grant(auths=[]),
    "forbidden": None,  # unknown to the server: 403
    "status500": (500, {"message": "INTERNAL_ERROR"}),
    "ttl0": grant(ttl=0, auths=[ALL]),
    "ttlneg": grant(ttl=-1, auths=[ALL]),
    "ttlstr": (200, {"ttl": "10", "authorizations": [ALL]}),
    "ttlfloat": (200, {"ttl": 1.5, "authorizations": [ALL]}),
    "ttlnull": (200, {"ttl": None, "authorizations": [ALL]}),
    "nottl": (200, {"authorizations": [ALL]}),
    "unknownperm": grant(auths=[only(".*", perms=("publish", "admin"))]),
    "badtopicre": grant(auths=[only("(")]),
    "badchanre": grant(auths=[only(".*", ["["])]),
    "upper": (200, {"TTL": 60, "Identity": "bob", "IDENTITY_URL": "u",
                    "Authorizations": [{"Topic": ".*", "CHANNELS": [".*"], "Permissions": ["publish"]}]}),
    "identnum": (200, {"ttl": 60, "identity": 5, "authorizations": [ALL]}),
    "authsobj": (200, {"ttl": 60, "authorizations": {"topic": ".*"}}),
    "permstr": (200, {"ttl": 60, "authorizations": [{"topic": ".*", "channels": [".*"],
                                                     "permissions": "publish"}]}),
    "authnull": (200, {"ttl": 60, "authorizations": [None, ALL]}),
    "notjson": (200, "this is not json"),
    "array": (200, "[1, 2]"),
    "escapes": grant(identity="<a&b> \u00e9\u2028", identity_url="x?a=1&b=<2>", auths=[ALL]),
    "extra": (200, {"ttl": 60, "authorizations": [ALL], "unknown_field": [1, {"x": None}]}),
    # Go's regexp (the two cases of the issue first), matched against the topic "t"
    "lookahead": grant(auths=[only("^(?=t)t$")]),
    "posix": grant(auths=[only("^[[:alpha:]]$")]),
    "anybyte": grant(auths=[only("t\\C")]),
    "angle": grant(auths=[only("(?<n>t)")]),
    "ungreedy": grant(auths=[only("(?U)^t+$")]),
    "unicodeclass": grant(auths=[only("^\\pL$")]),
    "newscript": grant(auths=[only("\\p{Toto}|t")]),
    "unanchored": grant(auths=[only("oo")]),
    "anchored": grant(auths=[only("^t$")]),
    "pyonly": grant(auths=[only("(?P=x)")]),
    "backref": grant(auths=[only("(t)\\1")]),
    "endz": grant(auths=[only("t\\z")]),
    "pyZ": grant(auths=[only("t\\Z")]),
    "chanre": grant(auths=[only(".*", ["^[[:digit:]]+$"], perms=("subscribe",))]),
    "pubnochan": grant(auths=[only(".*", [], perms=("publish",))]),
    # expiry: the first answer, then the re-query's
    "exp_grant": [grant(ttl=1, auths=[ALL]), grant(ttl=60, identity="again", auths=[ALL])],
    "exp_deny": [grant(ttl=1, auths=[ALL]), grant(ttl=60, auths=[ONLY_OK])],
    "exp_403": [grant(ttl=1, auths=[ALL]), None],
    "exp_empty": [grant(ttl=1, auths=[ALL]), grant(ttl=60, auths=[])],
    "exp_badre": [grant(ttl=1, auths=[ALL]), grant(ttl=60, auths=[only("(")])],
    "mtls": granted_to_client_one,
}


# --- the nsqd pairs ---------------------------------------------------------------------------

class World:
    def __init__(self, tmp, certs) -> None:
        self.sides = SIDES if live() else ("us",)  # without upstream: its recorded answers
        up_bin = upstream_binary("nsqd") if live() else None
        self.certs = certs
        self.auth = AuthServer()
        self.auth.answers = Answers()
        self.auth.answers.table.update(ANSWERS)
        self.slow = AuthServer()
        self.slow.answers = self.auth.answers
        self.slow.delay = 5.5  # past the default --http-client-request-timeout (5 s)
        dead = f"127.0.0.1:{free_port()}"  # nothing listens there
        tls = [f"--tls-root-ca-file={certs.ca}"]
        flags = {
            "plain": ([f"--auth-http-address={self.auth.address}"], None),
            "noauth": ([], None),
            "down": ([f"--auth-http-address={dead}"], None),
            "slow": ([f"--auth-http-address={self.slow.address}"], None),
            "tls": ([f"--auth-http-address={self.auth.address}", "--tls-required=true", *tls],
                    certs),
            "mtls": ([f"--auth-http-address={self.auth.address}",
                      "--tls-client-auth-policy=require-verify", *tls], certs),
        }
        self.nodes: dict[tuple[str, str], SecureNsqd] = {}
        try:
            for name, (extra, node_certs) in flags.items():
                for side in self.sides:
                    self.nodes[name, side] = SecureNsqd(
                        tmp / f"{name}-{side}", *extra, certs=node_certs,
                        binary=up_bin if side == "up" else None)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for node in self.nodes.values():
            node.stop()
        self.auth.close()
        self.slow.close()

    def queries(self, tag: str) -> list[tuple]:
        """What the auth servers were asked for secrets ending in ``tag`` (secret cut)."""
        out = []
        for server in (self.auth, self.slow):
            for r in list(server.requests):
                secret = r["values"].get("secret", "")
                if secret.endswith(tag):
                    values = {k: v for k, v in r["values"].items() if k != "secret"}
                    out.append((secret.split(".")[0], r["method"], r["path"],
                                r["headers"].get("Accept"), sorted(values.items())))
        return out


@pytest.fixture(scope="module")
def world(tmp_path_factory, certs):
    w = World(tmp_path_factory.mktemp("auth-side-by-side"), certs)
    yield w
    w.close()


# --- conversations ----------------------------------------------------------------------------

def _read(sock: socket.socket, first_wait: float, idle: float = 0.08) -> tuple[bytes, bool]:
    """What arrives within ``first_wait``, then until ``idle`` passes quietly; (bytes, closed)."""
    got = bytearray()
    deadline = time.monotonic() + first_wait
    while True:
        wait = deadline - time.monotonic()
        if wait <= 0:
            return bytes(got), False
        sock.settimeout(wait)
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            return bytes(got), False
        except (ConnectionError, ssl.SSLError, OSError):
            return bytes(got), True
        if not chunk:
            return bytes(got), True
        got += chunk
        deadline = time.monotonic() + idle


Step = Any  # bytes to send | ("auth", base secret) | ("tls", client cert or None) | ("sleep", s)


def converse(world: World, pair: str, side: str, tag: str, steps: list[Step]) -> bytes:
    """Everything nsqd sent in this conversation, then ``<closed>`` or ``<open>``."""
    node = world.nodes[pair, side]
    sock: Any = socket.create_connection(("127.0.0.1", node.tcp_port), timeout=5)
    out = bytearray()
    closed = False
    try:
        sock.sendall(b"  V2")
        for step in steps:
            first_wait = 0.6
            if isinstance(step, tuple) and step[0] == "sleep":
                time.sleep(step[1])
                continue
            if isinstance(step, tuple) and step[0] == "tls":
                ctx = world.certs.client_context(step[1])
                try:
                    sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
                except (ssl.SSLError, OSError) as err:
                    out += b"<handshake failed %s>" % type(err).__name__.encode()
                    closed = True
                    break
                data = b""
            elif isinstance(step, tuple) and step[0] == "auth":
                secret = f"{step[1]}.{tag}".encode()
                data = b"AUTH\n" + I32(len(secret)) + secret
                first_wait = 8.0  # the slow auth server answers after 5.5 s
            else:
                data = step
            try:
                if data:
                    sock.sendall(data)
            except OSError:
                closed = True
                break
            got, closed = _read(sock, first_wait)
            out += got
            if closed:
                break
        if not closed:
            got, closed = _read(sock, 0.3)
            out += got
    finally:
        sock.close()
    return bytes(out) + (b"<closed>" if closed else b"<open>")


def identify(**fields: Any) -> bytes:
    body = json.dumps(fields).encode()
    return b"IDENTIFY\n" + I32(len(body)) + body


def pub(topic: bytes, body: bytes = b"x", cmd: bytes = b"PUB") -> bytes:
    return cmd + b" " + topic + b"\n" + I32(len(body)) + body


def mpub(topic: bytes, bodies: list[bytes]) -> bytes:
    payload = I32(len(bodies)) + b"".join(I32(len(b)) + b for b in bodies)
    return b"MPUB " + topic + b"\n" + I32(len(payload)) + payload


# each variant: topic -> the steps after the prefix (topics are unique per case, so no case
# receives another's messages)
VARIANTS: dict[str, Callable[[bytes], list[Step]]] = {
    "IDENTIFY": lambda t: [identify(client_id="c")],
    "IDENTIFY size -1": lambda t: [b"IDENTIFY\n" + I32(-1)],
    "IDENTIFY size 0": lambda t: [b"IDENTIFY\n" + I32(0)],
    "IDENTIFY too big": lambda t: [b"IDENTIFY\n" + I32(0x7FFFFFFF)],
    "IDENTIFY bad json": lambda t: [b"IDENTIFY\n" + I32(3) + b"{x}"],
    "AUTH params": lambda t: [b"AUTH x\n" + I32(1) + b"s"],
    "AUTH size -1": lambda t: [b"AUTH\n" + I32(-1)],
    "AUTH size 0": lambda t: [b"AUTH\n" + I32(0)],
    "AUTH too big": lambda t: [b"AUTH\n" + I32(0x7FFFFFFF)],
    "AUTH grant": lambda t: [("auth", "all")],
    "AUTH no authorizations": lambda t: [("auth", "none")],
    "SUB no params": lambda t: [b"SUB\n"],
    "SUB one param": lambda t: [b"SUB " + t + b"\n"],
    "SUB bad topic": lambda t: [b"SUB b@d c\n"],
    "SUB bad channel": lambda t: [b"SUB " + t + b" b@d\n"],
    "SUB": lambda t: [b"SUB " + t + b" c\n"],
    "SUB no heartbeats": lambda t: [identify(heartbeat_interval=-1), b"SUB " + t + b" c\n"],
    "RDY": lambda t: [b"RDY 1\n"],
    "RDY bad": lambda t: [b"RDY x\n"],
    "RDY negative": lambda t: [b"RDY -1\n"],
    "RDY too many": lambda t: [b"RDY 2501\n"],
    "FIN no params": lambda t: [b"FIN\n"],
    "FIN bad id": lambda t: [b"FIN short\n"],
    "FIN unknown id": lambda t: [b"FIN " + MID + b"\n"],
    "REQ no params": lambda t: [b"REQ " + MID + b"\n"],
    "REQ bad id": lambda t: [b"REQ short 0\n"],
    "REQ bad timeout": lambda t: [b"REQ " + MID + b" x\n"],
    "REQ unknown id": lambda t: [b"REQ " + MID + b" 0\n"],
    "TOUCH no params": lambda t: [b"TOUCH\n"],
    "TOUCH bad id": lambda t: [b"TOUCH short\n"],
    "TOUCH unknown id": lambda t: [b"TOUCH " + MID + b"\n"],
    "CLS": lambda t: [b"CLS\n"],
    "CLS twice": lambda t: [b"CLS\n", b"CLS\n"],
    "NOP": lambda t: [b"NOP\n", b"NOP\n"],
    "PUB no params": lambda t: [b"PUB\n"],
    "PUB bad topic": lambda t: [b"PUB b@d\n" + I32(1) + b"x"],
    "PUB size -1": lambda t: [b"PUB " + t + b"\n" + I32(-1)],
    "PUB size 0": lambda t: [b"PUB " + t + b"\n" + I32(0)],
    "PUB too big": lambda t: [b"PUB " + t + b"\n" + I32(0x7FFFFFFF)],
    "PUB": lambda t: [pub(t)],
    "PUB denied topic": lambda t: [pub(b"no" + t)],
    "MPUB no params": lambda t: [b"MPUB\n"],
    "MPUB bad topic": lambda t: [b"MPUB b@d\n" + I32(-1)],
    "MPUB size -1": lambda t: [b"MPUB " + t + b"\n" + I32(-1)],
    "MPUB size 0": lambda t: [b"MPUB " + t + b"\n" + I32(0)],
    "MPUB too big": lambda t: [b"MPUB " + t + b"\n" + I32(0x7FFFFFFF)],
    "MPUB bad count": lambda t: [b"MPUB " + t + b"\n" + I32(8) + I32(0) + I32(0)],
    "MPUB bad message size": lambda t: [b"MPUB " + t + b"\n" + I32(12) + I32(1) + I32(-1)],
    "MPUB": lambda t: [mpub(t, [b"a", b"bc"])],
    "MPUB denied topic": lambda t: [mpub(b"no" + t, [b"a"])],
    "MPUB denied topic bad body": lambda t: [b"MPUB no" + t + b"\n" + I32(-1)],
    "DPUB no params": lambda t: [b"DPUB " + t + b"\n"],
    "DPUB bad topic": lambda t: [b"DPUB b@d 0\n"],
    "DPUB bad timeout": lambda t: [b"DPUB " + t + b" x\n"],
    "DPUB negative timeout": lambda t: [b"DPUB " + t + b" -1\n"],
    "DPUB timeout too long": lambda t: [b"DPUB " + t + b" 3600001\n"],
    "DPUB size -1": lambda t: [b"DPUB " + t + b" 10\n" + I32(-1)],
    "DPUB": lambda t: [b"DPUB " + t + b" 10\n" + I32(1) + b"x"],
    "DPUB denied topic": lambda t: [b"DPUB no" + t + b" 10\n" + I32(1) + b"x"],
    "unknown command": lambda t: [b"FOO\n"],
    "empty line": lambda t: [b"\n"],
}

PREFIXES: dict[str, Callable[[bytes], list[Step]]] = {
    "before AUTH": lambda t: [],
    "after AUTH": lambda t: [("auth", "all")],
    "publish only": lambda t: [("auth", "pubonly")],
    "other topics only": lambda t: [("auth", "okonly")],
    "subscribed": lambda t: [("auth", "all"), b"SUB " + t + b" c\n"],
    "closing": lambda t: [("auth", "all"), b"SUB " + t + b" c\n", b"CLS\n"],
}

CASES: dict[str, tuple[str, Callable[[bytes], list[Step]]]] = {}
for _p, _prefix in PREFIXES.items():
    for _v, _variant in VARIANTS.items():
        CASES[f"{_v} / {_p}"] = ("plain", lambda t, a=_prefix, b=_variant: a(t) + b(t))


def _auth_case(secret: str, *after: Step, pair: str = "plain", topic: bytes | None = None):
    def steps(t: bytes) -> list[Step]:
        name = topic or t
        return [("auth", secret), *[s(name) if callable(s) else s for s in after]]
    return pair, steps


def _pub(t: bytes) -> bytes:
    return pub(t)


def _sub(t: bytes) -> bytes:
    return b"SUB " + t + b" 7\n"


EXPIRE = ("sleep", 1.3)  # past the first answer's ttl of 1 s
CASES.update({
    # every answer of the auth server
    **{f"AUTH {s}": _auth_case(s, _pub) for s in (
        "all", "none", "forbidden", "status500", "ttl0", "ttlneg", "ttlstr", "ttlfloat", "ttlnull",
        "nottl", "unknownperm", "badtopicre", "badchanre", "upper", "identnum", "authsobj",
        "permstr", "authnull", "notjson", "array", "escapes", "extra", "pubnochan")},
    "AUTH chanre SUB digits": _auth_case("chanre", _sub),
    "AUTH chanre SUB letters": _auth_case("chanre", lambda t: b"SUB " + t + b" c\n"),
    "AUTH twice": _auth_case("all", ("auth", "all")),
    "AUTH disabled": ("noauth", lambda t: [("auth", "all")]),
    "AUTH disabled, bad size": ("noauth", lambda t: [b"AUTH\n" + I32(-1)]),
    # Go's regexp: PUB on the topic "t"
    **{f"regexp {s}": _auth_case(s, _pub, topic=b"t") for s in (
        "lookahead", "posix", "anybyte", "angle", "ungreedy", "unicodeclass", "newscript",
        "anchored", "pyonly", "backref", "endz", "pyZ")},
    "regexp posix denies": _auth_case("posix", _pub, topic=b"tt"),
    "regexp unanchored": _auth_case("unanchored", _pub, topic=b"foo_bar"),
    "regexp unanchored denies": _auth_case("unanchored", _pub, topic=b"fo_o"),
    # expiry: the re-query after ttl, before the command that needs it
    "expire, re-granted": _auth_case("exp_grant", EXPIRE, _pub, _pub),
    "expire, re-granted SUB": _auth_case("exp_grant", EXPIRE, _sub),
    "expire, now denied": _auth_case("exp_deny", EXPIRE, _pub),
    "expire, now refused": _auth_case("exp_403", EXPIRE, _pub),
    "expire, now empty": _auth_case("exp_empty", EXPIRE, _pub),
    "expire, now empty, then PUB": _auth_case("exp_empty", EXPIRE, lambda t: b"NOP\n", _pub),
    "expire, bad regex": _auth_case("exp_badre", EXPIRE, _pub),
    "expire, MPUB bad body": _auth_case("exp_deny", EXPIRE, lambda t: b"MPUB " + t + b"\n" + I32(-1)),
    "expire, MPUB re-granted bad body": _auth_case(
        "exp_grant", EXPIRE, lambda t: b"MPUB " + t + b"\n" + I32(-1)),
    "expire, PUB bad body": _auth_case("exp_403", EXPIRE, lambda t: b"PUB " + t + b"\n" + I32(0)),
    "expire, NOP and RDY need no re-query": _auth_case("exp_403", EXPIRE, lambda t: b"NOP\n"),
    "not expired": _auth_case("exp_403", _pub, _pub),
    # the auth server down, or slower than the request timeout
    "server down": _auth_case("all", _pub, pair="down"),
    "server down, PUB first": ("down", lambda t: [pub(t)]),
    "server slow": _auth_case("all", _pub, pair="slow"),
    # TLS required: nothing but IDENTIFY before the upgrade
    "TLS required, AUTH first": ("tls", lambda t: [("auth", "all")]),
    "TLS required, PUB first": ("tls", lambda t: [pub(t)]),
    "TLS required, MPUB first bad body": ("tls", lambda t: [b"MPUB " + t + b"\n" + I32(-1)]),
    "TLS required, IDENTIFY without TLS": ("tls", lambda t: [identify(client_id="x"), pub(t)]),
    "TLS required, upgraded": ("tls", lambda t: [identify(feature_negotiation=True, tls_v1=True),
                                                 ("tls", None), ("auth", "all"), pub(t)]),
    "TLS required, upgraded, no auth": ("tls", lambda t: [
        identify(feature_negotiation=True, tls_v1=True), ("tls", None), pub(t)]),
    # mutual TLS: the certificate's common name reaches the auth server
    "mutual TLS": ("mtls", lambda t: [identify(feature_negotiation=True, tls_v1=True),
                                      ("tls", "client"), ("auth", "mtls"), pub(t), _sub(t)]),
    "mutual TLS, AUTH first": ("mtls", lambda t: [("auth", "mtls")]),
})


@pytest.fixture(scope="module")
def conversations(world):
    """Every case against both sides at once: {(case, side): (frames, auth queries)}."""
    jobs = {}
    # 12 conversations at once per side, live or not: the waits for "nothing more comes" are
    # sized for that many
    with ThreadPoolExecutor(max_workers=12 * len(world.sides)) as pool:
        for n, (name, (pair, build)) in enumerate(CASES.items()):
            topic = b"c%d" % n
            steps = build(topic)
            for side in world.sides:
                tag = f"{n}.{side}"
                jobs[name, side] = pool.submit(converse, world, pair, side, tag, steps)
        done = {key: job.result() for key, job in jobs.items()}
    time.sleep(0.2)  # the last queries are recorded
    return {(name, side): (done[name, side], world.queries(f".{n}.{side}"))
            for n, name in enumerate(CASES) for side in world.sides}


@pytest.fixture
def transcripts(conversations):
    """``transcripts[case]``: (upstream's frames, ours, queries up, queries us); upstream's
    live or recorded."""
    class Both:
        def __getitem__(self, case: str) -> tuple:
            up = RECORDED.answer(case, lambda: conversations[case, "up"])
            us = conversations[case, "us"]
            return up[0], us[0], up[1], us[1]
    return Both()


@pytest.mark.parametrize("case", list(CASES))
def test_same_frames(transcripts, case):
    upstream, ours, up_queries, our_queries = transcripts[case]
    assert ours == upstream
    assert our_queries == up_queries


def _frame(frame_type: int, data: bytes) -> bytes:
    return I32(len(data) + 4) + I32(frame_type) + data


def test_the_issue_cases_answer_as_upstream(transcripts):
    """The conversations issue #35 found different, spelled out."""
    expected = {
        "regexp lookahead": _frame(1, b"E_AUTH_FAILED AUTH failed") + b"<closed>",
        "regexp posix": _frame(0, b'{"identity":"user","identity_url":"","permission_count":1}')
        + _frame(0, b"OK") + b"<open>",
        "MPUB size -1 / before AUTH": _frame(1, b"E_AUTH_FIRST AUTH required before MPUB")
        + b"<closed>",
    }
    for case, frames in expected.items():
        assert transcripts[case][0] == frames  # upstream
        assert transcripts[case][1] == frames  # ours


def test_requery_happens_once_per_expiry(transcripts):
    _, _, up_queries, our_queries = transcripts["expire, re-granted"]
    assert [q[0] for q in up_queries] == ["exp_grant", "exp_grant"]
    assert our_queries == up_queries


def test_common_name_and_tls_reach_the_auth_server(transcripts):
    _, _, up_queries, our_queries = transcripts["mutual TLS"]
    assert dict(up_queries[0][4])["common_name"] == "client-one"
    assert dict(up_queries[0][4])["tls"] == "true"
    assert our_queries == up_queries


# --- /stats ----------------------------------------------------------------------------------------

def _client_stats(node: SecureNsqd, client_id: str) -> dict:
    url = f"http://{node.http_address}/stats?format=json&include_clients=true"
    with urllib.request.urlopen(url, timeout=5) as answer:
        doc = json.load(answer)
    found = [c for c in doc.get("producers", []) if c.get("client_id") == client_id]
    for topic in doc["topics"]:
        for channel in topic["channels"]:
            found += [c for c in channel["clients"] if c.get("client_id") == client_id]
    assert len(found) == 1, (client_id, doc)
    return found[0]


def _auth_view(entry: dict) -> tuple:
    """The auth fields, and where they stand among the keys."""
    keys = list(entry)
    auth = [k for k in keys if k.startswith("auth")]
    return ({k: entry[k] for k in auth}, [(k, keys[keys.index(k) - 1]) for k in auth])


STATS_CLIENTS = (  # pair, client_id, secret, subscribes (else publishes)
    ("plain", "authed-pub", "all", False), ("plain", "authed-sub", "all", True),
    ("plain", "escaped", "escapes", False), ("plain", "upper", "upper", False),
    ("noauth", "anon", None, False),  # only an nsqd without AUTH lists a client not authed
)


def test_stats_auth_fields(world):
    views: dict[str, dict] = {}
    for side in world.sides:
        socks = []
        try:
            for pair, cid, secret, subscribe in STATS_CLIENTS:
                node = world.nodes[pair, side]
                sock = socket.create_connection(("127.0.0.1", node.tcp_port), timeout=5)
                socks.append(sock)
                steps = [b"  V2" + identify(client_id=cid)]  # the magic alone gets no answer
                if secret is not None:
                    s = f"{secret}.stats.{side}".encode()
                    steps.append(b"AUTH\n" + I32(len(s)) + s)
                steps.append(b"SUB stats_t c\n" if subscribe else pub(b"stats_t"))
                for data in steps:
                    sock.sendall(data)
                    _read(sock, 3.0)
            views[side] = {cid: _auth_view(_client_stats(world.nodes[pair, side], cid))
                           for pair, cid, _, _ in STATS_CLIENTS}
        finally:
            for sock in socks:
                sock.close()
    views["up"] = RECORDED.answer("/stats auth fields", lambda: views["up"])
    assert views["us"] == views["up"]
    assert views["up"]["authed-pub"][0] == {"authed": True, "auth_identity": "alice",
                                            "auth_identity_url": "https://id.example/alice"}
    assert views["up"]["anon"][0] == {}  # authed is omitempty upstream
