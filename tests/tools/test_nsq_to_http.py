"""nsq_to_http against a real nsqd and a real aiohttp server (tests/tools/http_sink.py)."""

from __future__ import annotations

import collections
import signal
from urllib.parse import quote_plus

import pytest

from helpers.servers import unique_name
from tools.http_sink import HTTPSink, Seen
from tools.tool_util import channel_stats, create_channel, drained, mpub, run_tool, wait_for

pytestmark = pytest.mark.timeout(60)

CHANNEL = "nsq_to_http"
# quick retries: no requeue delay, tiny backoff
FAST_RETRY = ["--consumer-opt=default_requeue_delay,0", "--consumer-opt=backoff_multiplier,10ms",
              "--consumer-opt=max_backoff_duration,50ms"]


@pytest.fixture
def sinks():
    started: list[HTTPSink] = []

    def start(responder=None, delay: float = 0.0) -> HTTPSink:
        sink = HTTPSink(responder, delay)
        started.append(sink)
        return sink

    yield start
    for sink in started:
        sink.close()


def ok_bodies(sink: HTTPSink) -> list[bytes]:
    return [s.body for s in sink.requests() if s.status // 100 == 2]


@pytest.mark.timeout(60)
def test_post_delivers_every_message_with_content_type_and_headers(nsqd, tools, sinks):
    sink = sinks()
    topic = unique_name("post")
    bodies = [b"post-%04d" % i for i in range(300)]
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, bodies)
    proc = tools.start("nsq_to_http", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--post={sink.url}/in?src=nsq", "--content-type=text/plain",
                       "--header=X-Test: yes", "--header=Authorization:Bearer abc")
    wait_for(drained(nsqd.http_address, topic, CHANNEL, len(bodies)), what="all delivered")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    seen = sink.requests()
    assert sorted(s.body for s in seen) == bodies  # each exactly once
    first = seen[0]
    assert first.method == "POST" and first.path == "/in?src=nsq"
    assert first.headers["Content-Type"] == "text/plain"
    assert first.headers["X-Test"] == "yes"
    assert first.headers["Authorization"] == "Bearer abc"
    assert first.headers["User-Agent"] == "nsq_to_http v1.3.0"


@pytest.mark.timeout(60)
def test_get_puts_the_escaped_body_in_the_url(nsqd, tools, sinks):
    sink = sinks()
    topic = unique_name("get")
    bodies = [b"plain", b"with space", "caf\u00e9 & co/?=#%".encode(), b"a+b"]
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, bodies)
    proc = tools.start("nsq_to_http", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--get={sink.url}/hit?v=1&data=%s&x=%20")
    wait_for(drained(nsqd.http_address, topic, CHANNEL, len(bodies)), what="all delivered")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    seen = sink.requests()
    assert all(s.method == "GET" and s.body == b"" for s in seen)
    assert sorted(s.query["data"].encode() for s in seen) == sorted(bodies)
    paths = {s.path for s in seen}
    for body in bodies:  # Go's url.QueryEscape: spaces as '+', '+' as %2B; other % kept as is
        assert f"/hit?v=1&data={quote_plus(body)}&x=%20" in paths
    assert "Content-Type" not in seen[0].headers


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["post", "get"])
def test_failure_is_requeued_and_retried(nsqd, tools, sinks, method):
    attempts: collections.Counter[bytes] = collections.Counter()

    def flaky(seen: Seen) -> int:
        key = seen.body if method == "post" else seen.query["m"].encode()
        attempts[key] += 1
        if attempts[key] == 1:
            return 500 if method == "post" else 201  # GET wants exactly 200
        return 200

    sink = sinks(flaky)
    topic = unique_name("flaky")
    bodies = [b"retry-%02d" % i for i in range(20)]
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, bodies)
    target = f"--post={sink.url}/p" if method == "post" else f"--get={sink.url}/g?m=%s"
    proc = tools.start("nsq_to_http", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       target, *FAST_RETRY)
    wait_for(drained(nsqd.http_address, topic, CHANNEL, len(bodies)), what="all delivered")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert all(attempts[b] == 2 for b in bodies), attempts
    assert channel_stats(nsqd.http_address, topic, CHANNEL)["requeue_count"] == len(bodies)
    assert "Handler returned error (got status code " in proc.stderr()


@pytest.mark.timeout(60)
def test_unreachable_endpoint_requeues_until_it_comes_back(nsqd, tools, sinks):
    topic = unique_name("down")
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, [b"patience"])
    from helpers.servers import free_port
    port = free_port()
    proc = tools.start("nsq_to_http", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--post=http://127.0.0.1:{port}/", "--http-client-connect-timeout=200ms",
                       "--consumer-opt=max_attempts,0", *FAST_RETRY)
    wait_for(lambda: (channel_stats(nsqd.http_address, topic, CHANNEL) or {}).get("requeue_count", 0) >= 2,
             what="failed attempts requeued")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    stats = channel_stats(nsqd.http_address, topic, CHANNEL)
    # still there for the next run: queued, deferred by the last REQ, or in flight when the stop
    # came mid-attempt (nsqd hands it out again after msg_timeout, as upstream)
    assert stats["depth"] + stats["deferred_count"] + stats["in_flight_count"] == 1, stats


@pytest.mark.timeout(60)
def test_round_robin_splits_and_unknown_mode_sends_to_all(nsqd, tools, sinks):
    a, b = sinks(), sinks()
    bodies = [b"rr-%03d" % i for i in range(100)]
    topic = unique_name("rr")
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, bodies)
    proc = tools.start("nsq_to_http", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--post={a.url}/", f"--post={b.url}/", "--mode=round-robin")
    wait_for(drained(nsqd.http_address, topic, CHANNEL, len(bodies)), what="all delivered")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert sorted(ok_bodies(a) + ok_bodies(b)) == bodies
    assert len(ok_bodies(a)) == len(ok_bodies(b)) == 50

    c, d = sinks(), sinks()
    topic = unique_name("all")
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, bodies)
    proc = tools.start("nsq_to_http", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--post={c.url}/", f"--post={d.url}/", "--mode=broadcast")
    wait_for(drained(nsqd.http_address, topic, CHANNEL, len(bodies)), what="all delivered")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert sorted(ok_bodies(c)) == sorted(ok_bodies(d)) == bodies


@pytest.mark.timeout(60)
def test_hostpool_stops_using_a_failing_endpoint(nsqd, tools, sinks):
    broken = sinks(lambda _s: 500)
    healthy = sinks()
    bodies = [b"hp-%02d" % i for i in range(30)]
    topic = unique_name("hostpool")
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, bodies)
    proc = tools.start("nsq_to_http", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--post={broken.url}/", f"--post={healthy.url}/", "--n=1",
                       "--max-in-flight=1", *FAST_RETRY)  # default --mode=hostpool
    wait_for(drained(nsqd.http_address, topic, CHANNEL, len(bodies)), what="all delivered")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert sorted(ok_bodies(healthy)) == bodies
    assert len(broken.requests()) == 1  # then skipped for 30s


@pytest.mark.timeout(90)
def test_sigterm_mid_stream_answers_what_is_in_flight_then_restart_delivers_the_rest(nsqd, tools, sinks):
    sink = sinks(delay=0.02)
    topic = unique_name("graceful")
    bodies = [b"g-%04d" % i for i in range(600)]
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, bodies)
    args = [f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}", f"--post={sink.url}/",
            "--n=20", "--max-in-flight=40"]
    first = tools.start("nsq_to_http", *args)
    wait_for(lambda: len(sink.requests()) >= 100, what="some deliveries")
    assert first.stop(signal.SIGTERM) == 0, first.stderr()
    stats = channel_stats(nsqd.http_address, topic, CHANNEL)
    assert stats["in_flight_count"] == 0 and stats["requeue_count"] == 0
    delivered = len(sink.requests())
    assert 100 <= delivered < len(bodies)
    assert stats["depth"] == len(bodies) - delivered  # every request made was FINished
    second = tools.start("nsq_to_http", *args)
    wait_for(drained(nsqd.http_address, topic, CHANNEL, len(bodies)), what="the rest delivered")
    assert second.stop(signal.SIGTERM) == 0, second.stderr()
    assert sorted(ok_bodies(sink)) == bodies  # each exactly once


@pytest.mark.timeout(60)
def test_sample_zero_finishes_without_sending(nsqd, tools, sinks):
    sink = sinks()
    topic = unique_name("sample")
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, [b"x"] * 50)
    proc = tools.start("nsq_to_http", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--post={sink.url}/", "--sample=0")
    wait_for(drained(nsqd.http_address, topic, CHANNEL, 50), what="all finished")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert sink.requests() == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("args, message", [
    (["--nsqd-tcp-address=a:1"], "--get or --post required"),
    (["--nsqd-tcp-address=a:1", "--get=http://h/%s", "--post=http://h/"], "use --get or --post not both"),
    (["--nsqd-tcp-address=a:1", "--get=http://h/"], "invalid GET address - must be a printf string"),
    (["--nsqd-tcp-address=a:1", "--get=http://h/%s/%s"], "invalid GET address - must be a printf string"),
    (["--nsqd-tcp-address=a:1", "--get=http://h/%s", "--content-type=text/plain"],
     "--content-type only used with --post"),
    (["--nsqd-tcp-address=a:1", "--post=http://h/", "--sample=1.5"], "--sample must be between 0.0 and 1.0"),
    (["--nsqd-tcp-address=a:1", "--post=http://h/", "--header=novalue"], "--header value format"),
    (["--post=http://h/"], "--nsqd-tcp-address or --lookupd-http-address required"),
])
def test_flag_errors(args, message):
    result = run_tool("nsq_to_http", "--topic=t", *args, timeout=20)
    assert result.returncode == 1, result
    assert message in result.stderr.decode()
    result = run_tool("nsq_to_http", "--nsqd-tcp-address=a:1", "--post=http://h/", timeout=20)
    assert result.returncode == 1 and "--topic and --channel are required" in result.stderr.decode()
