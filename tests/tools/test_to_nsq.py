"""to_nsq from stdin into real nsqd."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from helpers.servers import unique_name
from tools.tool_util import create_channel, run_tool, topic_message_count, wait_for

pytestmark = pytest.mark.timeout(60)


def read_all(nsqd, topic: str, n: int) -> list[bytes]:
    result = run_tool("nsq_tail", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      f"--n={n}", "--channel=check", timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split(b"\n")[:-1]


@pytest.mark.timeout(60)
def test_lines_become_messages_empty_ones_skipped_last_chunk_kept(nsqd):
    topic = unique_name("lines")
    create_channel(nsqd.http_address, topic, "check")
    result = run_tool("to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      input=b"first\nsecond\n\n\nthird has spaces\nlast-without-newline", timeout=30)
    assert result.returncode == 0, result.stderr
    assert topic_message_count(nsqd.http_address, topic) == 4
    assert sorted(read_all(nsqd, topic, 4)) == sorted(
        [b"first", b"second", b"third has spaces", b"last-without-newline"])


@pytest.mark.timeout(60)
def test_custom_delimiter_like_the_readme(nsqd):
    topic = unique_name("delim")
    create_channel(nsqd.http_address, topic, "check")
    # `echo "one,two,three" | to_nsq -delimiter=","`: echo's newline does not end up in "three"
    result = run_tool("to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      "--delimiter=,", input=b"one,two,three\n", timeout=30)
    assert result.returncode == 0, result.stderr
    assert sorted(read_all(nsqd, topic, 3)) == [b"one", b"three", b"two"]


@pytest.mark.timeout(90)
def test_every_message_goes_to_every_nsqd(nsqd_factory):
    a, b = nsqd_factory(), nsqd_factory()
    topic = unique_name("both")
    bodies = [b"both-%05d" % i for i in range(20000)]
    for node in (a, b):
        create_channel(node.http_address, topic, "check")
    result = run_tool("to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={a.tcp_address}",
                      f"--nsqd-tcp-address={b.tcp_address}", input=b"\n".join(bodies) + b"\n",
                      timeout=60)
    assert result.returncode == 0, result.stderr
    for node in (a, b):
        assert topic_message_count(node.http_address, topic) == len(bodies)
        assert sorted(read_all(node, topic, len(bodies))) == bodies


@pytest.mark.timeout(60)
def test_rate_limits_messages_per_second(nsqd):
    topic = unique_name("rate")
    started = time.monotonic()
    result = run_tool("to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      "--rate=10", input=b"".join(b"r%d\n" % i for i in range(16)), timeout=30)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert topic_message_count(nsqd.http_address, topic) == 16
    assert elapsed >= 1.4, elapsed  # 1 at once, then 15 at 10/s
    assert "Throttling messages rate to max:10/second" in result.stderr.decode()


@pytest.mark.timeout(60)
def test_sigterm_with_stdin_still_open_exits_cleanly(nsqd, tools):
    topic = unique_name("open")
    proc = tools.start("to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       stdin=subprocess.PIPE)
    proc.proc.stdin.write(b"a\nb\nc\n")
    proc.proc.stdin.flush()
    wait_for(lambda: topic_message_count(nsqd.http_address, topic) == 3, what="3 published")
    assert proc.stop(signal.SIGTERM, timeout=15) == 0, proc.stderr()
    proc.proc.stdin.close()


@pytest.mark.timeout(30)
def test_unreachable_nsqd_is_fatal():
    result = run_tool("to_nsq", "--topic=t", "--nsqd-tcp-address=127.0.0.1:1",
                      "--producer-opt=dial_timeout,300ms", input=b"x\n", timeout=20)
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    assert [line[20:] for line in lines] == [
        "INF    1 (127.0.0.1:1) connecting to nsqd",
        "ERR    1 (127.0.0.1:1) error connecting to nsqd - dial tcp 127.0.0.1:1: connect: connection refused",
        "dial tcp 127.0.0.1:1: connect: connection refused",
    ]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("args, message", [
    (["--nsqd-tcp-address=a:1"], "--topic required"),
    (["--topic=t"], "--nsqd-tcp-address required"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--delimiter=ab"], "--delimiter must be a single byte"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--delimiter=\u00e9"], "--delimiter must be a single byte"),
])
def test_flag_errors(args, message):
    result = run_tool("to_nsq", *args, input=b"", timeout=20)
    assert result.returncode == 1
    assert message in result.stderr.decode()
