"""The ``format("nsq")`` streaming source against real nsqd (and nsqlookupd) processes."""

from __future__ import annotations

import threading
import time

import pytest

from helpers.servers import Nsqd, unique_name
from nsqpy.spark import dedupe_within_watermark
from nsqpy.spark._compat import HAS_AVAILABLE_NOW

from spark.nsq_spark_util import channel_stats, create_channel, producer_count, publish_n, start_to_end, wait_until


def nsq_stream(spark, topic: str, channel: str = "spark", *, nsqd: Nsqd | None = None, **options):
    reader = spark.readStream.format("nsq").option("topic", topic).option("channel", channel)
    if nsqd is not None:
        reader = reader.option("nsqd_tcp_addresses", nsqd.tcp_address).option("nsqd_http_addresses", nsqd.http_address)
    options.setdefault("pollTimeoutMs", 50)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


@pytest.mark.timeout(120)
def test_n_messages_become_n_rows_and_all_are_finished(spark, nsqd, tmp_path):
    topic = unique_name("src")
    n = 3000
    create_channel(nsqd.http_address, topic, "spark")
    bodies = publish_n(nsqd.tcp_address, topic, n)
    started = time.time()
    query = (
        nsq_stream(spark, topic, nsqd=nsqd, maxBatchSize=700)
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    query = start_to_end(query, nsqd.http_address, topic)
    assert query.awaitTermination(90), "AvailableNow query did not end"
    assert query.exception() is None
    df = spark.read.parquet(str(tmp_path / "out"))
    rows = df.collect()
    assert len(rows) == n
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert len({r.id for r in rows}) == n
    assert {r.attempts for r in rows} == {1}
    assert {(r.topic, r.channel, r.nsqd_address) for r in rows} == {(topic, "spark", nsqd.tcp_address)}
    assert all(abs(r.timestamp.timestamp() - started) < 120 for r in rows[:10])
    assert len([b for b in query.recentProgress if b["numInputRows"]]) >= n // 700  # several batches
    # every message was FINished (the last batch by the forced empty batch), none timed out
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert (ch["depth"], ch["in_flight_count"], ch["timeout_count"], ch["requeue_count"]) == (0, 0, 0, 0)


@pytest.mark.timeout(180)
def test_stopped_mid_stream_and_restarted_loses_nothing(spark, nsqd_factory, tmp_path):
    """Stop a running query while data flows, restart it on the same checkpoint: every message
    arrives; with the dedupe recipe in the query each arrives exactly once. nsqd caps RDY at 200
    (IDENTIFY's max_rdy_count), so the 500 messages in flight take 3 connections."""
    nsqd = nsqd_factory("--max-rdy-count=200")
    topic = unique_name("restart")
    n_first, n_more = 2000, 2000
    create_channel(nsqd.http_address, topic, "spark")
    expected = publish_n(nsqd.tcp_address, topic, n_first)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def start(available_now: bool):
        # the stopped query's messages come back 2 s after its stop; the restarted one holds its
        # own for a minute, so that on a busy machine none times out before its batch commits
        # (a FIN after the timeout fails and the message stays queued past the run's end)
        timeout = 60_000 if available_now else 2000
        df = dedupe_within_watermark(nsq_stream(spark, topic, nsqd=nsqd, maxBatchSize=250, msgTimeoutMs=timeout))
        writer = df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
        return start_to_end(writer, nsqd.http_address, topic) if available_now else writer.start()

    more: list[bytes] = []

    def publish_more() -> None:
        for i in range(0, n_more, 100):
            more.extend(publish_n(nsqd.tcp_address, topic, 100, start=n_first + i))
            time.sleep(0.05)

    query = start(available_now=False)
    publisher = threading.Thread(target=publish_more)
    publisher.start()
    wait_until(lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 1500, 60, what="first rows")
    assert channel_stats(nsqd.http_address, topic, "spark")["client_count"] == 3
    query.stop()
    publisher.join()
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert ch["depth"] + ch["in_flight_count"] > 0, "the test should stop the query mid-stream"

    query = start(available_now=True)  # ends after the backlog present at start, in-flight included
    assert query.awaitTermination(120)
    assert query.exception() is None
    rows = spark.read.parquet(out).select("body", "id").collect()
    assert sorted(r.body for r in rows) == sorted(expected + more)  # all there, exactly once
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert (ch["depth"], ch["in_flight_count"]) == (0, 0)


@pytest.mark.timeout(120)
def test_slow_sink_longer_than_msg_timeout_causes_no_redelivery(spark, nsqd, tmp_path):
    """Batches take 4.5 s with a 3 s msg timeout: TOUCH keeps every held message ours (every 250 ms,
    so a busy machine may delay a TOUCH by 2.5 s before a message times out), and the
    I/O thread answers nsqd's 1 s heartbeats (two missed ones and nsqd drops the connection)."""
    topic = unique_name("slow")
    n = 600
    create_channel(nsqd.http_address, topic, "spark")
    publish_n(nsqd.tcp_address, topic, n)
    seen: list[tuple[str, int]] = []

    def slow_sink(batch_df, batch_id: int) -> None:
        rows = batch_df.select("id", "attempts").collect()
        time.sleep(4.5)
        seen.extend((r.id, r.attempts) for r in rows)

    query = (
        nsq_stream(spark, topic, nsqd=nsqd, maxBatchSize=200, msgTimeoutMs=3000, touchIntervalMs=250,
                   heartbeatIntervalMs=1000)
        .writeStream.foreachBatch(slow_sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    query = start_to_end(query, nsqd.http_address, topic)
    assert query.awaitTermination(100)
    assert query.exception() is None
    assert len(seen) == n
    assert len({i for i, _ in seen}) == n
    assert {a for _, a in seen} == {1}
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert (ch["timeout_count"], ch["requeue_count"], ch["depth"], ch["in_flight_count"]) == (0, 0, 0, 0)


@pytest.mark.timeout(150)
def test_two_nsqd_found_and_followed_via_lookupd(spark, nsqd_factory, lookupd, tmp_path):
    """Nodes come from nsqlookupd: one at start, one joining later; a node leaving does not stop
    the query. Rows carry the address of the nsqd that delivered them."""
    topic = unique_name("lookup")
    reg = f"--lookupd-tcp-address={lookupd.tcp_address}"
    a = nsqd_factory(reg)
    create_channel(a.http_address, topic, "spark")
    first = publish_n(a.tcp_address, topic, 500)
    wait_until(lambda: producer_count(lookupd.http_address, topic) == 1, 15, what="nsqd A registered with lookupd")

    seen: dict[bytes, str] = {}

    def sink(batch_df, batch_id: int) -> None:
        for r in batch_df.select("body", "nsqd_address").collect():
            seen[bytes(r.body)] = r.nsqd_address  # PySpark 4.0 gives binary as bytearray

    query = (
        nsq_stream(spark, topic, lookupd_http_addresses=lookupd.http_address, lookupdPollIntervalMs=300,
                   maxBatchSize=400, msgTimeoutMs=2000)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        wait_until(lambda: len(seen) >= 500, 60, what="A's messages")
        b = nsqd_factory(reg)
        create_channel(b.http_address, topic, "spark")
        second = publish_n(b.tcp_address, topic, 500, start=500)
        wait_until(lambda: len(seen) >= 1000, 60, what="B's messages (B found through lookupd)")
        a.stop()  # A goes away; the query carries on with B
        third = publish_n(b.tcp_address, topic, 300, start=1000)
        wait_until(lambda: len(seen) >= 1300, 60, what="B's messages after A left")
        assert query.exception() is None
    finally:
        query.stop()
    assert set(seen) == set(first + second + third)
    assert {seen[x] for x in first} == {a.tcp_address}
    assert {seen[x] for x in second + third} == {b.tcp_address}


@pytest.mark.skipif(not HAS_AVAILABLE_NOW, reason="AvailableNow needs PySpark >= 4.2; see the guard test")
@pytest.mark.timeout(90)
def test_available_now_with_tcp_addresses_only_and_an_empty_topic(spark, nsqd, tmp_path):
    """Without an HTTP address the backlog is unknown: the query ends once the channel stays
    quiet; an empty topic ends at once with no rows."""
    topic = unique_name("tcp")
    create_channel(nsqd.http_address, topic, "spark")
    publish_n(nsqd.tcp_address, topic, 300)
    df = (spark.readStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address)
          .option("topic", topic).option("channel", "spark").option("availableNowIdleTimeoutMs", "500").load())
    query = (df.writeStream.format("memory").queryName(unique_name("tcp_only"))
             .option("checkpointLocation", str(tmp_path / "ckpt1")).trigger(availableNow=True).start())
    assert query.awaitTermination(60)
    assert spark.table(query.name).count() == 300

    empty = unique_name("empty")
    create_channel(nsqd.http_address, empty, "spark")
    query = (nsq_stream(spark, empty, nsqd=nsqd).writeStream.format("memory").queryName(unique_name("empty_q"))
             .option("checkpointLocation", str(tmp_path / "ckpt2")).trigger(availableNow=True).start())
    assert query.awaitTermination(60)
    assert spark.table(query.name).count() == 0


@pytest.mark.skipif(HAS_AVAILABLE_NOW, reason="PySpark >= 4.2 runs AvailableNow: tested above")
@pytest.mark.timeout(90)
@pytest.mark.parametrize("trigger", [{"availableNow": True}, {"once": True}])
def test_available_now_and_once_are_refused_at_start_before_pyspark_4_2(spark, nsqd, tmp_path, trigger):
    """PySpark 4.0/4.1 would run one micro-batch it never commits (so never FINished) and end as if
    the backlog were read: register()'s guard refuses such a query in start(), with the reason,
    before anything is read; the same writer with the default trigger still runs."""
    from nsqpy.spark.guard import UnsupportedTriggerError

    topic = unique_name("guard")
    create_channel(nsqd.http_address, topic, "spark")
    publish_n(nsqd.tcp_address, topic, 500)
    writer = (nsq_stream(spark, topic, nsqd=nsqd).writeStream.format("noop")
              .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(**trigger))
    with pytest.raises(UnsupportedTriggerError, match="need PySpark >= 4.2"):
        writer.start()
    assert not spark.streams.active
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert ch["depth"] == 500 and ch["in_flight_count"] == 0  # nothing was read
    query = writer.trigger(processingTime="0 seconds").start()
    try:
        assert query.isActive
    finally:
        query.stop()


@pytest.mark.timeout(60)
def test_options_are_checked_where_the_query_is_defined(spark):
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    bad = [
        {"topic": "t", "channel": "c"},  # no address
        {"nsqd_tcp_addresses": "127.0.0.1:1", "channel": "c"},  # no topic
        {"nsqd_tcp_addresses": "127.0.0.1:1", "topic": "t", "channel": "c", "maxBatchSize": "x"},
        {"nsqd_tcp_addresses": "127.0.0.1:1", "topic": "t", "channel": "c", "noSuchOption": "1"},
        {"nsqd_tcp_addresses": "127.0.0.1:1", "topic": "bad topic", "channel": "c"},
    ]
    for options in bad:
        with pytest.raises((PySparkException, Py4JJavaError, ValueError)):
            df = spark.readStream.format("nsq").options(**options).load()
            df.writeStream.format("noop").start().stop()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("compression", ["snappy", "deflate"])
def test_compressed_connections_both_ways(spark, nsqd, tmp_path, compression):
    from spark.nsq_spark_util import drain

    topic, copy = unique_name("z"), unique_name("zcopy")
    create_channel(nsqd.http_address, topic, "spark")
    create_channel(nsqd.http_address, copy, "verify")
    bodies = publish_n(nsqd.tcp_address, topic, 1000, size=300)
    query = (
        nsq_stream(spark, topic, nsqd=nsqd, compression=compression).select("body")
        .writeStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address).option("topic", copy)
        .option("compression", compression).option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    query = start_to_end(query, nsqd.http_address, topic)
    assert query.awaitTermination(60)
    assert query.exception() is None
    assert sorted(drain(nsqd.tcp_address, copy, 1000)) == sorted(bodies)


@pytest.mark.timeout(60)
def test_tls_asked_for_but_not_negotiated_fails_instead_of_sending_in_clear(spark, nsqd, tmp_path):
    """nsqpy's nsqd has no TLS: with tls=true neither the source nor the sink talks to it."""
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    topic = unique_name("tls")
    create_channel(nsqd.http_address, topic, "spark")
    publish_n(nsqd.tcp_address, topic, 10)
    query = (nsq_stream(spark, topic, nsqd=nsqd, tls="true", tlsInsecureSkipVerify="true")
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt")).start())
    with pytest.raises(PySparkException, match="TLS"):
        query.awaitTermination(30)
    with pytest.raises((PySparkException, Py4JJavaError), match="TLS"):
        (spark.createDataFrame([(b"x",)], "body binary").write.format("nsq").mode("append")
         .option("nsqd_tcp_addresses", nsqd.tcp_address).option("topic", topic).option("tls", "true").save())
    assert channel_stats(nsqd.http_address, topic, "spark")["depth"] == 10


@pytest.mark.timeout(90)
def test_tls_both_ways(spark, nsqd_factory, tmp_path):
    """nsqd with a certificate, TLS required on TCP: the source reads and the sink publishes over
    TLS (verified against the CA file), with snappy stacked on top for the sink. The certificate
    is openssl's defaults' (helpers/certs.py), which Python 3.13's default context refuses and
    Go accepts: the source and sink accept it on every Python."""
    from nsqpy.client import http_mpublish
    from nsqpy.common.gotls import client_context

    from helpers.certs import make_kinds
    from spark.nsq_spark_util import drain

    kind = make_kinds(tmp_path / "certs")["openssl-defaults"]
    key, crt, ca = kind.server_key, kind.server_cert, kind.roots
    from helpers.servers import free_port

    # tcp-https: TLS required on TCP, plain HTTP still served (for the fixtures' /ping and /stats)
    nsqd = nsqd_factory(f"--tls-cert={crt}", f"--tls-key={key}", "--tls-required=tcp-https",
                        f"--https-address=127.0.0.1:{free_port()}")
    topic, copy = unique_name("tlsin"), unique_name("tlsout")
    create_channel(nsqd.http_address, topic, "spark")
    create_channel(nsqd.http_address, copy, "verify")
    bodies = [b"secret-%d" % i for i in range(500)]
    http_mpublish(nsqd.http_address, topic, bodies)  # plain TCP publishing is refused (TLS required)
    query = (
        nsq_stream(spark, topic, nsqd=nsqd, tls="true", tlsCaFile=str(ca)).select("body")
        .writeStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address).option("topic", copy)
        .option("tls", "true").option("tlsCaFile", str(ca)).option("compression", "snappy")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    query = start_to_end(query, nsqd.http_address, topic)
    assert query.awaitTermination(60)
    assert query.exception() is None
    assert sorted(drain(nsqd.tcp_address, copy, 500, tls=client_context(str(ca)))) == sorted(bodies)


@pytest.mark.timeout(90)
def test_auth_secret_both_ways_and_a_wrong_secret_fails_the_query(spark, nsqd_factory, tmp_path):
    """nsqd asks an auth server about every client's secret: with the right one the source and
    the sink work, with a wrong one the query fails (E_AUTH_FAILED is not worth retrying)."""
    import http.server
    import threading
    import urllib.parse

    import orjson
    from pyspark.errors import PySparkException

    from spark.nsq_spark_util import drain

    class Auth(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # upstream's protocol: GET /auth?secret=...&remote_ip=...&tls=...
            secret = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("secret", [""])[0]
            if secret != "let-me-in":
                self.send_response(403)
                self.end_headers()
                return
            body = orjson.dumps({"ttl": 3600, "identity": "spark", "authorizations": [
                {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Auth)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        nsqd = nsqd_factory(f"--auth-http-address=127.0.0.1:{server.server_address[1]}")
        topic, copy = unique_name("authin"), unique_name("authout")
        create_channel(nsqd.http_address, topic, "spark")
        create_channel(nsqd.http_address, copy, "verify")
        from nsqpy.client import http_mpublish

        bodies = [b"a-%d" % i for i in range(300)]
        http_mpublish(nsqd.http_address, topic, bodies)
        query = (
            nsq_stream(spark, topic, nsqd=nsqd, authSecret="let-me-in").select("body")
            .writeStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address).option("topic", copy)
            .option("authSecret", "let-me-in").option("checkpointLocation", str(tmp_path / "ckpt"))
        )
        query = start_to_end(query, nsqd.http_address, topic)
        assert query.awaitTermination(60)
        assert query.exception() is None
        assert sorted(drain(nsqd.tcp_address, copy, 300, auth_secret="let-me-in")) == sorted(bodies)

        query = (nsq_stream(spark, topic, nsqd=nsqd, authSecret="wrong").writeStream.format("noop")
                 .option("checkpointLocation", str(tmp_path / "ckpt2")).start())
        with pytest.raises(PySparkException, match="E_AUTH_FAILED"):
            query.awaitTermination(30)
    finally:
        server.shutdown()
        server.server_close()
