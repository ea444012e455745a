"""nsqadmin's API answers exactly as upstream v1.3.0's nsqadmin, on one cluster (issue #27).

nsqlookupd, one upstream nsqd and one of ours; upstream's nsqadmin and ours run with the same
flags and answer the same requests: every GET route of the API in a cluster with topics on both
nodes and on one only, paused channels, consumers with messages in flight, e2e percentiles,
tombstones and inactive topics; every action (create, pause, unpause, empty, delete, tombstone)
and its refusals, on mirrored topics, with the state it leaves behind and the notifications it
sends; ``/config`` read and written. Without upstream's binaries a second nsqd of ours stands in
for upstream's and upstream nsqadmin's answers come from
``tests/recordings/http/test_upstream_diff.json`` (``admin.upstream_util``).
"""

from __future__ import annotations

import json
import queue
import socket
import struct
from typing import Any

import pytest

from admin.admin_util import ADMIN_USER, request, wait_until
from admin.upstream_util import (Answer, PairCluster, RecordedAnswers, answer, canonical,
                                 rename, same_answer, start_pair_cluster)
from helpers.recording import recording
from helpers.servers import free_port
from helpers.wire import Wire
from nsqpy.admin.options import config_flags

pytestmark = pytest.mark.timeout(180)
RECORDED = RecordedAnswers(recording("http", "test_upstream_diff"))

AS_ADMIN = {"X-Forwarded-User": ADMIN_USER, "User-Agent": "diff-test/1.0"}
E2E = ("--e2e-processing-latency-percentile=0.99", "--e2e-processing-latency-percentile=0.5")


def post(address: str, path: str, body: bytes = b"") -> None:
    resp = request(f"http://{address}{path}", "POST", body)
    assert resp.status == 200, (address, path, resp)


def registered(cl: PairCluster, topic: str, nodes: int = 2) -> bool:
    resp = request(f"http://{cl.lookupd.http_address}/lookup?topic={topic}")
    return resp.status == 200 and len(resp.json()["producers"]) == nodes


def make_topic(cl: PairCluster, topic: str, channels: tuple[str, ...] = ("ch",),
               messages: int = 2, nodes: list[Any] | None = None) -> None:
    """The topic with its channels and ``messages`` messages on each node, registered."""
    nodes = cl.nodes if nodes is None else nodes
    for node in nodes:
        post(node.http_address, f"/topic/create?topic={topic}")
        for ch in channels:
            post(node.http_address, f"/channel/create?topic={topic}&channel={ch}")
        if messages:
            post(node.http_address, f"/mpub?topic={topic}",
                 b"\n".join(b"m%d" % i for i in range(messages)))
    wait_until(lambda: registered(cl, topic, len(nodes)), what=f"{topic} registered")
    for node in nodes:
        for ch in channels:
            wait_until(lambda: _depth(node, topic, ch) == messages, what=f"{topic}/{ch} filled")


def _depth(node: Any, topic: str, channel: str) -> int:
    doc = request(f"http://{node.http_address}/stats?format=json&topic={topic}").json()
    for t in doc.get("topics") or ():
        for c in t.get("channels") or ():
            if c["channel_name"] == channel:
                return int(c["depth"])
    return -1


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    cl = start_pair_cluster(tmp_path_factory.mktemp("pair"), f"--admin-user={ADMIN_USER}",
                            nsqd_flags=E2E)
    consumers: list[Wire] = []
    dead = None
    try:
        make_topic(cl, "shared", ("c1", "c2"), messages=3)
        post(cl.up_nsqd.http_address, "/channel/pause?topic=shared&channel=c2")
        make_topic(cl, "only_up", ("x",), messages=1, nodes=[cl.up_nsqd])
        make_topic(cl, "only_py", ("y",), messages=0, nodes=[cl.py_nsqd])
        make_topic(cl, "tomb", (), messages=0)
        post(cl.lookupd.http_address,
             f"/topic/tombstone?topic=tomb&node={cl.py_nsqd.http_address}")
        post(cl.lookupd.http_address, "/topic/create?topic=ghost")
        post(cl.lookupd.http_address, "/channel/create?topic=ghost&channel=gc")
        for node, name in ((cl.up_nsqd, "up"), (cl.py_nsqd, "py")):
            w = Wire(node.tcp_address)
            w.identify(client_id=f"id-{name}", hostname=f"host-{name}", user_agent="diff/1")
            w.sub("shared", "c1", rdy=1)
            w.cmd(b"FIN", w.read_message().id.decode())
            w.read_message()
            consumers.append(w)
        dead = register_dead_node(cl, "crashed")
        # on each node: one message finished, one in flight, one queued
        wait_until(lambda: all(_in_flight(n) == 1 and _depth(n, "shared", "c1") == 1
                               for n in cl.nodes), what="FIN counted")
        yield cl
    finally:
        for w in consumers:
            w.close()
        if dead is not None:
            dead.close()
        cl.stop()


def register_dead_node(cl: PairCluster, topic: str) -> socket.socket:
    """An nsqd that nsqlookupd lists but whose HTTP port refuses connections (the process
    crashed after registering): every query to it fails, so the answers carry warnings."""
    dead_port = free_port()  # nothing listens there
    host, port = cl.lookupd.tcp_address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    ident = json.dumps({"broadcast_address": "127.0.0.1", "tcp_port": dead_port,
                        "http_port": dead_port, "version": "1.3.0",
                        "hostname": "zz-crashed"}).encode()
    sock.sendall(b"  V1IDENTIFY\n" + struct.pack(">i", len(ident)) + ident
                 + f"REGISTER {topic}\n".encode())
    wait_until(lambda: registered(cl, topic, 1), what="the dead node registered")
    cl.dead_port = dead_port
    return sock


def _in_flight(node: Any) -> int:
    doc = request(f"http://{node.http_address}/stats?format=json&topic=shared&channel=c1").json()
    return int(doc["topics"][0]["channels"][0]["in_flight_count"])


def assert_same(cl: PairCluster, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Answer:
    ours = lambda: answer(cl.py_admin.http_port, method, path, body, headers)  # noqa: E731
    if cl.up_admin is None:
        mine = ours()
        RECORDED.compare(cl, f"{method} {path} {body!r}", mine, lambda: None)
        return mine
    up_port = cl.up_admin.http_port
    mine, theirs = same_answer(ours, lambda: answer(up_port, method, path, body, headers))
    RECORDED.compare(cl, f"{method} {path} {body!r}", mine, lambda: theirs)
    return mine


# --- reading -----------------------------------------------------------------------------------

READS = ["/api/topics", "/api/topics?inactive=true", "/api/topics?inactive=false",
         "/api/topics/shared", "/api/topics/only_up", "/api/topics/only_py", "/api/topics/tomb",
         "/api/topics/ghost", "/api/topics/nope", "/api/topics/shared/c1",
         "/api/topics/shared/c2", "/api/topics/only_up/x", "/api/topics/shared/nope",
         "/api/topics/nope/nope", "/api/nodes", "/api/nodes/nope", "/api/counter",
         "/api/topics/bad%20name", "/api/graphite", "/api/graphite?metric=rate",
         "/api/graphite?metric=rate&target=x", "/api/graphite?metric=depth", "/ping",
         "/fonts/none.woff", "/static/nope.js", "/api/topics/shared?x=1",
         "/api/topics/crashed", "/api/topics/crashed/c"]


@pytest.mark.parametrize("path", READS)
def test_get_matches_upstream(pair, path):
    doc = assert_same(pair, "GET", path)
    assert doc.status in (200, 400, 404, 500, 502)


def test_node_pages_match_upstream(pair):
    producers = request(f"{pair.py_admin.url}/api/nodes").json()["nodes"]
    crashed = next(p for p in producers if p["hostname"] == "zz-crashed")
    got = assert_same(pair, "GET", f"/api/nodes/127.0.0.1:{crashed['http_port']}")
    assert got.status == 502 and "connection refused" in got.body["message"]
    for node in pair.nodes:
        doc = assert_same(pair, "GET", f"/api/nodes/{node.http_address}").body
        assert doc["node"] == node.http_address and doc["topics"]
        for topic in doc["topics"]:
            assert "delivery_msg_count" not in topic


def test_topic_channel_nodes_list_node_stats(pair):
    """The two fields the issue found: no ``delivery_msg_count``; ``nodes[].channels[].nodes``
    is upstream's list, not null."""
    doc = assert_same(pair, "GET", "/api/topics/shared").body
    assert "delivery_msg_count" not in doc
    first, second = doc["nodes"]
    assert "delivery_msg_count" not in first
    assert [c["nodes"] for c in first["channels"]] == [[c] for c in second["channels"]]


def test_config_reads_match_upstream(pair):
    assert_same(pair, "GET", "/config/nope")
    for opt in sorted(config_flags()):
        assert_same(pair, "GET", f"/config/{opt}")


@pytest.mark.parametrize("opt, body", [
    ("log_level", b"debug"), ("log_level", b"info"), ("log_level", b"loud"), ("log_level", b""),
    ("nsqlookupd_http_addresses", b"null"), ("nsqlookupd_http_addresses", b'"x"'),
    ("nsqlookupd_http_addresses", b"[1]"), ("statsd_prefix", b"x"), ("nope", b"1"),
])
def test_config_writes_match_upstream(pair, opt, body):
    assert_same(pair, "PUT", f"/config/{opt}", body)
    if opt == "nsqlookupd_http_addresses":  # put the cluster back for the other tests
        addrs = json.dumps([pair.lookupd.http_address]).encode()
        assert_same(pair, "PUT", f"/config/{opt}", addrs)
    if opt == "log_level":
        assert_same(pair, "PUT", "/config/log_level", b"info")


# --- actions -----------------------------------------------------------------------------------

def _setup_none(cl: PairCluster, name: str) -> None:
    pass


def _setup_lookupd_only(cl: PairCluster, name: str) -> None:
    post(cl.lookupd.http_address, f"/topic/create?topic={name}")


def _setup_topic(cl: PairCluster, name: str) -> None:
    make_topic(cl, name, ("ch",), messages=2)


def _setup_paused(cl: PairCluster, name: str) -> None:
    make_topic(cl, name, ("ch",), messages=2)
    for node in cl.nodes:
        post(node.http_address, f"/topic/pause?topic={name}")
        post(node.http_address, f"/channel/pause?topic={name}&channel=ch")


ACTIONS = [
    # (case, setup, method, path, body)
    ("create topic", _setup_none, "POST", "/api/topics", {"topic": "{t}"}),
    ("create topic and channel", _setup_topic, "POST", "/api/topics",
     {"topic": "{t}", "channel": "new"}),
    ("create channel without producers", _setup_lookupd_only, "POST", "/api/topics",
     {"topic": "{t}", "channel": "new"}),
    ("create invalid topic", _setup_none, "POST", "/api/topics", {"topic": "bad!{t}"}),
    ("create invalid channel", _setup_none, "POST", "/api/topics",
     {"topic": "{t}", "channel": "bad!"}),
    ("create empty body", _setup_none, "POST", "/api/topics", b""),
    ("create junk body", _setup_none, "POST", "/api/topics", b"{junk"),
    ("create array body", _setup_none, "POST", "/api/topics", b"[]"),
    ("create number topic", _setup_none, "POST", "/api/topics", b'{"topic": 1}'),
    ("pause topic", _setup_topic, "POST", "/api/topics/{t}", {"action": "pause"}),
    ("unpause topic", _setup_paused, "POST", "/api/topics/{t}", {"action": "unpause"}),
    ("empty topic", _setup_topic, "POST", "/api/topics/{t}", {"action": "empty"}),
    ("pause channel", _setup_topic, "POST", "/api/topics/{t}/ch", {"action": "pause"}),
    ("unpause channel", _setup_paused, "POST", "/api/topics/{t}/ch", {"action": "unpause"}),
    ("empty channel", _setup_topic, "POST", "/api/topics/{t}/ch", {"action": "empty"}),
    ("pause missing channel", _setup_topic, "POST", "/api/topics/{t}/nope", {"action": "pause"}),
    ("bogus action", _setup_topic, "POST", "/api/topics/{t}", {"action": "bogus"}),
    ("no action", _setup_topic, "POST", "/api/topics/{t}/ch", b"{}"),
    ("action junk body", _setup_topic, "POST", "/api/topics/{t}", b"nope"),
    ("pause unknown topic", _setup_none, "POST", "/api/topics/{t}", {"action": "pause"}),
    ("pause topic without producers", _setup_lookupd_only, "POST", "/api/topics/{t}",
     {"action": "pause"}),
    ("delete topic", _setup_topic, "DELETE", "/api/topics/{t}", None),
    ("delete channel", _setup_topic, "DELETE", "/api/topics/{t}/ch", None),
    ("delete unknown topic", _setup_none, "DELETE", "/api/topics/{t}", None),
    ("delete topic without producers", _setup_lookupd_only, "DELETE", "/api/topics/{t}", None),
    ("delete unknown channel", _setup_topic, "DELETE", "/api/topics/{t}/nope", None),
    ("tombstone node", _setup_topic, "DELETE", "/api/nodes/{node}", {"topic": "{t}"}),
    ("tombstone unknown node", _setup_topic, "DELETE", "/api/nodes/127.0.0.1:1",
     {"topic": "{t}"}),
    ("tombstone invalid topic", _setup_none, "DELETE", "/api/nodes/{node}", {"topic": "b@d"}),
    ("tombstone junk body", _setup_none, "DELETE", "/api/nodes/{node}", b"]"),
]


def _body(spec: Any, name: str) -> bytes | None:
    if spec is None:
        return None
    if isinstance(spec, bytes):
        return spec
    return json.dumps({k: v.replace("{t}", name) for k, v in spec.items()}).encode()


def _state(cl: PairCluster, name: str) -> dict[str, Any]:
    """What the cluster holds for ``name``, read the same way for both sides."""
    lk = f"http://{cl.lookupd.http_address}"
    lookup = request(f"{lk}/lookup?topic={name}")
    producers = sorted(p["http_port"] for p in lookup.json()["producers"]) \
        if lookup.status == 200 else None
    nodes = {}
    for node, side in ((cl.up_nsqd, "up"), (cl.py_nsqd, "py")):
        doc = request(f"http://{node.http_address}/stats?format=json&topic={name}").json()
        nodes[side] = [{"paused": t["paused"], "depth": t["depth"],
                        "channels": [(c["channel_name"], c["paused"], c["depth"])
                                     for c in t.get("channels") or ()]}
                       for t in doc.get("topics") or () if t["topic_name"] == name]
    return {"in_lookupd": name in (request(f"{lk}/topics").json()["topics"] or ()),
            "channels": request(f"{lk}/channels?topic={name}").json().get("channels"),
            "producers": producers, "nodes": nodes,
            "tombstones": [p.get("tombstones") for p in request(f"{lk}/nodes").json()["producers"]
                           if name in (p.get("topics") or ())]}


def _notifications(cl: PairCluster, settle: float = 0.6) -> list[dict[str, Any]]:
    """Every notification received until none came for ``settle`` seconds."""
    docs = []
    while True:
        try:
            docs.append(cl.sink.received.get(timeout=settle))
        except queue.Empty:
            return docs


def _masked_notification(doc: dict[str, Any], name: str) -> dict[str, Any]:
    doc = rename(doc, name, "<t>")
    doc["timestamp"] = "<clock>"
    doc["remote_ip"] = doc["remote_ip"].rsplit(":", 1)[0]
    doc["url"] = doc["url"].split("/", 3)[3]
    return doc


@pytest.mark.parametrize("case, setup, method, path, body", ACTIONS, ids=[a[0] for a in ACTIONS])
def test_action_matches_upstream(pair, case, setup, method, path, body):
    stamp = [a[0] for a in ACTIONS].index(case)  # the same names in every run (recordings)
    names = {"py": f"act_py_{stamp}", "up": f"act_up_{stamp}"}
    for name in names.values():
        setup(pair, name)
    _notifications(pair, 0.1)
    # without upstream's nsqadmin ours takes both sides' actions, so the cluster (nsqlookupd's
    # tombstones, its topics) changes as it did when upstream's answers were recorded
    admins = {"py": pair.py_admin, "up": pair.up_admin or pair.py_admin}
    sides = list(admins)
    results = {}
    for side in sides:
        name = names[side]
        target = path.replace("{t}", name).replace("{node}", pair.py_nsqd.http_address)
        got = answer(admins[side].http_port, method, target, _body(body, name), AS_ADMIN)
        results[side] = rename(got.body, name, "<t>"), got.status, got.headers

    def states() -> dict[str, Any]:
        return {side: rename(_state(pair, names[side]), names[side], "<t>") for side in sides}

    # what the action left behind (nsqd tells nsqlookupd in the background): side by side live,
    # else against the recorded state, which is the settled one
    recorded = None if pair.up_admin else RECORDED.recording.answer(
        RECORDED.case(pair, "action"), lambda: None)
    try:
        wait_until(lambda: (lambda s: canonical(s["py"], pair.roles()) == recorded[1] if recorded
                            else s["py"] == s["up"])(states()), timeout=30)
    except AssertionError:
        pass
    now = states()
    sent = _notifications(pair)
    by_side = {side: _sorted([_masked_notification(d, names[side]) for d in sent
                              if names[side] in json.dumps(d)]) for side in sides}
    # upstream posts each notification from its own goroutine: a topic's and its channel's
    # may arrive in either order, so they are compared as a multiset (sorted)
    ours = (results["py"], now["py"], by_side["py"])
    if pair.up_admin is not None:
        RECORDED.compare(pair, "action", ours, lambda: (results["up"], now["up"], by_side["up"]))
    else:
        assert canonical(ours, pair.roles()) == recorded, case


def _sorted(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(docs, key=lambda doc: json.dumps(doc, sort_keys=True))


BODIES = [b"", b" ", b"{junk", b"[]", b"nope", b'{"action":"x"}', b"1x", b"-", b'{"a":1,}', b'"s"',
          b"true", b'{"action":[1]}', b'{"action":{}}', b"{}", b"null", b'{"Action":"x"}',
          b'{"x":1e}', b'{"x":"\\q"}', b'{"x" 1}', b"[1 2]", b'{"x":1 2}', b"\x01", b"\xc3",
          b'{"x":"\\u12g4"}', b"tru", b"[", b'{"a":"b"', b"0.e1", b"-x", b"'", b'{"x":"\x01"}',
          b'{"action":true} trailing', b'{"action":null}', b"01"]


@pytest.mark.parametrize("body", BODIES)
def test_action_bodies_decode_as_upstream(pair, body):
    """Go's JSON decoder, error texts included; none of these acts (no valid action)."""
    got = assert_same(pair, "POST", "/api/topics/shared/c1", body, AS_ADMIN)
    assert got.status == 400


def test_actions_are_refused_to_non_admins(pair):
    for method, path, body in (("POST", "/api/topics", b'{"topic":"x"}'),
                               ("POST", "/api/topics/shared", b'{"action":"pause"}'),
                               ("POST", "/api/topics/shared/c1", b'{"action":"empty"}'),
                               ("DELETE", "/api/topics/shared", None),
                               ("DELETE", "/api/topics/shared/c1", None),
                               ("DELETE", f"/api/nodes/{pair.py_nsqd.http_address}",
                                b'{"topic":"shared"}')):
        got = assert_same(pair, method, path, body, {"X-Forwarded-User": "mallory"})
        assert got.status == 403
    assert _depth(pair.py_nsqd, "shared", "c1") >= 0  # nothing was done


# --- nsqadmin given the nsqd directly ------------------------------------------------------------

@pytest.fixture(scope="module")
def direct(tmp_path_factory):
    cl = start_pair_cluster(tmp_path_factory.mktemp("direct"), direct=True)
    try:
        make_topic(cl, "both", ("c",), messages=2)
        make_topic(cl, "one", ("c",), messages=1, nodes=[cl.py_nsqd])
        yield cl
    finally:
        cl.stop()


@pytest.mark.parametrize("path", ["/api/topics", "/api/topics?inactive=true", "/api/topics/both",
                                  "/api/topics/one", "/api/topics/nope", "/api/topics/both/c",
                                  "/api/nodes", "/api/counter"])
def test_direct_mode_matches_upstream(direct, path):
    assert_same(direct, "GET", path)


def test_direct_mode_node_and_actions(direct):
    for node in direct.nodes:
        assert_same(direct, "GET", f"/api/nodes/{node.http_address}")
    # actions go to the nsqd that hold the topic; nsqlookupd is not asked
    for side in ("py", "up"):
        make_topic(direct, f"d_{side}", ("c",), messages=1)
    for side, admin in (("py", direct.py_admin), ("up", direct.up_admin)):
        if admin is None:  # upstream's (its answer is the one asserted here)
            continue
        got = answer(admin.http_port, "POST", f"/api/topics/d_{side}/c", b'{"action":"empty"}')
        assert (got.status, got.body) == (200, {"message": ""})
        assert all(_depth(n, f"d_{side}", "c") == 0 for n in direct.nodes)


def test_partial_failures_warn_as_upstream(pair):
    """The crashed node: pages that ask every node answer with upstream's warning text."""
    doc = assert_same(pair, "GET", "/api/counter").body
    assert doc["message"].startswith("WARNING: Get \"http://127.0.0.1:")
    assert doc["message"].endswith("connect: connection refused")
    assert doc["stats"]
    doc = assert_same(pair, "GET", "/api/topics/crashed").body
    assert doc["message"].startswith("UPSTREAM_ERROR: failed to query any nsqd: Get ")
