"""AUTH against a real HTTP auth server (reference §1.3, §1.5, §6): allowed and denied publish and
subscribe, regex authorizations, every auth error, TTL expiry and re-query, the server down,
GET/POST requests as upstream sends them, /stats fields, and commands held in order while the
auth server answers."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from urllib.parse import parse_qsl

import pytest

from helpers.polling import wait_for
from helpers.servers import unique_name
from helpers.wire import Wire, pack_i32
from nsqpy.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE
from security.support import grant, tls_wire

pytestmark = pytest.mark.timeout(60)

PUBLISH_ALL = {"topic": ".*", "channels": [".*"], "permissions": ["publish"]}


def auth_nsqd(secure_nsqd, auth_server, *extra, certs=None):
    return secure_nsqd(f"--auth-http-address={auth_server.address}", *extra, certs=certs)


def authed_wire(node, secret: str, **identify) -> tuple[Wire, dict]:
    wire = Wire(node.tcp_address)
    answer = wire.identify(feature_negotiation=True, **identify)
    assert answer["auth_required"] is True
    wire.cmd(b"AUTH", body=secret.encode())
    frame = wire.read_frame()
    assert frame.frame_type == FRAME_TYPE_RESPONSE, frame
    return wire, json.loads(frame.data)


def stats(node) -> dict:
    with urllib.request.urlopen(f"http://{node.http_address}/stats?format=json", timeout=5) as r:
        return json.loads(r.read())


# --- the happy path and denials -------------------------------------------------------------------

def test_publish_allowed_and_denied(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server)
    auth_server.answers["pub-secret"] = grant(identity="alice", identity_url="https://id/alice", auths=[
        {"topic": "^orders", "channels": [".*"], "permissions": ["publish"]},
        {"topic": "audit", "channels": [".*"], "permissions": ["subscribe"]},
    ])
    wire, answer = authed_wire(node, "pub-secret", client_id="alice-conn")
    assert answer == {"identity": "alice", "identity_url": "https://id/alice", "permission_count": 2}
    wire.pub("orders_eu", b"ok")
    wire.mpub("orders_us", [b"a", b"b"])
    wire.cmd(b"DPUB", "orders_eu", "10", body=b"later")
    wire.expect_ok()
    doc = stats(node)
    [me] = [c for c in doc["producers"] if c["client_id"] == "alice-conn"]
    assert me["authed"] is True and me["auth_identity"] == "alice"
    assert me["auth_identity_url"] == "https://id/alice"
    keys = list(me)
    assert keys.index("user_agent") + 1 == keys.index("authed")
    assert keys.index("auth_identity_url") + 1 == keys.index("pub_counts")
    wire.cmd(b"PUB", "audit", body=b"no")  # subscribe-only topic
    wire.expect_error(b'E_UNAUTHORIZED AUTH failed for PUB on "audit" ""')
    assert wire.is_closed()
    for cmd, args, body in ((b"MPUB", ("x_orders",), pack_i32(1) + pack_i32(1) + b"m"),
                            (b"DPUB", ("other", "5"), b"d")):
        wire, _ = authed_wire(node, "pub-secret")
        wire.cmd(cmd, *args, body=body)
        topic = args[0]
        wire.expect_error(f'E_UNAUTHORIZED AUTH failed for {cmd.decode()} on "{topic}" ""'.encode())
        wire.close()


def test_subscribe_allowed_and_denied_with_unanchored_regexes(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server)
    auth_server.answers["sub-secret"] = grant(auths=[
        {"topic": "foo", "channels": ["^archive$", "metrics"], "permissions": ["subscribe"]},
        PUBLISH_ALL,
    ])
    topic = unique_name("xfooy")  # "foo" matches anywhere, as Go's MatchString does
    pub, _ = authed_wire(node, "sub-secret")
    pub.pub(topic, b"hello")
    wire, _ = authed_wire(node, "sub-secret")
    wire.sub(topic, "archive", rdy=1)
    assert wire.read_message().body == b"hello"
    wire2, _ = authed_wire(node, "sub-secret")
    wire2.sub(topic, "my_metrics_2")
    wire3, _ = authed_wire(node, "sub-secret")
    wire3.cmd(b"SUB", topic, "archive2")
    wire3.expect_error(f'E_UNAUTHORIZED AUTH failed for SUB on "{topic}" "archive2"'.encode())
    assert wire3.is_closed()
    wire4, _ = authed_wire(node, "sub-secret")
    wire4.cmd(b"SUB", "bar", "archive")
    wire4.expect_error(b'E_UNAUTHORIZED AUTH failed for SUB on "bar" "archive"')
    # publish-only grants need a channel regex matching "" (upstream's rule)
    auth_server.answers["no-channel"] = grant(auths=[
        {"topic": ".*", "channels": ["x"], "permissions": ["publish"]}])
    wire5, _ = authed_wire(node, "no-channel")
    wire5.cmd(b"PUB", "t", body=b"x")
    wire5.expect_error(b'E_UNAUTHORIZED AUTH failed for PUB on "t" ""')
    for w in (pub, wire, wire2, wire3, wire4, wire5):
        w.close()


def test_commands_before_auth_and_auth_errors(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server)
    for data, error in (
        (b"PUB t\n" + pack_i32(1) + b"x", b"E_AUTH_FIRST AUTH required before PUB"),
        (b"MPUB t\n" + pack_i32(9) + pack_i32(1) + pack_i32(1) + b"x",
         b"E_AUTH_FIRST AUTH required before MPUB"),
        (b"DPUB t 1\n" + pack_i32(1) + b"x", b"E_AUTH_FIRST AUTH required before DPUB"),
        (b"SUB t c\n", b"E_AUTH_FIRST AUTH required before SUB"),
        (b"AUTH x\n", b"E_INVALID AUTH invalid number of parameters"),
        (b"AUTH\n" + pack_i32(0), b"E_BAD_BODY AUTH invalid body size 0"),
        (b"AUTH\n" + pack_i32(5242881), b"E_BAD_BODY AUTH body too big 5242881 > 5242880"),
        (b"AUTH\n" + pack_i32(7) + b"unknown", b"E_AUTH_FAILED AUTH failed"),  # 403 from the server
    ):
        wire = Wire(node.tcp_address)
        wire.identify()
        wire.send(data)
        wire.expect_error(error)
        assert wire.is_closed()
    auth_server.answers["empty"] = grant(auths=[])
    wire = Wire(node.tcp_address)
    wire.cmd(b"AUTH", body=b"empty")
    wire.expect_error(b"E_UNAUTHORIZED AUTH no authorizations found")
    auth_server.answers["ok"] = grant(auths=[PUBLISH_ALL])
    wire, _ = authed_wire(node, "ok")
    wire.cmd(b"AUTH", body=b"ok")
    wire.expect_error(b"E_INVALID AUTH already set")


@pytest.mark.parametrize("answer", [
    (500, {"message": "INTERNAL_ERROR"}),
    (200, b"not json"),
    (200, {"ttl": 0, "authorizations": [PUBLISH_ALL]}),
    (200, {"ttl": -5, "authorizations": [PUBLISH_ALL]}),
    (200, {"ttl": "60", "authorizations": [PUBLISH_ALL]}),
    (200, {"ttl": 60, "authorizations": [{"topic": ".*", "channels": [".*"], "permissions": ["admin"]}]}),
    (200, {"ttl": 60, "authorizations": [{"topic": "(", "channels": [".*"], "permissions": ["publish"]}]}),
    (200, {"ttl": 60, "authorizations": [{"topic": "t", "channels": ["[z-a]"], "permissions": ["publish"]}]}),
    (200, {"ttl": 60, "identity": 5, "authorizations": [PUBLISH_ALL]}),
    (200, [1, 2]),
])
def test_bad_auth_answers_fail_auth(secure_nsqd, auth_server, answer):
    node = auth_nsqd(secure_nsqd, auth_server)
    auth_server.answers["s"] = answer
    wire = Wire(node.tcp_address)
    wire.cmd(b"AUTH", body=b"s")
    wire.expect_error(b"E_AUTH_FAILED AUTH failed")
    assert wire.is_closed()
    assert "AUTH failed failed to auth against" in node.log()  # details only in the log


def test_sub_refused_when_only_publish_granted(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server)
    auth_server.answers["ok"] = grant(auths=[PUBLISH_ALL])
    wire, _ = authed_wire(node, "ok")
    wire.cmd(b"SUB", "t", "c")
    wire.expect_error(b'E_UNAUTHORIZED AUTH failed for SUB on "t" "c"')


def test_auth_disabled_without_auth_server(secure_nsqd):
    node = secure_nsqd()
    wire = Wire(node.tcp_address)
    assert wire.identify(feature_negotiation=True)["auth_required"] is False
    wire.cmd(b"AUTH", body=b"x")
    wire.expect_error(b"E_AUTH_DISABLED AUTH disabled")


# --- what nsqd sends to the auth server --------------------------------------------------------------

def test_get_request_as_upstream_sends_it(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server)
    secret = "s3cret with spaces&symbols=/é"
    auth_server.answers[secret] = grant(auths=[PUBLISH_ALL])
    wire, _ = authed_wire(node, secret)
    [req] = auth_server.requests
    assert req["method"] == "GET" and req["path"] == "/auth"
    assert req["headers"]["Accept"] == "application/vnd.nsq; version=1.0"
    keys = [k for k, _ in parse_qsl(req["raw_query"], keep_blank_values=True)]
    assert keys == ["common_name", "remote_ip", "secret", "tls"]  # Go's sorted url.Values
    assert req["values"] == {"common_name": "", "remote_ip": "127.0.0.1", "secret": secret,
                             "tls": "false"}
    assert "+" in req["raw_query"]  # spaces as QueryEscape writes them
    wire.close()


def test_post_request_method(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server, "--auth-http-request-method=post")
    auth_server.answers["p"] = grant(auths=[PUBLISH_ALL])
    wire, _ = authed_wire(node, "p")
    wire.pub(unique_name("post"), b"x")
    [req] = auth_server.requests
    assert req["method"] == "POST" and req["path"] == "/auth" and req["raw_query"] == ""
    assert req["headers"]["Content-Type"] == "application/json"
    assert json.loads(req["body"]) == {"common_name": [""], "remote_ip": ["127.0.0.1"],
                                       "secret": ["p"], "tls": ["false"]}


def test_full_url_and_several_servers_first_success_wins(secure_nsqd, auth_server):
    dead = "127.0.0.1:9"  # nothing listens there
    node = secure_nsqd(f"--auth-http-address={dead}",
                       f"--auth-http-address=http://{auth_server.address}/custom/path")
    auth_server.answers["s"] = grant(auths=[PUBLISH_ALL])
    for _ in range(4):  # whatever the random start, the live server answers
        wire, _ = authed_wire(node, "s")
        wire.close()
    assert {r["path"] for r in auth_server.requests} == {"/custom/path"}


def test_403_with_https_port_is_retried_over_https(secure_nsqd, auth_server, certs):
    """Upstream's HTTP client follows ``403 {"https_port": N}`` to HTTPS (roots: --tls-root-ca-file)."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(certs.server_cert, certs.server_key)
    https_port = auth_server.serve_https(server_ctx)

    def answer(values):
        if not auth_server.requests[-1]["scheme"] == "https":
            return 403, {"message": "TLS_REQUIRED", "https_port": https_port}
        return grant(identity="via-https", auths=[PUBLISH_ALL])

    auth_server.answers["s"] = answer
    node = auth_nsqd(secure_nsqd, auth_server, f"--tls-root-ca-file={certs.ca}")
    wire, resp = authed_wire(node, "s")
    assert resp["identity"] == "via-https"
    assert [r["scheme"] for r in auth_server.requests] == ["http", "https"]
    assert auth_server.requests[0]["raw_query"] == auth_server.requests[1]["raw_query"]
    wire.close()


def test_common_name_and_tls_sent_for_client_certificates(secure_nsqd, auth_server, certs):
    node = auth_nsqd(secure_nsqd, auth_server, "--tls-client-auth-policy=require-verify",
                     f"--tls-root-ca-file={certs.ca}", certs=certs)
    auth_server.answers["tls-secret"] = grant(identity="client-one", auths=[PUBLISH_ALL])
    wire, answer = tls_wire(node.tcp_address, certs.client_context("client"))
    assert answer["auth_required"] is True
    wire.cmd(b"AUTH", body=b"tls-secret")
    assert json.loads(wire.read_frame().data)["identity"] == "client-one"
    wire.pub(unique_name("mtls"), b"x")
    [req] = auth_server.requests
    assert req["values"]["common_name"] == "client-one"
    assert req["values"]["tls"] == "true"
    wire.close()


# --- TTL and re-query ----------------------------------------------------------------------------------

def test_ttl_expiry_requeries_at_the_next_pub_and_sub(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server)
    decisions = {"allow": True}

    def answer(values):
        if decisions["allow"]:
            return grant(ttl=1, auths=[{"topic": ".*", "channels": [".*"],
                                        "permissions": ["publish", "subscribe"]}])
        return grant(ttl=1, auths=[{"topic": "^other$", "channels": [".*"],
                                    "permissions": ["publish"]}])

    auth_server.answers["ttl"] = answer
    topic = unique_name("ttl")
    wire, _ = authed_wire(node, "ttl")
    wire.pub(topic, b"1")
    wire.pub(topic, b"2")
    assert len(auth_server.requests) == 1  # cached within the TTL
    time.sleep(1.3)
    wire.pub(topic, b"3")  # expired: re-queried before this PUB, still allowed
    assert len(auth_server.requests) == 2
    sub, _ = authed_wire(node, "ttl")
    time.sleep(1.3)
    sub.sub(topic, "ch")  # SUB re-queries too
    assert len(auth_server.requests) == 4
    decisions["allow"] = False
    time.sleep(1.3)
    wire.cmd(b"PUB", topic, body=b"4")
    wire.expect_error(f'E_UNAUTHORIZED AUTH failed for PUB on "{topic}" ""'.encode())
    assert len(auth_server.requests) == 5


def test_auth_server_down(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server)
    auth_server.answers["s"] = grant(ttl=1, auths=[PUBLISH_ALL])
    wire, _ = authed_wire(node, "s")
    wire.pub(unique_name("down"), b"x")
    auth_server.down()
    time.sleep(1.3)
    wire.cmd(b"PUB", "t", body=b"x")  # the re-query fails: the connection is closed
    wire.expect_error(b"E_AUTH_FAILED AUTH failed")
    assert wire.is_closed()
    t0 = time.monotonic()
    fresh = Wire(node.tcp_address)
    fresh.cmd(b"AUTH", body=b"s")
    fresh.expect_error(b"E_AUTH_FAILED AUTH failed")
    assert time.monotonic() - t0 < 3  # connection refused is quick
    assert "connect" in node.log().lower()


# --- commands held in order while the auth server answers --------------------------------------------

def test_pipelined_commands_wait_for_the_auth_answer(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server)
    auth_server.delay = 3.0
    auth_server.answers["slow"] = grant(auths=[PUBLISH_ALL, {"topic": ".*", "channels": [".*"],
                                                             "permissions": ["subscribe"]}])
    topic = unique_name("pipe")
    wire = Wire(node.tcp_address)
    body = json.dumps({"feature_negotiation": True}).encode()
    wire.send(b"IDENTIFY\n" + pack_i32(len(body)) + body + b"AUTH\n" + pack_i32(4) + b"slow"
              + b"PUB " + topic.encode() + b"\n" + pack_i32(1) + b"a"
              + b"PUB " + topic.encode() + b"\n" + pack_i32(1) + b"b"
              + b"SUB " + topic.encode() + b" ch\nRDY 5\n")
    # meanwhile another connection is not held up: answered before the AUTH (3 s away)
    frames = [wire.read_frame()]  # IDENTIFY's answer comes before the auth server is asked
    other = Wire(node.tcp_address)
    other.identify()
    assert wire.nothing_arrived(), "another client waited for this one's auth answer"
    wire.sock.settimeout(60)
    frames += [wire.read_frame() for _ in range(4)]
    assert json.loads(frames[0].data)["max_rdy_count"] == 2500
    assert json.loads(frames[1].data)["permission_count"] == 2
    assert [f.data for f in frames[2:]] == [b"OK", b"OK", b"OK"]
    got = sorted(wire.read_message().body for _ in range(2))
    assert got == [b"a", b"b"]
    wire.close()


def test_requery_holds_only_that_connection(secure_nsqd, auth_server):
    node = auth_nsqd(secure_nsqd, auth_server)
    auth_server.answers["s"] = grant(ttl=1, auths=[PUBLISH_ALL])
    slow, _ = authed_wire(node, "s")
    fast, _ = authed_wire(node, "s")
    time.sleep(1.2)
    auth_server.delay = 3.0  # the order below (fast answered first) holds with margin
    topic = unique_name("hold")
    asked = len(auth_server.requests)
    slow.send(b"PUB " + topic.encode() + b"\n" + pack_i32(1) + b"1" + b"NOP\n"
              + b"PUB " + topic.encode() + b"\n" + pack_i32(1) + b"2")
    wait_for(lambda: len(auth_server.requests) > asked, what="slow's re-query at the auth server")
    auth_server.delay = 0
    done = threading.Event()
    latencies = []

    def publish_fast():
        t0 = time.monotonic()
        fast.pub(topic, b"fast")  # its own re-query is quick
        latencies.append(time.monotonic() - t0)
        done.set()

    threading.Thread(target=publish_fast).start()
    assert done.wait(60)
    assert slow.nothing_arrived(), "the other connection waited for this one's re-query"
    slow.sock.settimeout(60)
    slow.expect_ok()
    slow.expect_ok()
    doc = stats(node)
    assert doc["topics"][0]["message_count"] == 3


def test_auth_refuses_to_start_without_the_re2_engine(tmp_path):
    """Grants need Go's regexp semantics: without google-re2, nsqd with --auth-http-address stops
    with a FATAL line instead of deciding grants with Python's re."""
    import subprocess

    from helpers.servers import VENV_BIN, free_port

    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "re2.py").write_text('raise ImportError("No module named re2")\n')
    argv = [str(VENV_BIN / "nsqd"), f"--data-path={tmp_path}",
            f"--tcp-address=127.0.0.1:{free_port()}", f"--http-address=127.0.0.1:{free_port()}"]
    env = {**__import__("os").environ, "PYTHONPATH": str(shadow)}
    done = subprocess.run(argv + ["--auth-http-address=127.0.0.1:1"], env=env, timeout=20,
                          capture_output=True, text=True)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.endswith("FATAL: failed to instantiate nsqd - Go regular expressions need the "
                         "google-re2 package (pip install google-re2): No module named re2"), last
