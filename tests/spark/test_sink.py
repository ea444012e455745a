"""The ``format("nsq")`` sink: batch and streaming writes publish from the executors."""

from __future__ import annotations

import pytest

from helpers.servers import unique_name

from spark.nsq_spark_util import create_channel, drain, publish_n, start_to_end, stats


@pytest.mark.timeout(90)
def test_batch_write_publishes_every_row(spark, nsqd):
    topic = unique_name("sink")
    n = 5000
    create_channel(nsqd.http_address, topic, "verify")
    df = spark.range(n).selectExpr("CAST(concat('row-', CAST(id AS STRING)) AS BINARY) AS body").repartition(2)
    (df.write.format("nsq").mode("append").option("nsqd_tcp_addresses", nsqd.tcp_address)
       .option("topic", topic).option("mpubSize", 700).save())
    assert stats(nsqd.http_address, topic)["message_count"] == n
    got = drain(nsqd.tcp_address, topic, n)
    assert sorted(got) == sorted(b"row-%d" % i for i in range(n))


@pytest.mark.timeout(90)
def test_topic_column_string_bodies_and_byte_bounded_mpub(spark, nsqd_factory):
    """A `topic` column routes each row; string bodies are sent as UTF-8; chunks are bounded
    by bytes too (nsqd refuses an MPUB over its --max-body-size)."""
    nsqd = nsqd_factory("--max-body-size=20000")
    t1, t2 = unique_name("even"), unique_name("odd")
    for t in (t1, t2):
        create_channel(nsqd.http_address, t, "verify")
    rows = [(f"é-{i}-" + "x" * 500, t1 if i % 2 == 0 else t2) for i in range(400)]
    df = spark.createDataFrame(rows, "body string, topic string")
    (df.write.format("nsq").mode("overwrite").option("nsqd_tcp_addresses", nsqd.tcp_address)
       .option("mpubBytes", 16000).save())  # "overwrite" publishes like "append" (nothing to replace)
    assert sorted(drain(nsqd.tcp_address, t1, 200)) == sorted(b.encode() for b, t in rows if t == t1)
    assert sorted(drain(nsqd.tcp_address, t2, 200)) == sorted(b.encode() for b, t in rows if t == t2)


@pytest.mark.timeout(60)
def test_sink_refuses_what_nsqd_would(spark, nsqd):
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    errors = (PySparkException, Py4JJavaError)
    ok = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(errors, match="topic"):  # neither option nor column
        ok.write.format("nsq").mode("append").option("nsqd_tcp_addresses", nsqd.tcp_address).save()
    with pytest.raises(errors, match="body"):
        spark.createDataFrame([(1,)], "x int").write.format("nsq").mode("append") \
            .option("nsqd_tcp_addresses", nsqd.tcp_address).option("topic", "t").save()
    with pytest.raises(errors, match="empty body"):
        spark.createDataFrame([(b"",)], "body binary").write.format("nsq").mode("append") \
            .option("nsqd_tcp_addresses", nsqd.tcp_address).option("topic", "t").save()


@pytest.mark.timeout(120)
def test_stream_nsq_to_nsq(spark, nsqd, tmp_path):
    """writeStream.format("nsq"): a topic copied to another through Spark, every message once."""
    src, dst = unique_name("in"), unique_name("out")
    n = 2000
    create_channel(nsqd.http_address, src, "copy")
    create_channel(nsqd.http_address, dst, "verify")
    bodies = publish_n(nsqd.tcp_address, src, n)
    query = (
        spark.readStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address)
        .option("nsqd_http_addresses", nsqd.http_address).option("topic", src).option("channel", "copy")
        .option("maxBatchSize", 600).option("pollTimeoutMs", 50).load()
        .select("body")
        .writeStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address).option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    query = start_to_end(query, nsqd.http_address, src, "copy")
    assert query.awaitTermination(90)
    assert query.exception() is None
    assert sorted(drain(nsqd.tcp_address, dst, n)) == sorted(bodies)
