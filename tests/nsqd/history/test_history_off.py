"""Without a history flag or setting, nsqd is upstream's: no files, no routes, no stats key, and
none of the history's code loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.nsqd_http import stats
from helpers.servers import unique_name
from helpers.wire import Wire

from .history_util import call

pytestmark = pytest.mark.timeout(60)


def test_retention_off_is_upstream(nsqd_factory):
    node = nsqd_factory()
    topic = unique_name()
    w = Wire(node.tcp_address)
    w.pub(topic, b"x")
    w.cmd(b"DPUB", topic, "10", body=b"y")
    w.expect_ok()
    for path in (f"/history/segments?topic={topic}", f"/history/read?topic={topic}"):
        assert call(node, "GET", path) == (404, b'{"message":"NOT_FOUND"}')
    assert call(node, "POST", f"/channel/rewind?topic={topic}&channel=c&to=earliest") == (
        404, b'{"message":"NOT_FOUND"}')
    # without from= the route is upstream's; with it, it is refused rather than silently making
    # a channel that starts now (issue #43; upstream has no from=, so nothing relies on it)
    assert call(node, "POST", f"/channel/create?topic={topic}&channel=c") == (200, b"")
    assert call(node, "POST", f"/channel/create?topic={topic}&channel=d&from=earliest") == (
        400, b'{"message":"RETENTION_OFF"}')
    assert call(node, "POST", "/channel/create?topic=nope&channel=d&from=earliest") == (
        404, b'{"message":"TOPIC_NOT_FOUND"}')
    assert call(node, "POST", f"/channel/create?topic={topic}&channel=d%23ephemeral&from=earliest") == (
        400, b'{"message":"EPHEMERAL"}')
    topic_stats = [t for t in stats(node)["topics"] if t["topic_name"] == topic][0]
    assert "history" not in topic_stats and [c["channel_name"] for c in topic_stats["channels"]] == ["c"]
    node.stop()
    assert not [p for p in node.data_path.iterdir() if p.name.endswith(".history")]


def test_from_works_once_a_topic_setting_turns_history_on(nsqd_factory):
    """The refusal above gives way to the history's own route when a topic's setting installs
    it; other topics still get RETENTION_OFF."""
    node = nsqd_factory()
    kept, plain = unique_name("kept"), unique_name("plain")
    for topic in (kept, plain):
        Wire(node.tcp_address).pub(topic, b"x")
    assert call(node, "POST", f"/channel/create?topic={kept}&channel=c&from=earliest")[0] == 400
    assert call(node, "POST", f"/topic/config?topic={kept}", b'{"retention": "1h"}')[0] == 200
    Wire(node.tcp_address).pub(kept, b"y")
    assert call(node, "POST", f"/channel/create?topic={kept}&channel=c&from=earliest") == (200, b"")
    assert call(node, "POST", f"/channel/create?topic={plain}&channel=c&from=earliest") == (
        400, b'{"message":"RETENTION_OFF"}')


def test_history_code_is_not_imported_without_it(tmp_path):
    script = """
import asyncio, logging, sys
from nsqpy.nsqd.main import parse_options
from nsqpy.nsqd.nsqd import NSQD
from nsqpy.nsqd.server import Server

async def main(argv):
    server = Server(NSQD(parse_options(argv), logging.getLogger("t")))
    await server.start()
    server.nsqd.get_topic("t").put_many([(b"0" * 16, b"x", 1, 0)], 1)
    await server.shutdown()
    return sorted(m for m in sys.modules if m.startswith("nsqpy.nsqd.history"))

base = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--data-path=" + sys.argv[1]]
print(asyncio.run(main(base)))
print(asyncio.run(main(base + ["--retention=1h"])))
"""
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    off, on = out.stdout.splitlines()[-2:]
    assert eval(off) == ["nsqpy.nsqd.history", "nsqpy.nsqd.history.install",
                         "nsqpy.nsqd.history.options"]
    assert "nsqpy.nsqd.history.log" in eval(on)
