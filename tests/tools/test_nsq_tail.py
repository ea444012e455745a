"""nsq_tail against a real nsqd."""

from __future__ import annotations

import re
import signal
import subprocess

import pytest

from helpers.servers import unique_name
from tools.tool_util import channel_stats, create_channel, http, mpub, run_tool, script, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.mark.timeout(60)
def test_n_prints_exactly_n_messages_and_leaves_the_rest(nsqd):
    topic = unique_name("tail")
    create_channel(nsqd.http_address, topic, "c")
    bodies = [b"tail-%02d" % i for i in range(50)]
    mpub(nsqd.http_address, topic, bodies)
    result = run_tool("nsq_tail", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      "--channel=c", "--n=10", timeout=30)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split(b"\n")
    assert lines[-1] == b"" and len(lines[:-1]) == 10
    assert set(lines[:-1]) <= set(bodies)
    wait_for(lambda: (lambda c: c["depth"] + c["deferred_count"] == 40 and c["in_flight_count"] == 0)(
        channel_stats(nsqd.http_address, topic, "c")), what="the other 40 left in the channel")


@pytest.mark.timeout(60)
def test_print_topic_over_several_topics(nsqd):
    a, b = unique_name("ta"), unique_name("tb")
    for topic in (a, b):
        create_channel(nsqd.http_address, topic, "c")
        mpub(nsqd.http_address, topic, [f"{topic}-1".encode(), f"{topic}-2".encode()])
    result = run_tool("nsq_tail", f"--topic={a}", f"--topic={b}", "--print-topic", "--channel=c",
                      f"--nsqd-tcp-address={nsqd.tcp_address}", "--n=4", timeout=30)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split(b"\n")[:-1]) == sorted(
        f"{t} | {t}-{i}".encode() for t in (a, b) for i in (1, 2))


@pytest.mark.timeout(60)
def test_streams_until_sigterm_on_a_random_ephemeral_channel(nsqd, tools):
    topic = unique_name("stream")
    http("POST", f"http://{nsqd.http_address}/topic/create?topic={topic}")
    proc = tools.start("nsq_tail", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}")

    def channels() -> list[str]:
        status, body = http("GET", f"http://{nsqd.http_address}/stats?format=json&topic={topic}")
        import json
        topics = json.loads(body)["topics"]
        return [c["channel_name"] for c in topics[0]["channels"]] if topics else []

    names = wait_for(channels, what="the tail's channel")
    assert len(names) == 1 and re.fullmatch(r"tail\d{6}#ephemeral", names[0]), names
    for i in range(3):
        mpub(nsqd.http_address, topic, [b"live-%d" % i])
        wait_for(lambda: proc.stdout().count(b"\n") == i + 1, what=f"line {i + 1} printed at once")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert proc.stdout() == b"live-0\nlive-1\nlive-2\n"
    wait_for(lambda: channels() == [], what="the ephemeral channel gone with its last client")


@pytest.mark.timeout(60)
def test_through_lookupd_with_consumer_opts(nsqd_factory, lookupd_factory, tools):
    lookupd = lookupd_factory()
    nsqd = nsqd_factory(f"--lookupd-tcp-address={lookupd.tcp_address}")
    topic = unique_name("look")
    create_channel(nsqd.http_address, topic, "c")
    mpub(nsqd.http_address, topic, [b"found-1", b"found-2"])
    wait_for(lambda: b'"producers":[{' in http("GET", f"http://{lookupd.http_address}/lookup?topic={topic}")[1],
             what="nsqd registered with lookupd")
    proc = tools.start("nsq_tail", f"--topic={topic}", f"--lookupd-http-address={lookupd.http_address}",
                       "--channel=c", "--consumer-opt=user_agent,tailer/9", "--consumer-opt=client_id,me")
    wait_for(lambda: proc.stdout().count(b"\n") == 2, what="both messages printed")

    def clients() -> list[dict]:
        import json
        status, body = http("GET", f"http://{nsqd.http_address}/stats?format=json&topic={topic}")
        return json.loads(body)["topics"][0]["channels"][0]["clients"]

    seen = wait_for(clients, what="the tail as a client")
    assert seen[0]["user_agent"] == "tailer/9" and seen[0]["client_id"] == "me"
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert sorted(proc.stdout().split(b"\n")[:-1]) == [b"found-1", b"found-2"]


@pytest.mark.timeout(60)
def test_closed_stdout_ends_by_sigpipe_as_go(nsqd):
    topic = unique_name("pipe")
    create_channel(nsqd.http_address, topic, "c")
    mpub(nsqd.http_address, topic, [b"x" * 1000] * 2000)
    proc = subprocess.Popen([script("nsq_tail"), f"--topic={topic}", "--channel=c",
                             f"--nsqd-tcp-address={nsqd.tcp_address}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdout.readline()
        proc.stdout.close()  # like `nsq_tail ... | head -1`
        assert proc.wait(30) == -signal.SIGPIPE  # as upstream's (Go's runtime)
        assert b"Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.timeout(30)
def test_flag_errors():
    result = run_tool("nsq_tail", "--nsqd-tcp-address=a:1", timeout=20)
    assert result.returncode == 1 and "--topic required" in result.stderr.decode()
    result = run_tool("nsq_tail", "--topic=t", timeout=20)
    assert result.returncode == 1
    assert "--nsqd-tcp-address or --lookupd-http-address required" in result.stderr.decode()
    result = run_tool("nsq_tail", "--version", timeout=20)
    assert result.returncode == 0 and result.stdout.startswith(b"nsq_tail v1.3.0")
