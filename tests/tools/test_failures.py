"""How the utilities fail, pinned without upstream's binaries (CI has none).

The texts are those upstream v1.3.0's binaries print (``test_upstream_failures.py`` compares the
two side by side where the binaries are available): Go's log lines (``2006/01/02 15:04:05
message``), go-nsq's numbered lines, exit status 1 for ``log.Fatal``, 2 for flag errors.
"""

from __future__ import annotations

import re
import signal
import subprocess

import pytest

from helpers.servers import Nsqd, free_port, unique_name
from tools.tool_util import channel_stats, create_channel, http, mpub, run_tool, script, topic_message_count, wait_for

GO_LOG = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (.*)$")


def go_lines(stderr: bytes | str) -> list[str]:
    """stderr's lines without Go's timestamp; fails on a line that has none."""
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    out = []
    for line in text.splitlines():
        m = GO_LOG.match(line)
        assert m, f"not a Go log line: {line!r}"
        out.append(m.group(1))
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tool, args, line", [
    ("nsq_tail", ["--nsqd-tcp-address=a:1"], "--topic required"),
    ("nsq_tail", ["--topic=t"], "--nsqd-tcp-address or --lookupd-http-address required"),
    # Go's flags end at the first argument that is not one: --topic is never seen
    ("nsq_tail", ["stray", "--topic=t", "--nsqd-tcp-address=a:1"],
     "--nsqd-tcp-address or --lookupd-http-address required"),
    ("nsq_tail", ["--topic=t", "--channel=c!", "--nsqd-tcp-address=a:1"], "invalid channel name"),
    ("nsq_tail", ["--topic=t", "--max-in-flight=-1", "--nsqd-tcp-address=a:1"], "invalid MaxInFlight ! -1 < 0"),
    ("to_nsq", [], "--topic required"),
    ("to_nsq", ["--topic=t"], "--nsqd-tcp-address required"),
    ("to_nsq", ["--topic=t", "--delimiter=ab"], "--delimiter must be a single byte"),
    ("nsq_to_nsq", ["--topic=t!"], "--topic is invalid"),
    ("nsq_to_nsq", ["--topic=t", "--nsqd-tcp-address=a:1"], "--destination-nsqd-tcp-address required"),
    ("nsq_to_http", ["--topic=t", "--header=x"], "--header value format should be 'key=value'"),
    ("nsq_to_http", ["--topic=t", "--nsqd-tcp-address=a:1", "--get=http://x/"],
     "invalid GET address - must be a printf string"),
    ("nsq_to_http", ["--topic=t", "--nsqd-tcp-address=a:1", "--get=http://x/%s", "--n=0"], "no handlers"),
    ("nsq_to_file", [], "--nsqd-tcp-address or --lookupd-http-address required."),
    ("nsq_to_file", ["a", "b"], "unknown arguments: [a b]"),
    ("nsq_to_file", ["--log-level=loud"], "--log-level is invalid"),
    ("nsq_stat", ["--topic=t", "--channel=c"], "--nsqd-http-address or --lookupd-http-address required"),
    ("nsq_stat", ["--topic=t", "--channel=c", "--count=0"], "--count should be positive"),
])
def test_argument_errors_are_go_log_fatal_lines(tool, args, line):
    result = run_tool(tool, *args, input=b"", timeout=60)  # exits of its own (how fast: not asserted)
    assert result.returncode == 1
    lines = go_lines(result.stderr)
    assert lines[-1] == line


@pytest.mark.timeout(60)
def test_go_nsq_option_errors_are_flag_errors():
    result = run_tool("nsq_tail", "--topic=t", "--nsqd-tcp-address=a:1",
                      "--consumer-opt=max_attempts,x", timeout=30)
    assert result.returncode == 2
    err = result.stderr.decode().splitlines()
    assert err[0] == ('invalid value "max_attempts,x" for flag -consumer-opt: failed to coerce '
                      'option max_attempts (x) - strconv.ParseUint: parsing "x": invalid syntax')
    assert err[1].startswith("Usage of ") and "  -consumer-opt value" in err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tool, args, first", [
    ("nsq_tail", ["--topic=t"], "Adding consumer for topic: t"),
    ("nsq_to_nsq", ["--topic=t", "--destination-nsqd-tcp-address={closed}"],
     "INF    2 [t/nsq_to_nsq] ({addr}) connecting to nsqd"),
    ("nsq_to_http", ["--topic=t", "--post=http://{closed}/"],
     "INF    1 [t/nsq_to_http] ({addr}) connecting to nsqd"),
    ("to_nsq", ["--topic=t"], "INF    1 ({addr}) connecting to nsqd"),
])
def test_refused_nsqd_is_fatal_at_once(tool, args, first):
    """Fatal at the first refusal, without a retry (a retrying tool would outlive run_tool's
    timeout). The destinations are closed ports too, never a cluster on the default ports."""
    addr = f"127.0.0.1:{free_port()}"
    args = [a.format(closed=f"127.0.0.1:{free_port()}") for a in args]
    result = run_tool(tool, *args, f"--nsqd-tcp-address={addr}", input=b"x\n", timeout=60)
    assert result.returncode == 1
    lines = go_lines(result.stderr)
    assert lines[0] == first.format(addr=addr)
    assert lines[-1] == f"dial tcp {addr}: connect: connection refused"


@pytest.mark.timeout(60)
def test_to_nsq_without_input_dials_nothing():
    result = run_tool("to_nsq", "--topic=t", f"--nsqd-tcp-address=127.0.0.1:{free_port()}",
                      input=b"", timeout=30)
    assert result.returncode == 0
    assert [line.split(") ")[-1] for line in go_lines(result.stderr)] == ["stopping"]


@pytest.mark.timeout(60)
def test_nsq_stat_refused_nsqd():
    addr = f"127.0.0.1:{free_port()}"
    result = run_tool("nsq_stat", "--topic=t", "--channel=c", f"--nsqd-http-address={addr}", timeout=30)
    assert result.returncode == 1
    assert go_lines(result.stderr) == [
        f'ERROR: failed to get topic producers - failed to query any nsqd: Get "http://{addr}/stats'
        f'?format=json&topic=t&include_clients=false": dial tcp {addr}: connect: connection refused']


@pytest.mark.timeout(60)
def test_lookupd_unreachable_is_logged_and_polled(tools):
    addr = f"127.0.0.1:{free_port()}"
    proc = tools.start("nsq_tail", "--topic=t", f"--lookupd-http-address={addr}")
    wait_for(lambda: proc.stderr().count("error querying nsqlookupd") >= 3, timeout=20)
    assert proc.alive()
    assert proc.stop(signal.SIGTERM) == 0
    lines = [re.sub(r"tail\d{6}#", "tailN#", line) for line in go_lines(proc.stderr())]
    url = f"http://{addr}/lookup?topic=t"
    query = f"INF    1 [t/tailN#ephemeral] querying nsqlookupd {url}"
    error = (f"ERR    1 [t/tailN#ephemeral] error querying nsqlookupd ({url}) - Get \"{url}\": "
             f"dial tcp {addr}: connect: connection refused")
    retry = "INF    1 [t/tailN#ephemeral] retrying with next nsqlookupd"
    assert lines[:9] == ["Adding consumer for topic: t", query, error, retry, query, error, retry,
                         query, error]
    assert lines[-4:-2] == ["INF    1 [t/tailN#ephemeral] stopping...",
                            "INF    1 [t/tailN#ephemeral] stopping handlers"]


@pytest.mark.timeout(90)
def test_nsqd_going_away_and_coming_back(tools, tmp_path):
    """go-nsq's reconnection of an nsqd given directly: every lookupd_poll_interval, exactly."""
    nsqd = Nsqd(tmp_path / "nsqd")
    try:
        topic = unique_name("bounce")
        create_channel(nsqd.http_address, topic, "c")
        proc = tools.start("nsq_tail", f"--topic={topic}", "--channel=c",
                           f"--nsqd-tcp-address={nsqd.tcp_address}",
                           "--consumer-opt=lookupd_poll_interval,1s")
        wait_for(lambda: "connecting to nsqd" in proc.stderr(), timeout=20)
        mpub(nsqd.http_address, topic, [b"one"])
        wait_for(lambda: proc.stdout() == b"one\n", timeout=20)
        nsqd.stop()
        wait_for(lambda: "error connecting to nsqd" in proc.stderr(), timeout=20)
        nsqd = nsqd.restart()
        mpub(nsqd.http_address, topic, [b"two"])
        wait_for(lambda: proc.stdout() == b"one\ntwo\n", timeout=20)
        assert proc.stop(signal.SIGTERM) == 0
    finally:
        nsqd.stop()
    tag = f"[{topic}/c] ({nsqd.tcp_address})"
    lines = go_lines(proc.stderr())
    for expected in (f"ERR    1 {tag} IO error - EOF", f"INF    1 {tag} re-connecting in 1s",
                     f"ERR    1 {tag} error connecting to nsqd - dial tcp {nsqd.tcp_address}: "
                     "connect: connection refused"):
        assert expected in lines
    assert lines.count(f"INF    1 {tag} connecting to nsqd") >= 3


@pytest.mark.timeout(60)
def test_to_nsq_nsqd_gone_between_lines(tools, tmp_path):
    nsqd = Nsqd(tmp_path / "nsqd")
    try:
        proc = tools.start("to_nsq", "--topic=t", f"--nsqd-tcp-address={nsqd.tcp_address}",
                           stdin=subprocess.PIPE)
        proc.proc.stdin.write(b"one\n")
        proc.proc.stdin.flush()
        wait_for(lambda: topic_message_count(nsqd.http_address, "t") == 1, timeout=20)
        nsqd.stop()
        wait_for(lambda: "exiting router" in proc.stderr(), timeout=20)
        proc.proc.stdin.write(b"two\n")
        proc.proc.stdin.close()
        assert proc.wait(20) == 1
    finally:
        nsqd.stop()
    lines = go_lines(proc.stderr())
    assert lines[-1] == f"dial tcp {nsqd.tcp_address}: connect: connection refused"
    assert f"ERR    1 ({nsqd.tcp_address}) IO error - EOF" in lines


@pytest.mark.timeout(60)
def test_nsq_to_file_output_dir_cannot_be_made(tools, nsqd, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    topic = unique_name("nodir")
    proc = tools.start("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--output-dir={blocker}/sub")
    wait_for(lambda: (channel_stats(nsqd.http_address, topic, "nsq_to_file") or {}).get("clients"),
             what="nsq_to_file subscribed")  # else the PUB reaches a topic with no channel
    status, body = http("POST", f"http://{nsqd.http_address}/pub?topic={topic}", b"one")
    assert status == 200, body
    assert proc.wait(20) == 1  # at once, as upstream: the message is delivered again later
    last = proc.stderr().splitlines()[-1]
    assert re.fullmatch(rf"\[nsq_to_file\] \S+ \S+ FATAL: \[{topic}/nsq_to_file\] unable to create "
                        rf"dir: mkdir {re.escape(str(blocker))}: not a directory", last), last


@pytest.mark.timeout(60)
def test_nsq_to_file_topic_that_can_never_be_archived(tmp_path):
    """upstream logs this line and runs on archiving nothing; nsqpy exits 1 after it."""
    result = run_tool("nsq_to_file", "--topic=bad!", f"--nsqd-tcp-address=127.0.0.1:{free_port()}",
                      f"--output-dir={tmp_path}", timeout=30)
    assert result.returncode == 1
    assert re.fullmatch(r"\[nsq_to_file\] \S+ \S+ ERROR: couldn't create logger for new topic "
                        r"bad!: invalid topic name\n", result.stderr.decode())
