"""The topology fields of upstream's unreleased master stay out of every v1.3.0 answer.

v1.3.0 has no ``--topology-region``/``--topology-zone``/``--enable-experiment`` and no
``topology_*`` keys in nsqd ``/info``, ``/stats`` clients, or nsqlookupd ``/lookup``, ``/nodes``,
``/debug``. nsqpy accepts the flags (hidden from ``--help``) and shows the fields only when the
operator sets a topology label. Real nsqd and nsqlookupd processes, real sockets.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from helpers.servers import VENV_BIN, Nsqd, Nsqlookupd, unique_name
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(90)

POST_130_FLAGS = ("topology-region", "topology-zone", "enable-experiment")


def get_json(address: str, path: str) -> dict:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as resp:
        return json.loads(resp.read())


def wait_registered(lookupd: Nsqlookupd, topic: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            doc = get_json(lookupd.http_address, f"/lookup?topic={topic}")
            if doc["producers"]:
                return doc
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"topic {topic} never registered")


def has_topology_key(doc) -> bool:
    return "topology_" in json.dumps(doc)


@pytest.fixture
def cluster(tmp_path, request):
    extra = getattr(request, "param", ())
    lookupd = Nsqlookupd(tmp_path / "lookupd")
    node = Nsqd(tmp_path / "nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}", *extra)
    yield node, lookupd
    node.stop()
    lookupd.stop()


def publish_and_subscribe(node: Nsqd, topic: str) -> tuple[Wire, Wire]:
    producer = Wire(node.tcp_address)
    producer.identify(client_id="prod", topology_zone="zc", topology_region="rc")
    producer.pub(topic, b"m")
    consumer = Wire(node.tcp_address)
    consumer.identify(client_id="cons", topology_zone="zc", topology_region="rc")
    consumer.sub(topic, "ch")
    return producer, consumer


def test_no_topology_fields_by_default(cluster):
    node, lookupd = cluster
    topic = unique_name("topo")
    producer, consumer = publish_and_subscribe(node, topic)
    try:
        info = get_json(node.http_address, "/info")
        assert "version" in info and not has_topology_key(info)
        stats = get_json(node.http_address, "/stats?format=json&include_clients=true")
        [prod] = [c for c in stats["producers"] if c["client_id"] == "prod"]
        [t] = [t for t in stats["topics"] if t["topic_name"] == topic]
        [cons] = t["channels"][0]["clients"]
        assert cons["client_id"] == "cons"
        assert not has_topology_key(prod) and not has_topology_key(cons)
        assert wait_registered(lookupd, topic)["producers"][0]["tcp_port"] == node.tcp_port
        for path in (f"/lookup?topic={topic}", "/nodes", "/debug"):
            doc = get_json(lookupd.http_address, path)
            assert doc and not has_topology_key(doc), path
    finally:
        producer.close()
        consumer.close()


@pytest.mark.parametrize("cluster", [("--topology-zone=z1", "--topology-region=r1")],
                         indirect=True)
def test_topology_fields_when_the_operator_sets_them(cluster):
    node, lookupd = cluster
    topic = unique_name("topo")
    producer, consumer = publish_and_subscribe(node, topic)
    try:
        info = get_json(node.http_address, "/info")
        assert (info["topology_zone"], info["topology_region"]) == ("z1", "r1")
        assert list(info)[-2:] == ["topology_zone", "topology_region"]
        stats = get_json(node.http_address, "/stats?format=json")
        [prod] = [c for c in stats["producers"] if c["client_id"] == "prod"]
        # the keys are there (the client's own labels are not kept: topology-aware delivery,
        # --enable-experiment, is not built)
        assert {"topology_zone", "topology_region"} <= set(prod)
        [peer] = wait_registered(lookupd, topic)["producers"]
        assert (peer["topology_zone"], peer["topology_region"]) == ("z1", "r1")
        [node_doc] = get_json(lookupd.http_address, "/nodes")["producers"]
        assert node_doc["topology_zone"] == "z1"
        debug = get_json(lookupd.http_address, "/debug")
        assert debug[f"topic:{topic}:"][0]["topology_region"] == "r1"
    finally:
        producer.close()
        consumer.close()


@pytest.mark.parametrize("program", ["nsqd", "nsqlookupd", "nsqadmin", "nsq_tail", "to_nsq"])
def test_help_has_no_post_130_flags(program):
    out = subprocess.run([str(VENV_BIN / program), "--help"], capture_output=True, text=True,
                         timeout=30)
    text = out.stdout + out.stderr
    assert text.startswith("Usage of ")
    for flag in (*POST_130_FLAGS, "auth-http-request-method"):
        assert f"-{flag}" not in text
    assert "topology" not in text


def test_hidden_flags_are_still_accepted(tmp_path):
    node = Nsqd(tmp_path / "n", "--topology-zone=z9")
    try:
        assert get_json(node.http_address, "/info")["topology_zone"] == "z9"
    finally:
        node.stop()
