"""nsqlookupd as a real process: raw TCP V1 and HTTP, every endpoint, error and lifecycle."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

V1_HEADER = "x-nsq-content-type"
JSON_CT = "application/json; charset=utf-8"
BIN = Path(sys.executable).parent / "nsqlookupd"


def assert_v1_json(res, status=200):
    assert res.status == status, res
    assert res.headers[V1_HEADER] == "nsq; version=1.0"
    assert res.headers["content-type"] == JSON_CT
    return res.json()


def assert_v1_empty(res):
    assert res.status == 200, res
    assert res.body == b""
    assert res.headers[V1_HEADER] == "nsq; version=1.0"


def assert_error(res, status, message):
    assert assert_v1_json(res, status) == {"message": message}


def producer_ids(lookupd, topic):
    res = lookupd.get(f"/lookup?topic={topic}")
    if res.status != 200:
        return None
    return sorted(p["remote_address"] for p in res.json()["producers"])


# --- process lifecycle --------------------------------------------------------------------------


def test_version_flag():
    out = subprocess.run([str(BIN), "--version"], capture_output=True, timeout=20)
    assert out.returncode == 0
    assert re.fullmatch(r"nsqlookupd v1\.3\.0 \(built w/nsqpy 0\.1\.0 python3\.\d+\.\d+\)\n", out.stdout.decode())


def test_unknown_flag_exits_2():
    out = subprocess.run([str(BIN), "--no-such-flag"], capture_output=True, timeout=20)
    assert out.returncode == 2
    assert b"no-such-flag" in out.stderr


def test_listen_failure_is_fatal(lookupd):
    out = subprocess.run([str(BIN), f"--tcp-address=127.0.0.1:{lookupd.tcp_port}",
                          "--http-address=127.0.0.1:0"], capture_output=True, timeout=20)
    assert out.returncode == 1
    # upstream v1.3.0's own line, Go's complaint about its format string included
    assert re.search(rb"FATAL: failed to instantiate nsqlookupd%!\(EXTRA \*errors\.errorString="
                     rb"listen \(127\.0\.0\.1:\d+\) failed - listen tcp 127\.0\.0\.1:\d+: bind: "
                     rb"address already in use\)\n", out.stderr), out.stderr


def test_log_lines_look_like_upstream(lookupd):
    log = lookupd.log()
    stamp = r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6}"
    assert re.search(rf"^\[nsqlookupd\] {stamp} INFO: nsqlookupd v1\.3\.0 \(built w/nsqpy 0\.1\.0 python3\.\d+\.\d+\)$",
                     log, re.M), log
    assert re.search(rf"^\[nsqlookupd\] {stamp} INFO: TCP: listening on 127\.0\.0\.1:{lookupd.tcp_port}$",
                     log, re.M), log
    assert re.search(rf"^\[nsqlookupd\] {stamp} INFO: HTTP: listening on 127\.0\.0\.1:{lookupd.http_port}$",
                     log, re.M), log
    assert re.search(rf"^\[nsqlookupd\] {stamp} INFO: 200 GET /ping \(127\.0\.0\.1:\d+\) ", log, re.M)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_signal_exit(lookupd_factory, v1, sig):
    proc = lookupd_factory()
    client = v1(proc.tcp_port)
    assert client.identify()
    assert proc.stop(sig) == 0
    assert "TCP: closing" in proc.log() and "HTTP: closing" in proc.log()
    assert client.expect_closed() == b""


def test_config_file_and_log_prefix(lookupd_factory, tmp_path):
    cfg = tmp_path / "lookupd.cfg"
    cfg.write_text('log_prefix = "[cfg-lookupd] "\ninactive_producer_timeout = "1s"\n')
    proc = lookupd_factory(f"--config={cfg}")
    assert "[cfg-lookupd] " in proc.log()
    assert "[nsqlookupd] " not in proc.log()


def test_log_level_warn_suppresses_info(lookupd_factory):
    proc = lookupd_factory("--log-level=warn")
    assert proc.get("/ping").status == 200
    assert "INFO" not in proc.log()


# --- HTTP basics and routing --------------------------------------------------------------------


def test_ping(lookupd):
    res = lookupd.get("/ping")
    assert res.status == 200
    assert res.body == b"OK"
    assert res.headers["content-type"] == "text/plain; charset=utf-8"
    assert V1_HEADER not in res.headers


def test_info(lookupd):
    assert assert_v1_json(lookupd.get("/info")) == {"version": "1.3.0"}


def test_not_found(lookupd):
    assert_error(lookupd.get("/nope"), 404, "NOT_FOUND")
    assert_error(lookupd.post("/nope"), 404, "NOT_FOUND")
    assert_error(lookupd.get("/"), 404, "NOT_FOUND")
    assert_error(lookupd.get("/debug/pprof"), 404, "NOT_FOUND")


@pytest.mark.parametrize("method,path,allow", [
    ("POST", "/ping", "GET, OPTIONS"),
    ("PUT", "/lookup", "GET, OPTIONS"),
    ("DELETE", "/topics", "GET, OPTIONS"),
    ("POST", "/info", "GET, OPTIONS"),
    ("POST", "/nodes", "GET, OPTIONS"),
    ("GET", "/topic/create", "OPTIONS, POST"),
    ("GET", "/topic/delete", "OPTIONS, POST"),
    ("PUT", "/channel/create", "OPTIONS, POST"),
    ("GET", "/channel/delete", "OPTIONS, POST"),
    ("GET", "/topic/tombstone", "OPTIONS, POST"),
])
def test_method_not_allowed(lookupd, method, path, allow):
    res = lookupd.request(method, path)
    assert_error(res, 405, "METHOD_NOT_ALLOWED")
    assert res.headers["allow"] == allow


def test_head_is_not_get(lookupd):
    res = lookupd.request("HEAD", "/ping")
    assert res.status == 405
    assert res.headers["allow"] == "GET, OPTIONS"


def test_options(lookupd):
    res = lookupd.request("OPTIONS", "/lookup")
    assert res.status == 200 and res.body == b""
    assert res.headers["allow"] == "GET, OPTIONS"
    assert lookupd.request("OPTIONS", "/topic/create").headers["allow"] == "OPTIONS, POST"
    assert_error(lookupd.request("OPTIONS", "/nope"), 404, "NOT_FOUND")


def test_redirects(lookupd):
    res = lookupd.get("/lookup/?topic=x")
    assert res.status == 301
    assert res.headers["location"] == "/lookup?topic=x"
    res = lookupd.post("/topic/create/?topic=x")
    assert res.status == 307
    assert res.headers["location"] == "/topic/create?topic=x"
    res = lookupd.get("/LOOKUP?topic=x")
    assert res.status == 301 and res.headers["location"] == "/lookup?topic=x"
    res = lookupd.get("//ping")
    assert res.status == 301 and res.headers["location"] == "/ping"
    # nothing was created by a redirect
    assert lookupd.get("/topics").json() == {"topics": []}


def test_bad_query_is_invalid_request(lookupd):
    for path in ("/lookup?topic=%zz", "/channels?topic=a;b", "/lookup?topic=a%"):
        assert_error(lookupd.get(path), 400, "INVALID_REQUEST")
    for path in ("/topic/create?topic=%zz", "/channel/delete?x=%g0", "/topic/tombstone?;"):
        assert_error(lookupd.post(path), 400, "INVALID_REQUEST")


def test_empty_listings(lookupd):
    assert assert_v1_json(lookupd.get("/topics")) == {"topics": []}
    assert assert_v1_json(lookupd.get("/channels?topic=x")) == {"channels": []}
    assert assert_v1_json(lookupd.get("/nodes")) == {"producers": []}
    assert assert_v1_json(lookupd.get("/debug")) == {}


# --- HTTP topic/channel management --------------------------------------------------------------


def test_lookup_errors(lookupd):
    assert_error(lookupd.get("/lookup"), 400, "MISSING_ARG_TOPIC")
    assert_error(lookupd.get("/lookup?topic=nope"), 404, "TOPIC_NOT_FOUND")
    assert_error(lookupd.get("/channels"), 400, "MISSING_ARG_TOPIC")


def test_topic_create_and_delete(lookupd):
    assert_error(lookupd.post("/topic/create"), 400, "MISSING_ARG_TOPIC")
    assert_error(lookupd.post("/topic/create?topic=bad!"), 400, "INVALID_ARG_TOPIC")
    assert_error(lookupd.post("/topic/create?topic=" + "a" * 65), 400, "INVALID_ARG_TOPIC")
    assert_v1_empty(lookupd.post("/topic/create?topic=t1"))
    assert_v1_empty(lookupd.post("/topic/create?topic=t1"))  # idempotent
    assert_v1_empty(lookupd.post("/topic/create?topic=t2%23ephemeral"))
    assert sorted(lookupd.get("/topics").json()["topics"]) == ["t1", "t2#ephemeral"]
    assert assert_v1_json(lookupd.get("/lookup?topic=t1")) == {"channels": [], "producers": []}
    # no producers → not in /debug
    assert lookupd.get("/debug").json() == {}

    assert_error(lookupd.post("/topic/delete"), 400, "MISSING_ARG_TOPIC")
    assert_v1_empty(lookupd.post("/topic/delete?topic=never-existed"))  # no 404 upstream
    assert_v1_empty(lookupd.post("/topic/delete?topic=bad!name"))  # and no validation
    lookupd.post("/channel/create?topic=t1&channel=c1")
    assert_v1_empty(lookupd.post("/topic/delete?topic=t1"))
    assert lookupd.get("/topics").json() == {"topics": ["t2#ephemeral"]}
    assert lookupd.get("/channels?topic=t1").json() == {"channels": []}
    assert_error(lookupd.get("/lookup?topic=t1"), 404, "TOPIC_NOT_FOUND")


def test_first_query_value_wins(lookupd):
    assert_v1_empty(lookupd.post("/topic/create?topic=first&topic=second"))
    assert lookupd.get("/topics").json() == {"topics": ["first"]}


@pytest.mark.parametrize("query,message", [
    ("", "MISSING_ARG_TOPIC"),
    ("channel=c", "MISSING_ARG_TOPIC"),
    ("topic=bad!&channel=c", "INVALID_ARG_TOPIC"),
    ("topic=t", "MISSING_ARG_CHANNEL"),
    ("topic=t&channel=", "INVALID_ARG_CHANNEL"),
    ("topic=t&channel=c%20d", "INVALID_ARG_CHANNEL"),
])
def test_channel_arg_errors(lookupd, query, message):
    assert_error(lookupd.post(f"/channel/create?{query}"), 400, message)
    assert_error(lookupd.post(f"/channel/delete?{query}"), 400, message)


def test_channel_create_and_delete(lookupd):
    assert_v1_empty(lookupd.post("/channel/create?topic=t&channel=c1"))
    assert_v1_empty(lookupd.post("/channel/create?topic=t&channel=c2"))
    assert lookupd.get("/topics").json() == {"topics": ["t"]}
    assert sorted(lookupd.get("/channels?topic=t").json()["channels"]) == ["c1", "c2"]
    assert sorted(lookupd.get("/lookup?topic=t").json()["channels"]) == ["c1", "c2"]
    assert_v1_empty(lookupd.post("/channel/delete?topic=t&channel=c1"))
    assert lookupd.get("/channels?topic=t").json() == {"channels": ["c2"]}
    assert_error(lookupd.post("/channel/delete?topic=t&channel=c1"), 404, "CHANNEL_NOT_FOUND")
    assert_error(lookupd.post("/channel/delete?topic=zz&channel=c2"), 404, "CHANNEL_NOT_FOUND")


# --- TCP: IDENTIFY, REGISTER, UNREGISTER, PING --------------------------------------------------


def test_identify_response(lookupd, v1):
    client = v1(lookupd.tcp_port)
    raw = client.identify()
    assert raw == (b'{"broadcast_address":"127.0.0.1","hostname":' + json.dumps(socket.gethostname()).encode()
                   + b',"http_port":%d,"tcp_port":%d,"version":"1.3.0"}'
                   % (lookupd.http_port, lookupd.tcp_port))
    assert client.command("PING") == b"OK"


def test_broadcast_address_flag_in_identify(lookupd_factory, v1):
    proc = lookupd_factory(broadcast_address="lookupd.example")
    reply = json.loads(v1(proc.tcp_port).identify())
    assert reply["broadcast_address"] == "lookupd.example"


def test_register_lookup_nodes_debug(lookupd, v1):
    client = v1(lookupd.tcp_port)
    client.identify(hostname="nsqd-host", broadcast_address="10.0.0.1", tcp_port=5150,
                    http_port=5151, topology_zone="z1", topology_region="r1")
    assert client.command("REGISTER t1 c1") == b"OK"
    assert client.command("REGISTER t1 c1") == b"OK"  # idempotent
    assert client.command("REGISTER t2") == b"OK"
    me = client.local_address
    peer = {"remote_address": me, "hostname": "nsqd-host", "broadcast_address": "10.0.0.1",
            "tcp_port": 5150, "http_port": 5151, "version": "1.3.0",
            "topology_zone": "z1", "topology_region": "r1"}
    res = lookupd.get("/lookup?topic=t1")
    assert res.body.startswith(b'{"channels":["c1"],"producers":[{"remote_address":')
    assert assert_v1_json(res) == {"channels": ["c1"], "producers": [peer]}
    assert lookupd.get("/lookup?topic=t2").json() == {"channels": [], "producers": [peer]}
    assert sorted(lookupd.get("/topics").json()["topics"]) == ["t1", "t2"]
    assert lookupd.get("/channels?topic=t1").json() == {"channels": ["c1"]}

    nodes = assert_v1_json(lookupd.get("/nodes"))["producers"]
    assert len(nodes) == 1
    node = nodes[0]
    assert list(node) == ["remote_address", "hostname", "broadcast_address", "tcp_port",
                          "http_port", "version", "topology_zone", "topology_region",
                          "tombstones", "topics"]
    assert sorted(node["topics"]) == ["t1", "t2"]
    assert node["tombstones"] == [False, False]
    assert {k: node[k] for k in peer} == peer

    debug = assert_v1_json(lookupd.get("/debug"))
    assert sorted(debug) == ["channel:t1:c1", "client::", "topic:t1:", "topic:t2:"]
    entry = debug["topic:t1:"][0]
    assert list(entry) == sorted(entry)  # Go marshals maps with sorted keys
    assert entry["id"] == me
    assert entry["tombstoned"] is False
    assert entry["tombstoned_at"] == -6795364578871345152  # Go's zero time.Time.UnixNano()
    assert abs(entry["last_update"] - time.time_ns()) < 30e9


def test_unregister_semantics(lookupd, v1):
    client = v1(lookupd.tcp_port)
    client.identify()
    for line in ("REGISTER t c1", "REGISTER t c2", "REGISTER t c#ephemeral",
                 "REGISTER e#ephemeral", "REGISTER keep"):
        assert client.command(line) == b"OK"
    # channel unregistration keeps the (now empty) channel, except ephemeral ones
    assert client.command("UNREGISTER t c1") == b"OK"
    assert client.command("UNREGISTER t c#ephemeral") == b"OK"
    assert sorted(lookupd.get("/channels?topic=t").json()["channels"]) == ["c1", "c2"]
    assert "channel:t:c1" not in lookupd.get("/debug").json()
    assert len(lookupd.get("/lookup?topic=t").json()["producers"]) == 1
    # unregistering unknown things is fine
    assert client.command("UNREGISTER nothere") == b"OK"
    assert client.command("UNREGISTER nothere c") == b"OK"
    # topic unregistration removes the peer from the topic's channels too
    assert client.command("UNREGISTER t") == b"OK"
    debug = lookupd.get("/debug").json()
    assert not any(k.startswith(("channel:t:", "topic:t:")) for k in debug), debug
    assert lookupd.get("/lookup?topic=t").json()["producers"] == []
    assert "t" in lookupd.get("/topics").json()["topics"]
    # an ephemeral topic disappears with its last producer
    assert client.command("UNREGISTER e#ephemeral") == b"OK"
    assert sorted(lookupd.get("/topics").json()["topics"]) == ["keep", "t"]
    assert lookupd.get("/nodes").json()["producers"][0]["topics"] == ["keep"]


def test_disconnect_unregisters_everything(lookupd, v1):
    a = v1(lookupd.tcp_port)
    a.identify(broadcast_address="a")
    b = v1(lookupd.tcp_port)
    b.identify(broadcast_address="b")
    for client in (a, b):
        assert client.command("REGISTER t c") == b"OK"
    assert producer_ids(lookupd, "t") == sorted([a.local_address, b.local_address])
    assert len(lookupd.get("/nodes").json()["producers"]) == 2
    a.close()
    helpers_wait(lambda: producer_ids(lookupd, "t") == [b.local_address])
    nodes = lookupd.get("/nodes").json()["producers"]
    assert [n["broadcast_address"] for n in nodes] == ["b"]
    b.close()
    helpers_wait(lambda: producer_ids(lookupd, "t") == [])
    # the registrations themselves remain
    assert lookupd.get("/topics").json() == {"topics": ["t"]}
    assert lookupd.get("/channels?topic=t").json() == {"channels": ["c"]}
    assert lookupd.get("/nodes").json() == {"producers": []}
    assert lookupd.get("/debug").json() == {}


def helpers_wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_pipelined_commands_get_replies_in_order(lookupd, v1):
    client = v1(lookupd.tcp_port)
    body = json.dumps({"version": "1.3.0", "tcp_port": 1, "http_port": 2,
                       "broadcast_address": "x"}).encode()
    lines = b"".join(b"REGISTER p%d\n" % i for i in range(200))
    client.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body + lines + b"PING\n")
    assert client.read_response().startswith(b"{")
    for _ in range(201):
        assert client.read_response() == b"OK"
    assert len(lookupd.get("/topics").json()["topics"]) == 200


def test_ping_before_identify_is_ok(lookupd, v1):
    client = v1(lookupd.tcp_port)
    assert client.command("PING") == b"OK"
    assert client.command(" PING \r") == b"OK"


# --- TCP errors: reply, close, process survives -------------------------------------------------


def assert_fatal(lookupd, client, expected: bytes):
    assert client.read_response() == expected
    assert client.expect_closed() == b""
    assert lookupd.get("/ping").status == 200


def test_bad_magic(lookupd, v1):
    client = v1(lookupd.tcp_port, magic=b"  V2")
    assert_fatal(lookupd, client, b"E_BAD_PROTOCOL")
    assert "bad protocol magic '  V2'" in lookupd.log()


def test_magic_only_then_close(lookupd, v1):
    client = v1(lookupd.tcp_port, magic=b"  V")
    client.sock.shutdown(socket.SHUT_WR)
    assert client.expect_closed() == b""
    assert lookupd.get("/ping").status == 200


@pytest.mark.parametrize("data,expected", [
    (b"FOO\n", b"E_INVALID invalid command FOO"),
    (b"\n", b"E_INVALID invalid command "),
    (b"REGISTER t\n", b"E_INVALID client must IDENTIFY"),
    (b"UNREGISTER t c\n", b"E_INVALID client must IDENTIFY"),
    (b"IDENTIFY\n\x00\x00\x00\x02{}", b"E_BAD_BODY IDENTIFY missing fields"),
    (b"IDENTIFY\n\x00\x00\x00\x04nope", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"IDENTIFY\n\x00\x00\x00\x00", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"IDENTIFY\n\x00\x00\x00\x02[]", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"IDENTIFY\n\xff\xff\xff\xff", b"E_BAD_BODY IDENTIFY invalid body size -1"),
    (b"IDENTIFY\n\x7f\xff\xff\xff", b"E_BAD_BODY IDENTIFY body too big 2147483647 > 5242880"),
])
def test_fatal_errors_before_identify(lookupd, v1, data, expected):
    client = v1(lookupd.tcp_port)
    client.send(data)
    assert_fatal(lookupd, client, expected)


@pytest.mark.parametrize("line,expected", [
    (b"IDENTIFY\n", b"E_INVALID cannot IDENTIFY again"),
    (b"REGISTER\n", b"E_INVALID REGISTER insufficient number of params"),
    (b"UNREGISTER\n", b"E_INVALID UNREGISTER insufficient number of params"),
    (b"REGISTER bad!topic\n", b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid"),
    (b"UNREGISTER t bad!chan\n", b"E_BAD_CHANNEL UNREGISTER channel name 'bad!chan' is not valid"),
    (b"REGISTER t\xff\n", b"E_BAD_TOPIC REGISTER topic name 't\xff' is not valid"),
    (b"register t\n", b"E_INVALID invalid command register"),
])
def test_fatal_errors_after_identify_drop_registrations(lookupd, v1, line, expected):
    client = v1(lookupd.tcp_port)
    client.identify()
    assert client.command("REGISTER before") == b"OK"
    assert producer_ids(lookupd, "before") == [client.local_address]
    client.send(line)
    assert_fatal(lookupd, client, expected)
    helpers_wait(lambda: producer_ids(lookupd, "before") == [])
    assert lookupd.get("/nodes").json() == {"producers": []}


def test_replies_before_error_are_delivered(lookupd, v1):
    client = v1(lookupd.tcp_port)
    client.send(b"PING\nPING\nNOPE\nPING\n")
    assert client.read_response() == b"OK"
    assert client.read_response() == b"OK"
    assert_fatal(lookupd, client, b"E_INVALID invalid command NOPE")


@pytest.mark.parametrize("sent,expected", [
    (b"IDENTIFY\n", b"E_BAD_BODY IDENTIFY failed to read body size"),
    (b"IDENTIFY\n\x00\x00", b"E_BAD_BODY IDENTIFY failed to read body size"),
    (b"IDENTIFY\n\x00\x00\x00\x10{\"ver", b"E_BAD_BODY IDENTIFY failed to read body"),
])
def test_identify_truncated_by_eof(lookupd, v1, sent, expected):
    client = v1(lookupd.tcp_port)
    client.send(sent)
    client.sock.shutdown(socket.SHUT_WR)
    assert_fatal(lookupd, client, expected)


def test_line_too_long_closes_silently(lookupd, v1):
    client = v1(lookupd.tcp_port)
    try:
        client.send(b"REGISTER " + b"x" * (20 * 1024))
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert client.expect_closed() == b""
    assert lookupd.get("/ping").status == 200


def test_garbage_never_kills_it(lookupd):
    rnd = random.Random(1234)
    for i in range(60):
        with socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=5) as s:
            prefix = b"  V1" if i % 2 else b""
            if i % 3 == 0:
                prefix += b"IDENTIFY\n"
            blob = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 600)))
            try:
                s.sendall(prefix + blob)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
            except OSError:
                pass
    assert lookupd.get("/ping").status == 200
    assert lookupd.get("/nodes").json() == {"producers": []}


def test_many_malformed_identify_bodies(lookupd, v1):
    bodies = [b'{"tcp_port":"x"}', b'{"version":1}', b'{"a":' * 50, b'\xff\xfe', b'{"tcp_port":1e309}',
              b'{' + b'"k":{' * 2000 + b'}' * 2001, b'{"version":"1","tcp_port":1,"http_port":2,'
              b'"broadcast_address":""}']
    for body in bodies:
        client = v1(lookupd.tcp_port)
        reply = client.identify_raw(body)
        assert reply.startswith(b"E_BAD_BODY IDENTIFY "), reply
        assert client.expect_closed() == b""
    assert lookupd.get("/ping").status == 200


# --- inactivity and tombstones ------------------------------------------------------------------


def test_inactive_producer_timeout(lookupd_factory, v1):
    proc = lookupd_factory("--inactive-producer-timeout=1s")
    client = v1(proc.tcp_port)
    client.identify()
    assert client.command("REGISTER t c") == b"OK"
    assert producer_ids(proc, "t") == [client.local_address]
    assert len(proc.get("/nodes").json()["producers"]) == 1
    time.sleep(1.3)
    assert producer_ids(proc, "t") == []
    assert proc.get("/nodes").json() == {"producers": []}
    # still registered (visible in /debug and /topics), just inactive
    assert "topic:t:" in proc.get("/debug").json()
    assert proc.get("/lookup?topic=t").json()["channels"] == ["c"]
    assert client.command("PING") == b"OK"
    assert producer_ids(proc, "t") == [client.local_address]
    assert len(proc.get("/nodes").json()["producers"]) == 1


def test_tombstone(lookupd_factory, v1):
    proc = lookupd_factory("--tombstone-lifetime=1s")
    a = v1(proc.tcp_port)
    a.identify(broadcast_address="10.0.0.1", http_port=4151)
    b = v1(proc.tcp_port)
    b.identify(broadcast_address="10.0.0.2", http_port=4151)
    for client in (a, b):
        assert client.command("REGISTER t c") == b"OK"
        assert client.command("REGISTER other") == b"OK"

    assert_error(proc.post("/topic/tombstone"), 400, "MISSING_ARG_TOPIC")
    assert_error(proc.post("/topic/tombstone?topic=t"), 400, "MISSING_ARG_NODE")
    assert_v1_empty(proc.post("/topic/tombstone?topic=t&node=10.0.0.9:4151"))  # no match: no-op
    assert len(proc.get("/lookup?topic=t").json()["producers"]) == 2

    assert_v1_empty(proc.post("/topic/tombstone?topic=t&node=10.0.0.1:4151"))
    producers = proc.get("/lookup?topic=t").json()["producers"]
    assert [p["broadcast_address"] for p in producers] == ["10.0.0.2"]
    assert len(proc.get("/lookup?topic=other").json()["producers"]) == 2  # per topic only
    nodes = {n["broadcast_address"]: n for n in proc.get("/nodes").json()["producers"]}
    assert set(nodes) == {"10.0.0.1", "10.0.0.2"}  # /nodes keeps tombstoned producers
    tomb = dict(zip(nodes["10.0.0.1"]["topics"], nodes["10.0.0.1"]["tombstones"]))
    assert tomb == {"t": True, "other": False}
    assert not any(nodes["10.0.0.2"]["tombstones"])
    debug = proc.get("/debug").json()
    entry = next(e for e in debug["topic:t:"] if e["broadcast_address"] == "10.0.0.1")
    assert entry["tombstoned"] is True and abs(entry["tombstoned_at"] - time.time_ns()) < 30e9

    # re-registering does not clear a tombstone
    assert a.command("REGISTER t") == b"OK"
    assert len(proc.get("/lookup?topic=t").json()["producers"]) == 1
    time.sleep(1.2)  # lifetime over: visible again
    assert len(proc.get("/lookup?topic=t").json()["producers"]) == 2
    nodes = {n["broadcast_address"]: n for n in proc.get("/nodes").json()["producers"]}
    assert not any(nodes["10.0.0.1"]["tombstones"])
    # the flag is kept, just no longer effective
    assert any(e["tombstoned"] for e in proc.get("/debug").json()["topic:t:"])


def test_tombstone_then_unregister_workflow(lookupd, v1):
    client = v1(lookupd.tcp_port)
    client.identify(broadcast_address="10.0.0.1", http_port=4151)
    assert client.command("REGISTER t") == b"OK"
    assert_v1_empty(lookupd.post("/topic/tombstone?topic=t&node=10.0.0.1:4151"))
    assert lookupd.get("/lookup?topic=t").json()["producers"] == []
    assert client.command("UNREGISTER t") == b"OK"
    assert "topic:t:" not in lookupd.get("/debug").json()
    # registering again creates a fresh, untombstoned producer
    assert client.command("REGISTER t") == b"OK"
    assert len(lookupd.get("/lookup?topic=t").json()["producers"]) == 1


def test_http_topic_delete_drops_live_registrations(lookupd, v1):
    client = v1(lookupd.tcp_port)
    client.identify()
    assert client.command("REGISTER t c") == b"OK"
    assert_v1_empty(lookupd.post("/topic/delete?topic=t"))
    assert lookupd.get("/topics").json() == {"topics": []}
    assert lookupd.get("/nodes").json()["producers"][0]["topics"] == []
    # the connection is unaffected; unregistering a deleted topic is fine
    assert client.command("UNREGISTER t c") == b"OK"
    assert client.command("PING") == b"OK"


def test_no_processes_left_behind(lookupd_factory):
    procs = [lookupd_factory() for _ in range(3)]
    pids = [p.pid for p in procs]
    for p in procs:
        assert p.stop() == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_wildcards_behave_like_upstream(lookupd, v1):
    """Upstream's DB treats "*" as a wildcard and the read/delete endpoints do not validate names."""
    a = v1(lookupd.tcp_port)
    a.identify(broadcast_address="10.0.0.1", http_port=4151)
    b = v1(lookupd.tcp_port)
    b.identify(broadcast_address="10.0.0.2", http_port=4151)
    assert a.command("REGISTER t1 c1") == b"OK"
    assert b.command("REGISTER t2 c2") == b"OK"
    doc = lookupd.get("/lookup?topic=*").json()
    assert sorted(doc["channels"]) == ["c1", "c2"]
    assert sorted(p["broadcast_address"] for p in doc["producers"]) == ["10.0.0.1", "10.0.0.2"]
    assert sorted(lookupd.get("/channels?topic=*").json()["channels"]) == ["c1", "c2"]
    assert_v1_empty(lookupd.post("/topic/tombstone?topic=*&node=10.0.0.2:4151"))
    assert [p["broadcast_address"] for p in lookupd.get("/lookup?topic=t2").json()["producers"]] == []
    assert_v1_empty(lookupd.post("/topic/delete?topic=*"))
    assert lookupd.get("/topics").json() == {"topics": []}
    assert lookupd.get("/channels?topic=*").json() == {"channels": []}
    assert a.command("PING") == b"OK" and b.command("PING") == b"OK"


def test_connect_and_close_without_magic(lookupd):
    with socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=5):
        pass
    helpers_wait(lambda: "failed to read protocol version" in lookupd.log())
    assert lookupd.get("/ping").status == 200
