"""Reading nsqd's history from Spark on local[2] (the suite's session): the batch source
(``spark.read.format("nsq")``) and the streaming source's ``startingPosition``. Also run on the
PySpark 4.0 floor by ``make test``. nsqd runs with ``--retention`` (docs/history.md)."""

from __future__ import annotations

import time
import urllib.request

import orjson
import pytest

from helpers.servers import unique_name

from spark.nsq_spark_util import (
    channel_stats, create_channel, producer_count, publish_n, read_to_end, stats, wait_until,
)

pytestmark = pytest.mark.timeout(300)


def segments(http: str, topic: str) -> list:
    with urllib.request.urlopen(f"http://{http}/history/segments?topic={topic}", timeout=10) as resp:
        return orjson.loads(resp.read())["segments"]


def _history(spark, http: str, topic: str, **options):
    reader = spark.read.format("nsq").option("nsqd_http_addresses", http).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_reads_the_history_the_same_way_twice(spark, nsqd_factory, lookupd):
    nodes = [nsqd_factory("--retention=1h", f"--lookupd-tcp-address={lookupd.tcp_address}") for _ in range(2)]
    topic = unique_name("hist")
    expected = set()
    for i, node in enumerate(nodes):
        expected |= set(publish_n(node.tcp_address, topic, 3000, start=i * 3000))
    # each nsqd registers the new topic with nsqlookupd in the background (late under load)
    wait_until(lambda: producer_count(lookupd.http_address, topic) == 2, 30, what="both nsqd in /lookup")
    df = (spark.read.format("nsq").option("lookupd_http_addresses", lookupd.http_address)
          .option("topic", topic).option("partitionsPerSegment", 2).load())
    assert df.columns == ["body", "id", "attempts", "timestamp", "topic", "channel", "nsqd_address"]
    rows = df.collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(expected)
    assert {(r.topic, r.channel, r.attempts) for r in rows} == {(topic, None, 1)}
    assert {r.nsqd_address for r in rows} == {n.tcp_address for n in nodes}
    assert len({(r.nsqd_address, r.id) for r in rows}) == 6000
    # "to" was fixed when the DataFrame was made: what comes later is not in it
    publish_n(nodes[0].tcp_address, topic, 500, start=10_000)
    again = df.collect()
    assert sorted((r.nsqd_address, r.id, bytes(r.body)) for r in again) == \
        sorted((r.nsqd_address, r.id, bytes(r.body)) for r in rows)
    # a range: from the 1000th message of the first node, to (excluded) its 2000th
    first = sorted((r.timestamp, bytes(r.body)) for r in rows if r.nsqd_address == nodes[0].tcp_address)
    start_ts, end_ts = first[1000][0], first[2000][0]
    ranged = _history(spark, nodes[0].http_address, topic, **{
        "from": start_ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "to": end_ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}).collect()
    want = {b for ts, b in first if start_ts <= ts < end_ts}
    assert {bytes(r.body) for r in ranged} == want and len(ranged) == len(want) >= 1000


def test_batch_splits_a_single_segment_so_every_core_works(spark, nsqd_factory):
    """One segment of ~5 MB: the default plan (by bytes, over local[2]'s two cores) cuts it into
    byte windows, and every message comes once whatever the windows are."""
    node = nsqd_factory("--retention=1h")
    topic = unique_name("oneseg")
    expected = publish_n(node.tcp_address, topic, 20_000, chunk=7, size=200)  # 2,858 blocks
    assert len(segments(node.http_address, topic)) == 1
    for options, parts in (({}, 2), ({"partitionBytes": 1 << 20}, 5)):
        df = _history(spark, node.http_address, topic, **options)
        assert df.rdd.getNumPartitions() == parts
        rows = df.select("id", "body").collect()
        assert len(rows) == 20_000 and len({r.id for r in rows}) == 20_000
        assert sorted(bytes(r.body) for r in rows) == sorted(expected)


def test_batch_reads_of_nothing_give_zero_rows(spark, nsqd_factory, lookupd, tmp_path):
    """Issue #43: a range that holds nothing planned no partition, PySpark turned that into one
    partition of None and read_slice died on it at count()/write. A topic name with a typo, a
    day without messages and `from` after `to` each read as 0 rows, through count() and write."""
    nsqd = nsqd_factory("--retention=1h", f"--lookupd-tcp-address={lookupd.tcp_address}")
    topic = unique_name("empty")
    publish_n(nsqd.tcp_address, topic, 20)
    wait_until(lambda: producer_count(lookupd.http_address, topic) == 1, 30, what="the topic in /lookup")
    reads = {
        "typo": _history(spark, nsqd.http_address, topic + "x"),
        "typo via lookupd": (spark.read.format("nsq").option("lookupd_http_addresses", lookupd.http_address)
                             .option("topic", topic + "x").load()),
        "a day without messages": _history(spark, nsqd.http_address, topic, **{
            "from": "2026-11-27T00:00:00Z", "to": "2026-11-28T00:00:00Z"}),
        "from after to": _history(spark, nsqd.http_address, topic, **{
            "from": "2100-01-02T00:00:00Z", "to": "2100-01-01T00:00:00Z"}),
    }
    for name, df in reads.items():
        assert df.count() == 0, name
        out = tmp_path / name.replace(" ", "_")
        df.write.parquet(str(out))
        assert spark.read.parquet(str(out)).count() == 0, name
    assert _history(spark, nsqd.http_address, topic).count() == 20  # the topic itself is read


def test_batch_without_history_fails_naming_the_nsqd(spark, nsqd_factory):
    """Our nsqd without --retention: the batch fails naming it (the same read against upstream's
    nsqd, which keeps no history either, is tests/tools/test_history_tools.py's)."""
    topic = unique_name("nohist")
    node = nsqd_factory()
    publish_n(node.tcp_address, topic, 10)
    with pytest.raises(Exception) as err:
        _history(spark, node.http_address, topic).collect()
    text = str(err.value)
    assert f"nsqd http://{node.http_address} keeps no history" in text and "--retention" in text, text[-2000:]


@pytest.mark.parametrize("mode", ["driver", "executor"])
def test_streaming_starts_at_earliest(spark, nsqd_factory, tmp_path, mode):
    """50k messages were published (and consumed by another channel) before the query existed:
    with startingPosition=earliest its new channel gets them all from the history."""
    nsqd = nsqd_factory("--retention=1h", *(["--leases"] if mode == "executor" else []))
    topic, n = unique_name("early"), 50_000
    create_channel(nsqd.http_address, topic, "other")  # so a new channel would start empty
    expected = publish_n(nsqd.tcp_address, topic, n, chunk=5000)
    df = (spark.readStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address)
          .option("nsqd_http_addresses", nsqd.http_address).option("topic", topic)
          .option("channel", "spark").option("mode", mode).option("startingPosition", "earliest")
          .option("maxBatchSize", 20000).load())
    # the channel exists before the query is even started (load() made it from the history)
    assert "spark" in {c["channel_name"] for c in stats(nsqd.http_address, topic)["channels"]}
    out = tmp_path / "out"
    writer = (df.writeStream.format("parquet").option("path", str(out))
              .option("checkpointLocation", str(tmp_path / "ckpt")))
    query = writer.trigger(processingTime="1 second").start()
    started = time.monotonic()

    def progress() -> bool:
        rows = _rows(spark, out)
        assert rows or time.monotonic() - started < 150, "no batch read anything in 150 s"
        return query.exception() is not None or rows >= n

    try:
        wait_until(progress, 240, interval=1.0, what=f"{n} rows in the query's output")
    finally:
        query.stop()
    assert query.exception() is None
    bodies = [bytes(r.body) for r in spark.read.parquet(str(out)).select("body").collect()]
    assert len(bodies) == n and set(bodies) == set(expected)
    assert channel_stats(nsqd.http_address, topic, "other")["depth"] == n  # untouched


@pytest.mark.parametrize("mode", ["driver", "executor"])
def test_a_query_from_earliest_ends_once_the_history_is_read(spark, nsqd_factory, tmp_path, mode):
    """availableNow (PySpark >= 4.2) or stop_when_drained (4.0, 4.1) over a channel created from
    the history: the replay still to deliver is in the channel's depth, so the query ends only
    after all of it, each message once."""
    nsqd = nsqd_factory("--retention=1h", *(["--leases"] if mode == "executor" else []))
    topic, n = unique_name("early_end"), 20_000
    create_channel(nsqd.http_address, topic, "other")
    expected = publish_n(nsqd.tcp_address, topic, n, chunk=5000)
    df = (spark.readStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address)
          .option("nsqd_http_addresses", nsqd.http_address).option("topic", topic)
          .option("channel", "spark").option("mode", mode).option("startingPosition", "earliest")
          .option("maxBatchSize", 5000).load())
    assert channel_stats(nsqd.http_address, topic, "spark")["depth"] == n
    bodies = read_to_end(spark, df, tmp_path, nsqd.http_address, topic)
    assert len(bodies) == n and set(bodies) == set(expected)
    assert channel_stats(nsqd.http_address, topic, "spark")["depth"] == 0


def _rows(spark, out) -> int:
    try:
        return spark.read.parquet(str(out)).count()
    except Exception:  # nothing committed yet
        return 0


def test_streaming_earliest_without_history_fails_at_load(spark, nsqd_factory):
    nsqd = nsqd_factory()
    with pytest.raises(Exception, match="keeps no history"):
        (spark.readStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address)
         .option("nsqd_http_addresses", nsqd.http_address).option("topic", unique_name("x"))
         .option("channel", "c").option("mode", "driver").option("startingPosition", "earliest").load())
