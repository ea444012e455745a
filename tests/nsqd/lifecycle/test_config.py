"""Per-topic / per-channel settings (issue #13): the API, inheritance, persistence across a
restart, and a data directory upstream nsqd v1.3.0 still starts on."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from helpers.servers import Nsqd, ServerProcess, free_port, unique_name
from helpers.wire import Wire
from helpers.upstream import live_only, upstream_binary, upstream_path
from nsqd.lifecycle.lifecycle_util import channel_stats, make_channel, http, http_json

pytestmark = pytest.mark.timeout(60)

DEFAULTS = {"max_attempts": 0, "dead_letter_topic": "%s.dead", "msg_ttl": "0s",
            "mem_queue_size": 10000, "max_disk_bytes": 0, "disk_full_policy": "reject"}


def test_get_shows_flag_defaults_and_inheritance(nsqd_factory):
    node = nsqd_factory("--max-attempts=7", "--msg-ttl=90s")
    topic = unique_name()
    make_channel(node, topic, "ch")
    status, doc = http_json(node, "GET", f"/topic/config?topic={topic}")
    assert status == 200
    assert doc == {**DEFAULTS, "max_attempts": 7, "msg_ttl": "1m30s"}
    # topic settings are inherited by channels; channel settings win over both
    status, doc = http_json(node, "POST", f"/topic/config?topic={topic}",
                            {"max_attempts": 3, "mem_queue_size": 5})
    assert status == 200 and doc["max_attempts"] == 3 and doc["mem_queue_size"] == 5
    status, doc = http_json(node, "POST", f"/channel/config?topic={topic}&channel=ch",
                            {"msg_ttl": "250ms", "disk_full_policy": "drop-oldest",
                             "dead_letter_topic": "graveyard"})
    assert status == 200
    assert doc == {"max_attempts": 3, "dead_letter_topic": "graveyard", "msg_ttl": "250ms",
                   "mem_queue_size": 5, "max_disk_bytes": 0, "disk_full_policy": "drop-oldest"}
    # null clears a setting: it inherits again (here the flag's 90s)
    status, doc = http_json(node, "POST", f"/channel/config?topic={topic}&channel=ch",
                            {"msg_ttl": None})
    assert status == 200 and doc["msg_ttl"] == "1m30s"
    # the lifecycle counters appear in /stats once a control is in use for the channel
    ch = channel_stats(node, topic, "ch")
    assert ch["dead_letter_count"] == 0 and ch["expired_count"] == 0 and ch["dropped_count"] == 0


@pytest.mark.parametrize("doc,message", [
    ({"nope": 1}, "INVALID_KEY"),
    ({"max_attempts": -1}, "INVALID_MAX_ATTEMPTS"),
    ({"max_attempts": 70000}, "INVALID_MAX_ATTEMPTS"),
    ({"max_attempts": "3"}, "INVALID_MAX_ATTEMPTS"),
    ({"max_attempts": True}, "INVALID_MAX_ATTEMPTS"),
    ({"msg_ttl": "soon"}, "INVALID_MSG_TTL"),
    ({"msg_ttl": 5}, "INVALID_MSG_TTL"),
    ({"msg_ttl": "-1s"}, "INVALID_MSG_TTL"),
    ({"dead_letter_topic": "bad name!"}, "INVALID_DEAD_LETTER_TOPIC"),
    ({"dead_letter_topic": "%s%s"}, "INVALID_DEAD_LETTER_TOPIC"),
    ({"disk_full_policy": "panic"}, "INVALID_DISK_FULL_POLICY"),
    ({"mem_queue_size": 1.5}, "INVALID_MEM_QUEUE_SIZE"),
    ({"max_disk_bytes": -5}, "INVALID_MAX_DISK_BYTES"),
    ([1, 2], "INVALID_BODY"),
    (b"{not json", "INVALID_BODY"),
])
def test_bad_settings_are_400_and_change_nothing(shared_nsqd, doc, message):
    node = shared_nsqd
    topic = unique_name()
    make_channel(node, topic, "ch")
    for path in (f"/topic/config?topic={topic}", f"/channel/config?topic={topic}&channel=ch"):
        status, answer = http_json(node, "POST", path, doc)
        assert (status, answer) == (400, {"message": message})
        assert http_json(node, "GET", path) == (200, DEFAULTS)
    assert node.proc.poll() is None and "Traceback" not in node.log()


def test_missing_and_unknown_targets(shared_nsqd):
    node = shared_nsqd
    topic = unique_name()
    assert http_json(node, "GET", "/topic/config") == (400, {"message": "MISSING_ARG_TOPIC"})
    assert http_json(node, "GET", "/topic/config?topic=a!") == (400, {"message": "INVALID_TOPIC"})
    assert http_json(node, "GET", f"/topic/config?topic={topic}") == (
        404, {"message": "TOPIC_NOT_FOUND"})
    http(node, "POST", f"/topic/create?topic={topic}")
    assert http_json(node, "GET", f"/channel/config?topic={topic}") == (
        400, {"message": "MISSING_ARG_CHANNEL"})
    assert http_json(node, "POST", f"/channel/config?topic={topic}&channel=nope", {}) == (
        404, {"message": "CHANNEL_NOT_FOUND"})
    # none of the new flags shows up as a /config option (upstream has no such option)
    assert http_json(node, "GET", "/config/max_attempts") == (400, {"message": "INVALID_OPTION"})


def test_default_metadata_and_stats_are_upstreams(nsqd_factory):
    """No setting used: nsqd.dat and /stats carry exactly upstream's fields."""
    node = nsqd_factory()
    topic = unique_name()
    make_channel(node, topic, "ch")
    node.stop()
    doc = json.loads((node.data_path / "nsqd.dat").read_bytes())
    entry = next(t for t in doc["topics"] if t["name"] == topic)
    assert set(entry) == {"name", "paused", "channels"}
    assert set(entry["channels"][0]) == {"name", "paused"}
    node = node.restart()
    try:
        ch = channel_stats(node, topic, "ch")
        assert not {"dead_letter_count", "expired_count", "dropped_count"} & set(ch)
    finally:
        node.stop()


def test_settings_survive_a_restart(tmp_path):
    node = Nsqd(tmp_path / "d")
    topic = unique_name()
    try:
        make_channel(node, topic, "ch")
        make_channel(node, topic, "other")
        http_json(node, "POST", f"/topic/config?topic={topic}", {"max_disk_bytes": 123456})
        http_json(node, "POST", f"/channel/config?topic={topic}&channel=ch",
                  {"max_attempts": 4, "msg_ttl": "1h30m", "dead_letter_topic": "dl_%s"})
        http(node, "POST", f"/channel/pause?topic={topic}&channel=ch")
        before = http_json(node, "GET", f"/channel/config?topic={topic}&channel=ch")
        node = node.restart()
        assert http_json(node, "GET", f"/channel/config?topic={topic}&channel=ch") == before
        assert before[1]["msg_ttl"] == "1h30m0s" and before[1]["max_disk_bytes"] == 123456
        other = http_json(node, "GET", f"/channel/config?topic={topic}&channel=other")[1]
        assert other == {**DEFAULTS, "max_disk_bytes": 123456}
        assert channel_stats(node, topic, "ch")["paused"] is True
        # after a kill -9 too (the settings were persisted when they were set)
        http_json(node, "POST", f"/channel/config?topic={topic}&channel=other", {"max_attempts": 9})
        node.kill9()
        node = node.restart()
        other = http_json(node, "GET", f"/channel/config?topic={topic}&channel=other")[1]
        assert other["max_attempts"] == 9
    finally:
        node.stop()


def test_data_directory_still_starts_under_upstream_nsqd(tmp_path):
    """Upstream v1.3.0 decodes nsqd.dat with Go's json.Unmarshal, which ignores our extra
    ``config`` keys; run the real binary on the directory when it was built."""
    data = tmp_path / "d"
    node = Nsqd(data, "--mem-queue-size=0")
    topic = unique_name()
    try:
        make_channel(node, topic, "ch")
        http_json(node, "POST", f"/topic/config?topic={topic}", {"max_attempts": 2})
        http_json(node, "POST", f"/channel/config?topic={topic}&channel=ch",
                  {"msg_ttl": "1m", "max_disk_bytes": 99999})
        Wire(node.tcp_address).mpub(topic, [b"a", b"b", b"c"])
    finally:
        node.stop()
    doc = json.loads((data / "nsqd.dat").read_bytes())
    entry = next(t for t in doc["topics"] if t["name"] == topic)
    assert entry["config"] == {"max_attempts": 2}
    assert entry["channels"][0]["config"] == {"msg_ttl": "1m0s", "max_disk_bytes": 99999}
    if upstream_path("nsqd") is None:  # upstream must read what ours wrote just now
        pytest.skip(live_only("upstream's nsqd starting on a data directory ours wrote"))
    upstream_nsqd = upstream_binary("nsqd")
    copy = tmp_path / "upstream"
    shutil.copytree(data, copy)
    for lock in copy.glob("*.lock"):
        lock.unlink()
    http_port, tcp_port = free_port(), free_port()
    upstream = ServerProcess(
        [upstream_nsqd, f"--data-path={copy}", f"--tcp-address=127.0.0.1:{tcp_port}",
         f"--http-address=127.0.0.1:{http_port}", "--broadcast-address=127.0.0.1"],
        f"http://127.0.0.1:{http_port}/ping", tmp_path / "upstream.log")
    try:
        upstream.tcp_port, upstream.http_port = tcp_port, http_port
        upstream.http_address = f"127.0.0.1:{http_port}"
        ch = channel_stats(upstream, topic, "ch")
        assert ch is not None and ch["depth"] == 3, upstream.log()
        w = Wire(f"127.0.0.1:{tcp_port}")
        w.sub(topic, "ch", rdy=10)
        assert sorted(w.read_message().body for _ in range(3)) == [b"a", b"b", b"c"]
        w.close()
    finally:
        assert upstream.stop() == 0
    assert subprocess.run([upstream_nsqd, "--version"], capture_output=True).returncode == 0


@pytest.mark.parametrize("flag,message", [
    ("--max-attempts=-1", "--max-attempts must be [0,65535]"),
    ("--msg-ttl=-1s", "--msg-ttl must be >= 0"),
    ("--max-disk-bytes=-1", "--max-disk-bytes must be >= 0"),
    ("--disk-full-policy=bad", "invalid value \"bad\" for flag -disk-full-policy"),
    ("--dead-letter-topic=%s%s", "--dead-letter-topic must be a topic name"),
])
def test_bad_flags_exit_2(tmp_path, flag, message):
    from helpers.servers import VENV_BIN

    result = subprocess.run([str(VENV_BIN / "nsqd"), f"--data-path={tmp_path}", flag],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and message in result.stderr, result.stderr
