"""The Spark sources against nsqd with an auth server (docs/security.md, "AUTH over HTTP"): the
batch source's history reads and the streaming source's HTTP calls (``/channel/create?from=``
on the driver, ``/lease/fin`` for each batch on the executor-side reader) send the
``authSecret`` option, and fail at once, saying authorization is required, without it."""

from __future__ import annotations

import pytest

from helpers.servers import unique_name
from nsqpy.client import http_mpublish
from security.support import AuthServer, grant

from spark.nsq_spark_util import channel_stats, read_to_end, stats

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def auth_nsqd(nsqd_factory):
    """nsqd with history, leases and an auth server granting secret ``reader`` subscribe on
    topics ``hauth*`` (every channel)."""
    server = AuthServer()
    server.answers["reader"] = grant(identity="spark", auths=[
        {"topic": "^hauth", "channels": [".*"], "permissions": ["subscribe"]}])
    try:
        yield nsqd_factory(f"--auth-http-address={server.address}", "--retention=1h", "--leases")
    finally:
        server.close()


def test_batch_reads_the_history_with_auth_secret_and_fails_without(spark, auth_nsqd):
    topic = unique_name("hauth_batch")
    bodies = [b"b-%d" % i for i in range(500)]
    http_mpublish(auth_nsqd.http_address, topic, bodies)  # /mpub: upstream's, open by default

    def read(**options):
        reader = (spark.read.format("nsq").option("nsqd_http_addresses", auth_nsqd.http_address)
                  .option("topic", topic))
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    rows = read(authSecret="reader").collect()  # planned on the driver, read on the executors
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    with pytest.raises(Exception) as err:
        read().collect()
    text = str(err.value)
    assert "HTTP 401 AUTH_REQUIRED - authorization required" in text, text[-2000:]
    with pytest.raises(Exception) as err:
        read(authSecret="wrong").collect()
    assert "HTTP 403 AUTH_FAILED" in str(err.value), str(err.value)[-2000:]


def test_executor_side_stream_from_earliest_with_auth_secret_and_fails_without(
        spark, auth_nsqd, tmp_path):
    topic, n = unique_name("hauth_stream"), 3000
    bodies = [b"s-%d" % i for i in range(n)]
    http_mpublish(auth_nsqd.http_address, topic, bodies)

    def stream(**options):
        reader = (spark.readStream.format("nsq").option("nsqd_tcp_addresses", auth_nsqd.tcp_address)
                  .option("nsqd_http_addresses", auth_nsqd.http_address).option("topic", topic)
                  .option("channel", "spark").option("mode", "executor")
                  .option("startingPosition", "earliest").option("maxBatchSize", 1000))
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    with pytest.raises(Exception) as err:  # the driver's /channel/create?from= is refused
        stream()
    assert "AUTH_REQUIRED - authorization required" in str(err.value), str(err.value)[-2000:]
    assert "spark" not in {c["channel_name"] for c in _channels(auth_nsqd, topic)}

    got = read_to_end(spark, stream(authSecret="reader"), tmp_path, auth_nsqd.http_address, topic)
    assert sorted(got) == sorted(bodies)
    # every batch was finished with POST /lease/fin (with the secret): nothing left in flight
    ch = channel_stats(auth_nsqd.http_address, topic, "spark")
    assert (ch["depth"], ch["in_flight_count"], ch["timeout_count"]) == (0, 0, 0)


def _channels(node, topic: str) -> list[dict]:
    return (stats(node.http_address, topic) or {}).get("channels") or []
