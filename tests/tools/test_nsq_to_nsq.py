"""nsq_to_nsq between real nsqd processes."""

from __future__ import annotations

import json
import signal

import pytest

from helpers.servers import Nsqd, free_port, unique_name
from tools.tool_util import (
    channel_stats,
    create_channel,
    drained,
    mpub,
    run_tool,
    topic_message_count,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

CHANNEL = "nsq_to_nsq"
FAST_RETRY = ["--consumer-opt=default_requeue_delay,0", "--consumer-opt=backoff_multiplier,10ms",
              "--consumer-opt=max_backoff_duration,50ms"]


def read_all(nsqd: Nsqd, topic: str, n: int) -> list[bytes]:
    """The first ``n`` messages of ``topic`` (a fresh channel), via nsq_tail."""
    result = run_tool("nsq_tail", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      f"--n={n}", "--channel=check", timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split(b"\n")[:-1]


@pytest.mark.timeout(90)
def test_republishes_every_message_to_the_destination(nsqd_factory, tools):
    src, dst = nsqd_factory(), nsqd_factory()
    topic = unique_name("relay")
    bodies = [b"relay-%04d" % i for i in range(2000)]
    create_channel(src.http_address, topic, CHANNEL)
    create_channel(dst.http_address, topic, "check")  # keep what arrives for read_all
    mpub(src.http_address, topic, bodies)
    proc = tools.start("nsq_to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={src.tcp_address}",
                       f"--destination-nsqd-tcp-address={dst.tcp_address}")
    wait_for(drained(src.http_address, topic, CHANNEL, len(bodies)), what="source drained")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert topic_message_count(dst.http_address, topic) == len(bodies)
    assert sorted(read_all(dst, topic, len(bodies))) == bodies
    assert channel_stats(src.http_address, topic, CHANNEL)["requeue_count"] == 0


@pytest.mark.timeout(120)
def test_sigterm_mid_stream_then_restart_relays_each_message_exactly_once(nsqd_factory, tools):
    src, dst = nsqd_factory(), nsqd_factory()
    topic = unique_name("graceful")
    total = 30_000
    bodies = [b"g-%05d" % i for i in range(total)]
    create_channel(src.http_address, topic, CHANNEL)
    create_channel(dst.http_address, topic, "check")
    mpub(src.http_address, topic, bodies)
    args = [f"--topic={topic}", f"--nsqd-tcp-address={src.tcp_address}",
            f"--destination-nsqd-tcp-address={dst.tcp_address}"]
    first = tools.start("nsq_to_nsq", *args)
    wait_for(lambda: topic_message_count(dst.http_address, topic) >= 3000, interval=0.01,
             what="some relayed")
    assert first.stop(signal.SIGTERM) == 0, first.stderr()
    stats = channel_stats(src.http_address, topic, CHANNEL)
    relayed = topic_message_count(dst.http_address, topic)
    assert stats["in_flight_count"] == 0 and stats["requeue_count"] == 0
    assert relayed < total, "the stop should land in the middle of the stream"
    assert stats["depth"] == total - relayed  # published <=> FINished
    second = tools.start("nsq_to_nsq", *args)
    wait_for(drained(src.http_address, topic, CHANNEL, total), timeout=90, what="the rest relayed")
    assert second.stop(signal.SIGTERM) == 0, second.stderr()
    assert topic_message_count(dst.http_address, topic) == total
    assert sorted(read_all(dst, topic, total)) == bodies


@pytest.mark.timeout(90)
def test_several_topics_into_one_destination_topic_round_robin(nsqd_factory, tools):
    src, dst1, dst2 = nsqd_factory(), nsqd_factory(), nsqd_factory()
    a, b, merged = unique_name("a"), unique_name("b"), unique_name("merged")
    for topic, prefix in ((a, b"a"), (b, b"b")):
        create_channel(src.http_address, topic, CHANNEL)
        mpub(src.http_address, topic, [prefix + b"-%03d" % i for i in range(100)])
    proc = tools.start("nsq_to_nsq", f"--topic={a}", f"--topic={b}",
                       f"--nsqd-tcp-address={src.tcp_address}", f"--destination-topic={merged}",
                       f"--destination-nsqd-tcp-address={dst1.tcp_address}",
                       f"--destination-nsqd-tcp-address={dst2.tcp_address}", "--mode=round-robin")
    for topic in (a, b):
        wait_for(drained(src.http_address, topic, CHANNEL, 100), what=f"{topic} drained")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert topic_message_count(dst1.http_address, merged) == 100
    assert topic_message_count(dst2.http_address, merged) == 100


@pytest.mark.timeout(90)
def test_json_filters(nsqd_factory, tools):
    src, dst = nsqd_factory(), nsqd_factory()
    topic = unique_name("json")
    messages = [
        b'{"kind":"click","n":1,"drop":"me","url":"<a&b>"}',  # passes, fields reduced
        b'{"kind":"view","n":2}',  # wrong value: dropped
        b"not json",  # dropped
        b'["an","array"]',  # not an object: dropped
        b'{"kind":"click","n":3.0,"nested":{"x":1.0}}',  # passes
    ]
    create_channel(src.http_address, topic, CHANNEL)
    create_channel(dst.http_address, topic, "check")
    mpub(src.http_address, topic, messages)
    proc = tools.start("nsq_to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={src.tcp_address}",
                       f"--destination-nsqd-tcp-address={dst.tcp_address}",
                       "--require-json-field=kind", "--require-json-value=click",
                       "--whitelist-json-field=n", "--whitelist-json-field=kind",
                       "--whitelist-json-field=url", "--whitelist-json-field=nested",
                       "--whitelist-json-field=absent")
    wait_for(drained(src.http_address, topic, CHANNEL, len(messages)), what="source drained")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert topic_message_count(dst.http_address, topic) == 2
    assert sorted(read_all(dst, topic, 2)) == sorted([
        b'{"kind":"click","n":1,"url":"\\u003ca\\u0026b\\u003e"}',
        b'{"kind":"click","n":3,"nested":{"x":1}}',
    ])


@pytest.mark.timeout(90)
def test_numeric_required_value_and_missing_field_backoff(nsqd_factory, tools):
    src, dst = nsqd_factory(), nsqd_factory()
    topic = unique_name("num")
    create_channel(src.http_address, topic, CHANNEL)
    create_channel(dst.http_address, topic, "check")
    mpub(src.http_address, topic, [b'{"v":5}', b'{"v":5.0}', b'{"v":"5"}', b'{"v":6}',
                                   b'{"v":true}'])
    proc = tools.start("nsq_to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={src.tcp_address}",
                       f"--destination-nsqd-tcp-address={dst.tcp_address}",
                       "--require-json-field=v", "--require-json-value=5", *FAST_RETRY)
    wait_for(drained(src.http_address, topic, CHANNEL, 5), what="source drained")
    assert sorted(read_all(dst, topic, 3)) == [b'{"v":"5"}', b'{"v":5.0}', b'{"v":5}']
    # a message without the field cannot be judged: requeued with backoff (until max_attempts)
    mpub(src.http_address, topic, [b'{"other":1}'])
    wait_for(lambda: channel_stats(src.http_address, topic, CHANNEL)["requeue_count"] >= 2,
             what="the unjudgeable message requeued")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert topic_message_count(dst.http_address, topic) == 3
    assert "missing field to check required value" in proc.stderr()


@pytest.mark.timeout(90)
def test_destination_down_requeues_then_delivers(nsqd_factory, tools, tmp_path):
    src = nsqd_factory()
    topic = unique_name("later")
    create_channel(src.http_address, topic, CHANNEL)
    mpub(src.http_address, topic, [b"wait-%d" % i for i in range(10)])
    port = free_port()
    proc = tools.start("nsq_to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={src.tcp_address}",
                       f"--destination-nsqd-tcp-address=127.0.0.1:{port}", "--mode=round-robin",
                       "--consumer-opt=max_attempts,0", "--producer-opt=dial_timeout,300ms",
                       *FAST_RETRY)
    wait_for(lambda: channel_stats(src.http_address, topic, CHANNEL)["requeue_count"] >= 1,
             what="publish failures requeued")
    dst = Nsqd(tmp_path / "late-dst", tcp_port=port)
    try:
        create_channel(dst.http_address, topic, "check")
        wait_for(drained(src.http_address, topic, CHANNEL, 10), timeout=60, what="delivered at last")
        assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
        assert sorted(read_all(dst, topic, 10)) == sorted(b"wait-%d" % i for i in range(10))
    finally:
        dst.stop()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("args, message", [
    (["--nsqd-tcp-address=a:1", "--destination-nsqd-tcp-address=b:2"], "--topic and --channel are required"),
    (["--topic=t", "--destination-nsqd-tcp-address=b:2"], "--nsqd-tcp-address or --lookupd-http-address required"),
    (["--topic=t", "--nsqd-tcp-address=a:1"], "--destination-nsqd-tcp-address required"),
    (["--topic=bad topic", "--nsqd-tcp-address=a:1", "--destination-nsqd-tcp-address=b:2"], "--topic is invalid"),
    (["--topic=t", "--destination-topic=x/y", "--nsqd-tcp-address=a:1", "--destination-nsqd-tcp-address=b:2"],
     "--destination-topic is invalid"),
])
def test_flag_errors(args, message):
    result = run_tool("nsq_to_nsq", *args, timeout=20)
    assert result.returncode == 1, result
    assert message in result.stderr.decode()


def test_go_json_encoding_matches_encoding_json():
    from nsqpy.tools.nsq_to_nsq import go_json

    doc = json.loads('{"b":[1.0,2.5,{"z":1e3}],"a":"\u00e9<\u2028>","c":null,"d":true}')
    assert go_json(doc) == '{"a":"\u00e9\\u003c\\u2028\\u003e","b":[1,2.5,{"z":1000}],"c":null,"d":true}'.encode()
