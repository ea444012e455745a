"""nsq_tail --from and nsq_to_file --from/--to against a real nsqd with --retention, as
subprocesses; and against nsqd (ours without retention, and upstream's: live, or its answer as
recorded) that keep no history."""

from __future__ import annotations

import time

import pytest

from helpers.recording import recording
from helpers.servers import ServerProcess, free_port, unique_name
from helpers.upstream import upstream_binary
from nsqpy.client.history import EARLIEST, LATEST, segments_url
from tools.tool_util import archive_lines, create_channel, files_under, http, mpub, run_tool, wait_for

pytestmark = pytest.mark.timeout(90)
RECORDED = recording("http", "test_history_tools")  # upstream's nsqd asked for a topic's history


def _history_window(nsqd, topic: str) -> tuple[int, int]:
    import orjson

    status, body = http("GET", f"http://{nsqd.http_address}/history/segments?topic={topic}")
    assert status == 200, body
    doc = orjson.loads(body)
    return doc["oldest_timestamp"], doc["newest_timestamp"]


def test_tail_from_earliest_to_latest_prints_the_history_and_exits(nsqd_factory):
    nsqd = nsqd_factory("--retention=1h")
    topic = unique_name("th")
    create_channel(nsqd.http_address, topic, "gone")  # live channels have nothing to do with it
    bodies = [b"old-%03d" % i for i in range(300)]
    mpub(nsqd.http_address, topic, bodies)
    out = run_tool("nsq_tail", f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}",
                   "--from=earliest", "--to=latest", timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(b"\n")[:-1] == bodies  # in publish order, once each


def test_tail_from_then_live_without_a_gap_or_a_repeat(nsqd_factory, tools):
    """--from without --to: the history, then the live messages (subscribed before the history
    was read, so none is missed, and none the history showed is printed twice)."""
    nsqd = nsqd_factory("--retention=1h")
    topic = unique_name("tl")
    old = [b"old-%03d" % i for i in range(200)]
    mpub(nsqd.http_address, topic, old)
    tail = tools.start("nsq_tail", f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}",
                       f"--nsqd-tcp-address={nsqd.tcp_address}", "--from=earliest", "--n=260")
    wait_for(lambda: tail.stdout().count(b"\n") >= 200, 20, what="the history printed")
    live = [b"live-%03d" % i for i in range(60)]
    mpub(nsqd.http_address, topic, live)
    assert tail.wait(30) == 0, tail.stderr()
    assert tail.stdout().split(b"\n")[:-1] == old + live


def test_tail_from_a_topic_without_channels_prints_its_backlog_once(nsqd_factory, tools):
    """A topic with no channel hands its whole backlog to nsq_tail's new channel, as live
    messages of any age, which the history prints too: 300 retained messages came out 550
    times (the first --max-in-flight were deduped by id, the rest not). Each is printed once,
    then the live ones."""
    nsqd = nsqd_factory("--retention=1h")
    topic = unique_name("bl")
    old = [b"old-%03d" % i for i in range(300)]
    mpub(nsqd.http_address, topic, old)  # no channel: the topic keeps them for the first one
    tail = tools.start("nsq_tail", f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}",
                       "--from=earliest", "--max-in-flight=50", "--n=320")
    wait_for(lambda: tail_subscribed(nsqd, topic), 20, what="nsq_tail subscribed over TCP")
    wait_for(lambda: (channel_depth(nsqd, topic), tail.stdout().count(b"\n")) == (0, 300), 30,
             what="the backlog delivered to nsq_tail and the history printed")
    live = [b"live-%03d" % i for i in range(20)]
    mpub(nsqd.http_address, topic, live)
    assert tail.wait(30) == 0, tail.stderr()
    assert tail.stdout().split(b"\n")[:-1] == old + live


def channel_depth(nsqd, topic: str) -> int:
    """What nsq_tail's channel still has to deliver (queued and in flight)."""
    import orjson

    _, body = http("GET", f"http://{nsqd.http_address}/stats?format=json&topic={topic}")
    return sum(c["depth"] + c["in_flight_count"] for t in orjson.loads(body)["topics"] for c in t["channels"])


def test_to_file_archives_a_range_and_exits(nsqd_factory, tmp_path):
    """[earliest, just after the first 100 messages): the files hold those, nothing is consumed."""
    from nsqpy.client.history import format_point

    nsqd = nsqd_factory("--retention=1h")
    topic = unique_name("tf")
    first = [b"a-%03d" % i for i in range(100)]
    mpub(nsqd.http_address, topic, first)
    time.sleep(0.05)
    _, end_of_first = _history_window(nsqd, topic)
    mpub(nsqd.http_address, topic, [b"b-%03d" % i for i in range(100)])
    out_dir = tmp_path / "out"
    result = run_tool("nsq_to_file", f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}",
                      "--from=earliest", f"--to={format_point(end_of_first + 1)}", f"--output-dir={out_dir}",
                      "--gzip", "--filename-format=<TOPIC>.<DATETIME><REV>.log", timeout=30)
    assert result.returncode == 0, result.stderr
    files = files_under(out_dir)
    assert files and all(f.name.startswith(topic) and f.suffix == ".gz" for f in files), files
    assert archive_lines(files) == first
    status, body = http("GET", f"http://{nsqd.http_address}/stats?format=json&topic={topic}")
    assert status == 200 and b'"channels":[]' in body.replace(b" ", b"")


def _tools_refuse(node, topic: str, out_dir) -> None:
    """Both tools, asked for ``topic``'s history on ``node``, exit 1 naming the nsqd and the flag."""
    for argv in (("nsq_tail", f"--topic={topic}", f"--nsqd-http-address={node.http_address}", "--from=earliest",
                  "--to=latest"),
                 ("nsq_to_file", f"--topic={topic}", f"--nsqd-http-address={node.http_address}", "--from=earliest",
                  f"--output-dir={out_dir}")):
        result = run_tool(*argv, timeout=30)
        assert result.returncode == 1, result
        assert f"nsqd http://{node.http_address} keeps no history".encode() in result.stderr, result.stderr
        assert b"--retention" in result.stderr


def _history_probe(node, topic: str) -> tuple[int, bytes]:
    """nsqd's answer to what the tools ask before anything else (``holders``): the topic's segments."""
    return http("GET", segments_url(f"http://{node.http_address}", topic, EARLIEST, LATEST))


@pytest.mark.parametrize("which", ["ours", "upstream"])
def test_tools_name_the_nsqd_without_history(nsqd, tmp_path, which):
    """Ours without --retention, and upstream's, which has no history routes. With upstream's
    binaries the tools run against its nsqd; without them its answer to what the tools ask (as
    recorded in ``tests/recordings/http/test_history_tools.json``) must be our history-less
    nsqd's, which the tools refuse (the ``ours`` case)."""
    topic = unique_name("nh")
    if which == "ours":
        mpub(nsqd.http_address, topic, [b"x"])
        _tools_refuse(nsqd, topic, tmp_path)
        return

    def upstreams_answer() -> tuple[int, bytes]:
        tcp, http_port = free_port(), free_port()
        node = ServerProcess([upstream_binary("nsqd"), f"--tcp-address=127.0.0.1:{tcp}",
                              f"--http-address=127.0.0.1:{http_port}", f"--data-path={tmp_path}"],
                             f"http://127.0.0.1:{http_port}/ping", tmp_path / "nsqd.log")
        try:
            node.http_address = f"127.0.0.1:{http_port}"
            mpub(node.http_address, topic, [b"x"])
            _tools_refuse(node, topic, tmp_path / "out")
            return _history_probe(node, topic)
        finally:
            node.stop()

    theirs = RECORDED.answer(None, upstreams_answer)
    mpub(nsqd.http_address, topic, [b"x"])
    assert _history_probe(nsqd, topic) == theirs


def test_a_topic_no_nsqd_has_is_refused(nsqd_factory, lookupd_factory, tmp_path):
    """Issue #43: a topic name with a typo printed nothing and exited 0, like an empty range.
    Now both tools say TOPIC_NOT_FOUND and exit 1, whether the nsqd is given or found through
    nsqlookupd, and nsq_to_file writes nothing; an empty range still exits 0 with nothing."""
    lookupd = lookupd_factory()
    nsqd = nsqd_factory("--retention=1h", f"--lookupd-tcp-address={lookupd.tcp_address}")
    topic = unique_name("typo")
    mpub(nsqd.http_address, topic, [b"x"])
    wait_for(lambda: http("GET", f"http://{lookupd.http_address}/lookup?topic={topic}")[0] == 200, 20,
             what="the topic in /lookup")
    out_dir = tmp_path / "out"
    for source in (f"--nsqd-http-address={nsqd.http_address}", f"--lookupd-http-address={lookupd.http_address}"):
        for argv in (("nsq_tail", f"--topic={topic}x", source, "--from=earliest", "--to=latest"),
                     ("nsq_tail", f"--topic={topic}x", source, "--from=earliest"),
                     ("nsq_to_file", f"--topic={topic}x", source, "--from=earliest", f"--output-dir={out_dir}")):
            result = run_tool(*argv, timeout=30)
            assert result.returncode == 1 and b"TOPIC_NOT_FOUND" in result.stderr, (argv, result)
            assert f"topic '{topic}x'".encode() in result.stderr and b"check its name" in result.stderr
    assert not out_dir.exists()
    # nothing was subscribed on the way: the mistyped topic was not created
    assert http("GET", f"http://{nsqd.http_address}/history/segments?topic={topic}x")[0] == 404
    empty = ("--from=2026-11-27T00:00:00Z", "--to=2026-11-28T00:00:00Z")
    result = run_tool("nsq_tail", f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}", *empty,
                      timeout=30)
    assert (result.returncode, result.stdout) == (0, b""), result
    result = run_tool("nsq_to_file", f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}", *empty,
                      f"--output-dir={out_dir}", timeout=30)
    assert result.returncode == 0 and not files_under(out_dir), result


def test_tail_from_follows_live_given_only_the_http_address(nsqd_factory, tools):
    """Issue #43: `nsq_tail --nsqd-http-address=... --from=earliest` (no --to) exited with
    "--nsqd-tcp-address or --lookupd-http-address required"; it now finds the TCP port in
    nsqd's /info and follows the topic live after the history."""
    nsqd = nsqd_factory("--retention=1h")
    topic = unique_name("fh")
    create_channel(nsqd.http_address, topic, "other")  # the topic hands nothing old to a new channel
    old = [b"old-%03d" % i for i in range(50)]
    mpub(nsqd.http_address, topic, old)
    tail = tools.start("nsq_tail", f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}",
                       "--from=earliest", "--n=80")
    wait_for(lambda: tail.stdout().count(b"\n") >= 50, 20, what="the history printed")
    wait_for(lambda: tail_subscribed(nsqd, topic), 20, what="nsq_tail subscribed over TCP")
    live = [b"live-%03d" % i for i in range(30)]
    mpub(nsqd.http_address, topic, live)
    assert tail.wait(30) == 0, tail.stderr()
    assert tail.stdout().split(b"\n")[:-1] == old + live


def tail_subscribed(nsqd, topic: str) -> bool:
    """nsq_tail's ephemeral channel (tail123456#ephemeral) has its client."""
    import orjson

    _, body = http("GET", f"http://{nsqd.http_address}/stats?format=json&topic={topic}")
    return any(c["channel_name"].startswith("tail") and c["clients"]
               for t in orjson.loads(body)["topics"] for c in t["channels"])


def test_history_errors_say_what_to_do(nsqd_factory, tmp_path):
    """Issue #43: RETENTION_OFF (the topic keeps none, another topic does) said nothing about how
    to turn it on; the tools now show the /topic/config call and the flag."""
    nsqd = nsqd_factory()
    http("POST", f"http://{nsqd.http_address}/topic/create?topic=kept")
    assert http("POST", f"http://{nsqd.http_address}/topic/config?topic=kept", b'{"retention": "1h"}')[0] == 200
    topic = unique_name("off")
    mpub(nsqd.http_address, topic, [b"x"])
    common = (f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}", "--from=earliest", "--to=latest")
    call = f"""curl -d '{{"retention": "24h"}}' 'http://{nsqd.http_address}/topic/config?topic={topic}'"""
    for argv in (("nsq_tail", *common), ("nsq_to_file", *common, f"--output-dir={tmp_path}")):
        result = run_tool(*argv, timeout=30)
        assert result.returncode == 1 and b"RETENTION_OFF" in result.stderr, result
        assert call.encode() in result.stderr and b"--retention" in result.stderr, result.stderr


def test_bad_points_and_missing_http_sources_are_refused(nsqd):
    topic = unique_name("bp")
    result = run_tool("nsq_tail", f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}",
                      "--from=yesterday", timeout=30)
    assert result.returncode == 1 and b"invalid --from 'yesterday'" in result.stderr, result.stderr
    result = run_tool("nsq_to_file", f"--topic={topic}", f"--nsqd-http-address={nsqd.http_address}",
                      "--from=1795927286", "--output-dir=unused", timeout=30)
    assert result.returncode == 1 and b"milliseconds, not seconds" in result.stderr, result.stderr
    result = run_tool("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      "--from=earliest", timeout=30)
    assert result.returncode == 1 and b"need --nsqd-http-address or --lookupd-http-address" in result.stderr


def test_help_lists_the_history_flags():
    for tool in ("nsq_tail", "nsq_to_file"):
        result = run_tool(tool, "--help", timeout=30)
        text = result.stdout + result.stderr
        for flag in (b"-from string", b"-to string", b"-nsqd-http-address value"):
            assert flag in text, (tool, flag)
