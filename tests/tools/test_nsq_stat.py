"""nsq_stat's output against a real nsqd (directly and through nsqlookupd)."""

from __future__ import annotations

import re
import signal

import pytest

from helpers.servers import unique_name
from tools.tool_util import create_channel, http, mpub, run_tool, wait_for

pytestmark = pytest.mark.timeout(60)

HEADER = [
    "------rate------+----------------depth----------------+--------------metadata---------------",
    "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients",
]
LINE = re.compile(r"^[ \d-]{7} [ \d-]{7} \| [ \d]{7} [ \d-]{7} [ \d]{7} [ \d]{5} [ \d]{5} \| "
                  r"[ \d]{7} [ \d]{7} [ \d]{12} [ \d]{7}$")


def quiet_line(depth: int, msgs: int) -> str:
    return "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d" % (0, 0, depth, depth, 0, 0, 0, 0, 0, msgs, 0)


@pytest.mark.timeout(60)
def test_count_2_prints_the_header_and_two_reports(nsqd):
    topic = unique_name("stat")
    create_channel(nsqd.http_address, topic, "ch")
    mpub(nsqd.http_address, topic, [b"m"] * 5)
    result = run_tool("nsq_stat", f"--topic={topic}", "--channel=ch",
                      f"--nsqd-http-address={nsqd.http_address}", "--count=2", "--interval=200ms",
                      timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().split("\n") == [*HEADER, quiet_line(5, 5), quiet_line(5, 5), ""]


@pytest.mark.timeout(60)
def test_rates_and_header_every_25_lines_through_lookupd(nsqd_factory, lookupd_factory, tools):
    lookupd = lookupd_factory()
    nsqd = nsqd_factory(f"--lookupd-tcp-address={lookupd.tcp_address}")
    topic = unique_name("rates")
    create_channel(nsqd.http_address, topic, "ch")

    def producers() -> bool:
        status, body = http("GET", f"http://{lookupd.http_address}/lookup?topic={topic}")
        return status == 200 and b'"producers":[{' in body

    wait_for(producers, what="nsqd registered with lookupd")
    proc = tools.start("nsq_stat", f"--topic={topic}", "--channel=ch",
                       f"--lookupd-http-address={lookupd.http_address}", "--count=27",
                       "--interval=100ms")
    wait_for(lambda: proc.stdout().count(b"\n") >= 8, what="a few reports")
    mpub(nsqd.http_address, topic, [b"m"] * 1000)
    assert proc.wait(30) == 0, proc.stderr()
    lines = proc.stdout().decode().split("\n")
    assert lines[-1] == ""
    lines = lines[:-1]
    # i=0 header; reports 1..24; header again at i=25 before report 25; then 25..27
    assert len(lines) == 2 + 24 + 2 + 3
    assert lines[0:2] == HEADER and lines[26:28] == HEADER
    reports = lines[2:26] + lines[28:]
    assert all(LINE.match(r) for r in reports), reports
    ingress = [int(r.split()[0]) for r in reports]
    assert sum(1 for v in ingress if v > 0) >= 1  # the 1000 messages show up as ingress
    assert int(reports[-1].split()[11]) == 1000  # the msgs column ("|" are tokens too)


@pytest.mark.timeout(60)
def test_runs_until_sigterm_without_count(nsqd, tools):
    topic = unique_name("forever")
    create_channel(nsqd.http_address, topic, "ch")
    proc = tools.start("nsq_stat", f"--topic={topic}", "--channel=ch",
                       f"--nsqd-http-address={nsqd.http_address}", "--interval=50ms")
    wait_for(lambda: proc.stdout().count(b"\n") >= 4, what="reports")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()


@pytest.mark.timeout(60)
def test_closed_stdout_ends_by_sigpipe_as_go(nsqd):
    import subprocess

    from tools.tool_util import script

    topic = unique_name("head")
    create_channel(nsqd.http_address, topic, "ch")
    proc = subprocess.Popen([script("nsq_stat"), f"--topic={topic}", "--channel=ch",
                             f"--nsqd-http-address={nsqd.http_address}", "--interval=20ms"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().startswith(b"------rate")
        proc.stdout.close()  # like `nsq_stat ... | head -1`
        assert proc.wait(20) == -signal.SIGPIPE  # Go's runtime dies of it too
        assert b"Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.timeout(30)
def test_errors(nsqd):
    topic = unique_name("err")
    create_channel(nsqd.http_address, topic, "ch")
    result = run_tool("nsq_stat", f"--topic={topic}", "--channel=nope",
                      f"--nsqd-http-address={nsqd.http_address}", "--count=1", timeout=20)
    assert result.returncode == 1
    assert f"failed to find channel(nope) in stats metadata for topic({topic})" in result.stderr.decode()
    result = run_tool("nsq_stat", "--topic=t", "--channel=c", "--nsqd-http-address=127.0.0.1:1",
                      "--count=1", timeout=20)
    assert result.returncode == 1 and "failed to get topic producers" in result.stderr.decode()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("args, message", [
    (["--channel=c", "--nsqd-http-address=a:1"], "--topic and --channel are required"),
    (["--topic=t", "--channel=c"], "--nsqd-http-address or --lookupd-http-address required"),
    (["--topic=t", "--channel=c", "--nsqd-http-address=a:1", "--lookupd-http-address=b:1"],
     "use --nsqd-http-address or --lookupd-http-address not both"),
    (["--topic=t", "--channel=c", "--nsqd-http-address=http://a:1"],
     "--nsqd-http-address error - address should not contain scheme"),
    (["--topic=t", "--channel=c", "--nsqd-http-address=a:1", "--count=0"], "--count should be positive"),
    (["--topic=t", "--channel=c", "--nsqd-http-address=a:1", "--interval=0"], "--interval should be positive"),
])
def test_flag_errors(args, message):
    result = run_tool("nsq_stat", *args, timeout=20)
    assert result.returncode == 1
    assert message in result.stderr.decode()


@pytest.mark.timeout(60)
def test_lifecycle_columns_only_when_nsqd_reports_them(nsqd_factory):
    """With nsqd's opt-in --max-attempts (issue #13) the channel's dead-letter, expired and
    dropped counts get three more columns; without, the output above is upstream's."""
    node = nsqd_factory("--max-attempts=5")
    topic = unique_name("stat")
    create_channel(node.http_address, topic, "ch")
    mpub(node.http_address, topic, [b"m"] * 3)
    result = run_tool("nsq_stat", f"--topic={topic}", "--channel=ch",
                      f"--nsqd-http-address={node.http_address}", "--count=1", "--interval=200ms",
                      timeout=30)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().split("\n")
    assert lines[0] == HEADER[0] + "+---------lifecycle------"
    assert lines[1] == HEADER[1] + " |  dead-l expired dropped"
    assert lines[2] == quiet_line(3, 3) + " |       0       0       0"
