"""AUTH over HTTP (docs/security.md, "AUTH over HTTP"), against a real auth server: every route
of the table, anonymous, with a secret the auth server refuses, a publish-only secret, a
secret granted another topic only, and one that holds no authorization: the refusal's exact
answer, no message body, and nothing changed on the node; then the granted secret works.
Upstream's routes stay open without ``--http-auth-required`` and ask with it."""

from __future__ import annotations

import http.client
import json
import ssl
import threading

import orjson
import pytest

from helpers.polling import wait_for
from helpers.recording import recording
from helpers.upstream import upstream_binary
from helpers.wire import Wire
from nsqpy.protocol.frames import FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from security.support import AuthServer, SecureNsqd, grant

pytestmark = pytest.mark.timeout(120)

T, C = "t", "c"  # the topic (with history) and the channel the routes are asked about
BOTH = ["publish", "subscribe"]
SECRETS = {
    "publish-only": [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}],
    "other-topic": [{"topic": "^other$", "channels": [".*"], "permissions": BOTH}],
    "no-grants": [],
    "sub-t": [{"topic": "^t$", "channels": [".*"], "permissions": ["subscribe"]}],
    "sub-t-c": [{"topic": "^t$", "channels": ["^c$"], "permissions": ["subscribe"]}],
    "pub-t": [{"topic": "^t$", "channels": [".*"], "permissions": ["publish"]}],
    "admin-t": [{"topic": "^t$", "channels": [".*"], "permissions": BOTH}],
    "node": [{"topic": ".*", "channels": [".*"], "permissions": BOTH}],
}
REFUSED = "refused"  # the auth server answers 403 for it
RECORDED = recording("http", "test_http_auth")  # upstream's answers to its own routes

AUTH_REQUIRED = (401, {"message": "AUTH_REQUIRED"})
AUTH_FAILED = (403, {"message": "AUTH_FAILED"})
UNAUTHORIZED = (403, {"message": "UNAUTHORIZED"})


def call(node, method: str, target: str, secret: str | None = None, body: bytes = b"",
         scheme: str = "Bearer", context: ssl.SSLContext | None = None):
    """(status, headers, body) of one request on a fresh connection."""
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", node.http_port, timeout=20)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", node.https_port, timeout=20,
                                           context=context)
    headers = {} if secret is None else {"Authorization": f"{scheme} {secret}"}
    try:
        conn.request(method, target, body=body if method in ("POST", "PUT") else None,
                     headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def answer(node, method: str, target: str, secret: str | None = None, body: bytes = b""):
    status, _, data = call(node, method, target, secret, body)
    try:
        return status, orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        return status, data


def authed_wire(node, secret: str, **identify) -> Wire:
    wire = Wire(node.tcp_address)
    wire.identify(feature_negotiation=True, **identify)
    wire.cmd(b"AUTH", body=secret.encode())
    assert wire.read_frame().frame_type == FRAME_TYPE_RESPONSE
    return wire


def publish(node, topic: str, bodies: list[bytes]) -> None:
    wire = authed_wire(node, "node")
    wire.mpub(topic, bodies)
    wire.close()


def leased_read(node, name: str, topic: str, channel: str, n: int) -> None:
    """Publish ``n`` messages, read them under lease ``name`` and close: the lease holds them."""
    wire = authed_wire(node, "node", lease=name)
    wire.sub(topic, channel, rdy=n)
    publish(node, topic, [b"leased-%d" % i for i in range(n)])
    got = 0
    while got < n:
        if wire.read_frame().frame_type == FRAME_TYPE_MESSAGE:
            got += 1
    wire.close()


def snapshot(node) -> dict:
    """What the routes could change, read with the node's own secret."""
    status, doc = answer(node, "GET", "/stats?format=json&include_mem=false&include_clients=false",
                         "node")
    assert status == 200, doc
    topics = {}
    for t in doc["topics"] or ():
        channels = {c["channel_name"]: {k: c.get(k) for k in (
            "depth", "in_flight_count", "deferred_count", "paused", "message_count",
            "requeue_count", "timeout_count", "lease_count", "lease_held_count")}
            for c in t["channels"]}
        topics[t["topic_name"]] = (t["depth"], t["message_count"], t["paused"], channels)
    status, leases = answer(node, "GET", "/leases", "node")
    assert status == 200, leases
    return {
        "topics": topics,
        "leases": [{k: v for k, v in d.items() if k != "age_ms"} for d in leases["leases"]],
        "topic_config": answer(node, "GET", f"/topic/config?topic={T}", "node"),
        "channel_config": answer(node, "GET", f"/channel/config?topic={T}&channel={C}", "node"),
        "ping": call(node, "GET", "/ping")[2],
    }


@pytest.fixture(scope="module")
def auth():
    server = AuthServer()
    for secret, auths in SECRETS.items():
        server.answers[secret] = grant(identity=secret, auths=auths)
    yield server
    server.close()


def _start(tmp_path_factory, auth, *extra: str) -> SecureNsqd:
    node = SecureNsqd(tmp_path_factory.mktemp("nsqd"), f"--auth-http-address={auth.address}",
                      "--retention=1h", "--leases", "--accept-replicas", *extra)
    publish(node, T, [b"secret-%d" % i for i in range(5)])
    wire = authed_wire(node, "node")  # channel c with messages queued (nobody reads them)
    wire.sub(T, C)
    wire.close()
    publish(node, T, [b"queued-%d" % i for i in range(3)])
    return node


@pytest.fixture(scope="module")
def node(tmp_path_factory, auth):
    started = _start(tmp_path_factory, auth)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def strict_node(tmp_path_factory, auth):
    started = _start(tmp_path_factory, auth, "--http-auth-required")
    yield started
    started.stop()


def refused_every_way(node, method: str, target: str, body: bytes = b"",
                      also: tuple[str, ...] = ()) -> None:
    """The four refusals of the issue (and ``also``), each with its exact answer and no
    change on the node."""
    before = snapshot(node)
    status, headers, data = call(node, method, target, None, body)
    assert (status, orjson.loads(data)) == AUTH_REQUIRED, (target, data)
    assert headers.get("Www-Authenticate") == 'Bearer realm="nsqd"'
    assert answer(node, method, target, REFUSED, body) == AUTH_FAILED, target
    for secret in ("publish-only", "other-topic", "no-grants", *also):
        assert answer(node, method, target, secret, body) == UNAUTHORIZED, (target, secret)
    assert snapshot(node) == before, target


# --- nsqpy's routes: asked whenever the auth server is set ----------------------------------------

def test_history_read_and_segments(node):
    for target in (f"/history/read?topic={T}&from=earliest", f"/history/segments?topic={T}"):
        refused_every_way(node, "GET", target)
    status, _, data = call(node, "GET", f"/history/read?topic={T}&from=earliest", "sub-t-c")
    assert status == 200 and b"secret-4" in data and b"queued-2" in data
    status, doc = answer(node, "GET", f"/history/segments?topic={T}", "sub-t")
    assert status == 200 and doc["messages"] == 8


def test_peeks(node):
    refused_every_way(node, "GET", f"/topic/peek?topic={T}")
    refused_every_way(node, "GET", f"/channel/peek?topic={T}&channel={C}")
    status, doc = answer(node, "GET", f"/channel/peek?topic={T}&channel={C}", "sub-t-c")
    assert status == 200 and len(doc) == 8 and all(m["body"] for m in doc), doc
    assert answer(node, "GET", f"/topic/peek?topic={T}", "sub-t")[0] == 200
    # a grant on channel c only does not read channel d
    assert answer(node, "GET", f"/channel/peek?topic={T}&channel=d", "sub-t-c") == UNAUTHORIZED


def test_channel_create_from_the_past_and_rewind(node):
    target = f"/channel/create?topic={T}&channel=c&from=earliest"
    refused_every_way(node, "POST", target)
    refused_every_way(node, "POST", f"/channel/rewind?topic={T}&channel={C}&to=earliest")
    assert answer(node, "POST", f"/channel/create?topic={T}&channel=fresh&from=earliest",
                  "sub-t-c") == UNAUTHORIZED  # c only
    assert "channel c replays" not in node.log()
    assert answer(node, "POST", f"/channel/rewind?topic={T}&channel={C}&to=earliest",
                  "sub-t-c") == (200, None)
    wait_for(lambda: "channel c replays from earliest" in node.log(), what="the rewind")
    assert answer(node, "POST", f"/channel/create?topic={T}&channel=fresh&from=earliest",
                  "sub-t") == (200, None)
    assert "fresh" in snapshot(node)["topics"][T][3]


def test_lease_routes(node):
    leased_read(node, "grp/1/0", T, "leased", 2)
    for target in ("/lease/fin?group=grp&upto=1", "/lease/requeue?name=grp/1/0",
                   "/lease/touch?group=grp&upto=1"):
        refused_every_way(node, "POST", target, also=("sub-t-c",))  # leased, not c
    refused_every_way(node, "GET", "/leases?group=grp", also=("sub-t-c",))
    status, doc = answer(node, "GET", "/leases", "sub-t")
    assert status == 200 and [d["name"] for d in doc["leases"]] == ["grp/1/0"]
    assert answer(node, "POST", "/lease/fin?group=grp&upto=1", "sub-t") == (
        200, {"leases": 1, "messages": 2})


def test_settings_changes_and_node_routes(node):
    refused_every_way(node, "POST", f"/topic/config?topic={T}", b'{"msg_ttl": "1ms"}',
                      also=("sub-t", "pub-t"))
    refused_every_way(node, "POST", f"/channel/config?topic={T}&channel={C}",
                      b'{"max_attempts": 1}', also=("sub-t-c",))
    refused_every_way(node, "POST", "/drain", also=("admin-t",))
    refused_every_way(node, "POST", "/replication/adopt?origin=127.0.0.1:1", also=("admin-t",))
    status, doc = answer(node, "POST", f"/channel/config?topic={T}&channel={C}", "admin-t",
                         b'{"max_attempts": 50}')
    assert status == 200 and doc["max_attempts"] == 50
    assert answer(node, "POST", "/replication/adopt?origin=127.0.0.1:1", "node") == (
        404, {"message": "ORIGIN_NOT_FOUND"})  # the route ran: nothing to adopt


def test_upstreams_routes_stay_open_without_http_auth_required(node, auth):
    asked = len(auth.requests)
    assert answer(node, "POST", "/pub?topic=open", body=b"x") == (200, b"OK")
    assert answer(node, "POST", "/channel/create?topic=open&channel=x") == (200, None)
    assert answer(node, "GET", "/stats?format=json&topic=open")[0] == 200
    assert answer(node, "GET", "/info")[0] == 200
    assert answer(node, "GET", "/config/max_msg_size") == (200, 1048576)
    assert answer(node, "GET", "/metrics")[0] == 200
    assert answer(node, "POST", "/topic/delete?topic=open") == (200, None)
    assert len(auth.requests) == asked  # nobody asked the auth server


# --- upstream's routes with --http-auth-required --------------------------------------------------

UPSTREAM_ROUTES = [
    # (method, target, body, the secret that may, what it gets, secrets refused beyond the four)
    ("POST", f"/pub?topic={T}", b"p", "pub-t", (200, b"OK"), ("sub-t",)),
    ("POST", f"/mpub?topic={T}", b"a\nb", "pub-t", (200, b"OK"), ("sub-t",)),
    ("POST", f"/topic/create?topic={T}", b"", "sub-t", (200, None), ()),
    ("POST", f"/topic/pause?topic={T}", b"", "admin-t", (200, None), ("sub-t", "pub-t")),
    ("POST", f"/topic/unpause?topic={T}", b"", "admin-t", (200, None), ("sub-t",)),
    ("POST", f"/topic/empty?topic={T}", b"", "admin-t", (200, None), ("sub-t",)),
    ("POST", f"/channel/create?topic={T}&channel=made", b"", "sub-t", (200, None), ()),
    ("POST", f"/channel/pause?topic={T}&channel={C}", b"", "admin-t", (200, None), ("sub-t-c",)),
    ("POST", f"/channel/unpause?topic={T}&channel={C}", b"", "admin-t", (200, None), ("sub-t",)),
    ("POST", f"/channel/empty?topic={T}&channel={C}", b"", "admin-t", (200, None), ("sub-t",)),
    ("POST", f"/channel/delete?topic={T}&channel=made", b"", "admin-t", (200, None), ("sub-t",)),
    ("GET", f"/topic/config?topic={T}", b"", "sub-t", None, ("pub-t",)),
    ("GET", f"/channel/config?topic={T}&channel={C}", b"", "sub-t-c", None, ("pub-t",)),
    ("GET", f"/stats?format=json&topic={T}", b"", "sub-t", None, ("pub-t",)),
    ("GET", "/stats?format=json", b"", "node", None, ("admin-t",)),
    ("GET", "/config/max_msg_size", b"", "node", (200, 1048576), ("admin-t",)),
    ("PUT", "/config/log_level", b"info", "node", (200, 2), ("admin-t",)),
    ("GET", "/metrics", b"", "node", None, ("admin-t",)),
    ("PUT", "/debug/setblockrate?rate=x", b"", "node", None, ("admin-t",)),
    ("GET", "/info", b"", "pub-t", None, ()),
    ("POST", "/topic/delete?topic=gone", b"", "node", (404, {"message": "TOPIC_NOT_FOUND"}),
     ("sub-t",)),
]


@pytest.mark.parametrize("method,target,body,secret,granted,also", UPSTREAM_ROUTES,
                         ids=[f"{r[0]} {r[1]}" for r in UPSTREAM_ROUTES])
def test_upstreams_route_with_http_auth_required(strict_node, method, target, body, secret,
                                                 granted, also):
    before = snapshot(strict_node)
    status, headers, data = call(strict_node, method, target, None, body)
    assert (status, orjson.loads(data)) == AUTH_REQUIRED
    assert answer(strict_node, method, target, REFUSED, body) == AUTH_FAILED
    refusing = ("no-grants",)
    if "topic=" in target:
        refusing += ("other-topic",)
    for other in (*refusing, *also):
        assert answer(strict_node, method, target, other, body) == UNAUTHORIZED, other
    assert snapshot(strict_node) == before
    got = answer(strict_node, method, target, secret, body)
    if granted is not None:
        assert got == granted
    else:
        assert got[0] in (200, 400), got  # (setblockrate's rate "x": upstream's 400)


def test_ping_stays_open_with_http_auth_required(strict_node):
    assert call(strict_node, "GET", "/ping")[:1] == (200,)
    assert call(strict_node, "GET", "/ping")[2] == b"OK"


def test_mpub_streams_a_large_body_after_the_auth_answer(strict_node, auth):
    """/mpub reads its body as it streams: a secret not asked before makes the reader wait
    for the auth server's answer, and no piece of the body is lost meanwhile."""
    auth.answers["fresh-publisher"] = grant(auths=SECRETS["pub-t"])
    auth.delay = 0.3
    try:
        bodies = [b"%06d" % i + b"x" * 200 for i in range(3000)]  # ~620 KB
        status, _, data = call(strict_node, "POST", "/mpub?topic=bulk", "fresh-publisher",
                               b"\n".join(bodies))
    finally:
        auth.delay = 0.0
    assert (status, data) == (403, b'{"message":"UNAUTHORIZED"}')  # pub-t: not topic bulk
    auth.answers["bulk-publisher"] = grant(
        auths=[{"topic": "^bulk$", "channels": [".*"], "permissions": ["publish"]}])
    auth.delay = 0.3
    try:
        status, _, data = call(strict_node, "POST", "/mpub?topic=bulk", "bulk-publisher",
                               b"\n".join(bodies))
    finally:
        auth.delay = 0.0
    assert (status, data) == (200, b"OK")
    status, doc = answer(strict_node, "GET", "/stats?format=json&topic=bulk", "node")
    assert doc["topics"][0]["message_count"] == 3000


# --- how the auth server is asked -------------------------------------------------------------------

def test_the_answer_is_kept_for_its_ttl_and_concurrent_requests_share_one_query(node, auth):
    auth.answers["shared"] = grant(auths=SECRETS["sub-t"])
    asked = lambda: [r for r in auth.requests if r["values"].get("secret") == "shared"]  # noqa: E731
    auth.delay = 0.5
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(
        answer(node, "GET", f"/history/segments?topic={T}", "shared")[0])) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    auth.delay = 0.0
    assert results == [200] * 8
    for _ in range(5):
        assert answer(node, "GET", f"/topic/peek?topic={T}", "shared")[0] == 200
    [request] = asked()
    assert request["values"] == {"common_name": "", "remote_ip": "127.0.0.1", "secret": "shared",
                                 "tls": "false"}
    assert request["headers"]["Accept"] == "application/vnd.nsq; version=1.0"


def test_an_expired_answer_is_asked_again_and_a_refusal_is_not_kept(node, auth):
    auth.answers["short"] = grant(ttl=1, auths=SECRETS["sub-t"])
    target = f"/history/segments?topic={T}"
    assert answer(node, "GET", target, "short")[0] == 200
    auth.answers["short"] = grant(ttl=1, auths=SECRETS["pub-t"])  # now denied
    wait_for(lambda: answer(node, "GET", target, "short") == UNAUTHORIZED, timeout=10,
             what="the re-query after the TTL")
    del auth.answers["short"]
    wait_for(lambda: answer(node, "GET", target, "short") == AUTH_FAILED, timeout=10,
             what="the refusal")
    auth.answers["short"] = grant(auths=SECRETS["sub-t"])
    assert answer(node, "GET", target, "short")[0] == 200  # the refusal was not kept


def test_only_the_bearer_scheme_carries_a_secret(node):
    target = f"/history/segments?topic={T}"
    assert call(node, "GET", target, "sub-t", scheme="bearer")[0] == 200
    for scheme in ("Basic", "Token"):
        status, _, data = call(node, "GET", target, "sub-t", scheme=scheme)
        assert (status, json.loads(data)) == AUTH_REQUIRED


def test_the_auth_server_down_refuses_with_auth_failed(tmp_path_factory):
    server = AuthServer()
    node = _start_without_data(tmp_path_factory, server)
    try:
        server.down()
        assert answer(node, "GET", f"/history/segments?topic={T}", "anything") == AUTH_FAILED
        assert "AUTH failed" in wait_for(lambda: "AUTH failed" in node.log() and node.log(),
                                         what="the reason in nsqd's log")
    finally:
        node.stop()
        server.close()


def _start_without_data(tmp_path_factory, server: AuthServer) -> SecureNsqd:
    return SecureNsqd(tmp_path_factory.mktemp("nsqd"), f"--auth-http-address={server.address}",
                      "--retention=1h")


def test_https_tells_the_auth_server_tls_and_the_certificates_name(tmp_path_factory, certs,
                                                                   auth):
    node = SecureNsqd(tmp_path_factory.mktemp("nsqd"), f"--auth-http-address={auth.address}",
                      "--retention=1h", f"--tls-root-ca-file={certs.ca}",
                      "--tls-client-auth-policy=require-verify", certs=certs)
    try:
        auth.answers["over-tls"] = grant(auths=SECRETS["sub-t"])
        status, _, data = call(node, "GET", f"/history/segments?topic={T}", "over-tls",
                               context=certs.client_context("client"))
        assert (status, data) == (404, b'{"message":"TOPIC_NOT_FOUND"}')  # past the check
        [request] = [r for r in auth.requests if r["values"].get("secret") == "over-tls"]
        assert request["values"]["tls"] == "true"
        assert request["values"]["common_name"] == "client-one"
    finally:
        node.stop()


def test_drain_with_the_node_grant(tmp_path_factory, auth):
    node = _start_without_data(tmp_path_factory, auth)
    try:
        assert answer(node, "POST", "/drain", "admin-t") == UNAUTHORIZED
        assert call(node, "GET", "/ping")[2] == b"OK"
        assert answer(node, "POST", "/drain", "node") == (200, None)
        wait_for(lambda: node.proc.poll() is not None, timeout=30, what="nsqd drained and exited")
    finally:
        node.stop()


def test_http_auth_required_needs_an_auth_server(tmp_path):
    import subprocess

    from helpers.servers import VENV_BIN

    done = subprocess.run([str(VENV_BIN / "nsqd"), "--http-auth-required",
                           f"--data-path={tmp_path}"], capture_output=True, timeout=30)
    assert done.returncode != 0
    assert b"--http-auth-required needs --auth-http-address" in done.stdout + done.stderr


# --- side by side with upstream: its routes answer the same with the auth server set -------------

SAME_AS_UPSTREAM = [
    ("POST", "/pub?topic=same", b"x"), ("POST", "/mpub?topic=same", b"a\nb"),
    ("POST", "/pub", b"x"), ("POST", "/topic/create?topic=same2"),
    ("POST", "/channel/create?topic=same&channel=c"),
    # (with from= ours answers RETENTION_OFF where upstream ignores it: test_history_off.py)
    ("POST", "/channel/pause?topic=same&channel=c"), ("POST", "/channel/unpause?topic=same&channel=c"),
    ("POST", "/channel/empty?topic=same&channel=c"), ("POST", "/channel/delete?topic=same&channel=c"),
    ("POST", "/topic/pause?topic=same"), ("POST", "/topic/empty?topic=same"),
    ("POST", "/topic/delete?topic=same2"), ("POST", "/topic/delete?topic=nope"),
    ("GET", "/config/max_msg_size"), ("GET", "/ping"), ("GET", "/stats?format=json&topic=nope&include_mem=false"),
    ("GET", "/history/read?topic=same"),  # (404 on both: no history without --retention)
]


@pytest.mark.parametrize("secret", [None, "node", REFUSED])
def test_upstreams_routes_answer_as_upstream_with_the_auth_server_set(tmp_path, auth, secret):
    """Default flags but --auth-http-address: with no header, a granted or a refused secret,
    each of upstream's routes gives upstream's status, body and content type (upstream's nsqd
    live, else as recorded in ``tests/recordings/http/test_http_auth.json``), and neither
    nsqd asks the auth server anything."""

    def answers(side: str, binary: str | None) -> tuple[dict[str, tuple], int]:
        """Each route's (status, content type, body), and how often the auth server was asked."""
        node = SecureNsqd(tmp_path / side, f"--auth-http-address={auth.address}", binary=binary)
        try:
            asked = len(auth.requests)
            got = {}
            for method, target, *body in SAME_AS_UPSTREAM:
                status, headers, data = call(node, method, target, secret, *body)
                if target.startswith("/stats"):  # (its start time differs by a second or so)
                    data = {k: v for k, v in orjson.loads(data).items() if k != "start_time"}
                got[f"{method} {target}"] = (status, headers.get("Content-Type"), data)
            return got, len(auth.requests) - asked
        finally:
            node.stop()

    upstream, up_asked = RECORDED.answer(None, lambda: answers("up", upstream_binary("nsqd")))
    ours, our_asked = answers("ours", None)
    for route, mine in ours.items():
        assert route in upstream, f"{route}: not recorded; `make record-upstream` (docs/testing.md)"
        assert mine == upstream[route], route
    assert (our_asked, up_asked) == (0, 0)
