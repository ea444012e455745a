"""The executor-side source (nsqd with ``--leases``) on local[2], against real nsqd processes.

Each batch is read by Spark tasks in executor Python workers, one lease per partition, and
committed by the driver over HTTP; these tests check the rows, that nsqd is left with nothing
queued or in flight, and where the reads ran.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from helpers.servers import Nsqd, unique_name

from spark.nsq_spark_util import channel_stats, create_channel, producer_count, publish_n, start_to_end, wait_until
from spark.test_source import nsq_stream

# nsqd logs every IDENTIFY; the source's readers say who they are in it
_IDENTIFY = re.compile(r"IDENTIFY: \{ClientID:(\S+) .*UserAgent:(nsqpy/\S+ \(spark\)(?: (executor|probe))?) MsgTimeout:")


def identified(node: Nsqd) -> list[tuple[str, str]]:
    """``(client_id, role)`` of every source connection nsqd saw: role ``executor`` (a lease
    read), ``probe`` (the driver asking for leases) or ``""`` (the driver-side reader)."""
    return [(m.group(1), m.group(3) or "") for m in _IDENTIFY.finditer(Path(node.log_path).read_text())]


def reader_pids(node: Nsqd) -> set[int]:
    return {int(cid.rsplit(":", 1)[1]) for cid, role in identified(node) if role == "executor"}


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def drained(node: Nsqd, topic: str, channel: str = "spark") -> bool:
    ch = channel_stats(node.http_address, topic, channel)
    return ch.get("depth") == 0 and ch.get("in_flight_count") == 0


@pytest.mark.timeout(150)
def test_executors_read_every_message_once_and_the_driver_finishes_them(spark, nsqd_factory, tmp_path):
    nsqd = nsqd_factory("--leases")
    topic = unique_name("exec")
    n = 4000
    create_channel(nsqd.http_address, topic, "spark")
    bodies = publish_n(nsqd.tcp_address, topic, n)
    query = (nsq_stream(spark, topic, nsqd=nsqd, maxBatchSize=1500, partitionsPerNode=2)
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt")))
    query = start_to_end(query, nsqd.http_address, topic)
    assert query.awaitTermination(90)
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)  # every message exactly once
    assert {r.attempts for r in rows} == {1}
    assert {(r.topic, r.channel, r.nsqd_address) for r in rows} == {(topic, "spark", nsqd.tcp_address)}
    ch = channel_stats(nsqd.http_address, topic, "spark")
    assert (ch["depth"], ch["in_flight_count"], ch["timeout_count"], ch["requeue_count"]) == (0, 0, 0, 0)
    # 1500-row batches in 2 partitions: 750-row leases, read by Spark tasks in the executor's
    # Python workers (forked by pyspark.daemon), never by this driver or its source runner
    pids = reader_pids(nsqd)
    assert len([1 for _, role in identified(nsqd) if role == "executor"]) >= 2 * (n // 1500)
    assert pids and os.getpid() not in pids
    assert all("pyspark.daemon" in cmdline(pid) for pid in pids), {p: cmdline(p) for p in pids}
    assert not any(role == "" for _, role in identified(nsqd))  # no driver-side connection


@pytest.mark.timeout(150)
def test_two_nodes_from_lookupd_partitions_on_each(spark, nsqd_factory, lookupd, tmp_path):
    reg = f"--lookupd-tcp-address={lookupd.tcp_address}"
    a, b = nsqd_factory("--leases", reg), nsqd_factory("--leases", reg)
    topic = unique_name("exec2")
    for node in (a, b):
        create_channel(node.http_address, topic, "spark")
    bodies = publish_n(a.tcp_address, topic, 1500) + publish_n(b.tcp_address, topic, 2500, start=1500)
    wait_until(lambda: producer_count(lookupd.http_address, topic) == 2, 15, what="both nsqd registered")
    query = (nsq_stream(spark, topic, lookupd_http_addresses=lookupd.http_address, maxBatchSize=2000)
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt")))
    from nsqpy.spark._compat import HAS_AVAILABLE_NOW

    if HAS_AVAILABLE_NOW:
        query = query.trigger(availableNow=True).start()
        assert query.awaitTermination(90)
    else:
        query = query.start()
        wait_until(lambda: drained(a, topic) and drained(b, topic), 90, what="both channels drained")
        query.stop()
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    assert {r.nsqd_address for r in rows} == {a.tcp_address, b.tcp_address}
    assert drained(a, topic) and drained(b, topic)
    assert reader_pids(a) and reader_pids(b)


@pytest.mark.timeout(120)
def test_tls_and_snappy_on_the_executors(spark, nsqd_factory, tmp_path):
    import subprocess

    from nsqpy.client import http_mpublish

    from helpers.servers import free_port

    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=30)
    nsqd = nsqd_factory("--leases", f"--tls-cert={crt}", f"--tls-key={key}", "--tls-required=tcp-https",
                        f"--https-address=127.0.0.1:{free_port()}")
    topic = unique_name("exectls")
    create_channel(nsqd.http_address, topic, "spark")
    bodies = [b"secret-%d" % i for i in range(600)]
    http_mpublish(nsqd.http_address, topic, bodies)
    query = (nsq_stream(spark, topic, nsqd=nsqd, tls="true", tlsCaFile=str(crt), compression="snappy",
                        partitionsPerNode=2)
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt")))
    query = start_to_end(query, nsqd.http_address, topic)
    assert query.awaitTermination(60)
    assert query.exception() is None
    assert sorted(bytes(r.body) for r in spark.read.parquet(str(tmp_path / "out")).collect()) == sorted(bodies)
    assert reader_pids(nsqd)
    assert drained(nsqd, topic)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("leases,mode", [(False, "auto"), (True, "driver")])
def test_driver_side_reader_without_leases_or_when_asked(spark, nsqd_factory, tmp_path, leases, mode):
    """An nsqd that does not announce leases (ours without --leases, as upstream's) gets the
    driver-side reader; ``mode=driver`` picks it against an nsqd with leases too."""
    nsqd = nsqd_factory(*(["--leases"] if leases else []))
    topic = unique_name("drv")
    create_channel(nsqd.http_address, topic, "spark")
    bodies = publish_n(nsqd.tcp_address, topic, 1000)
    query = (nsq_stream(spark, topic, nsqd=nsqd, maxBatchSize=400, mode=mode)
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt")))
    query = start_to_end(query, nsqd.http_address, topic)
    assert query.awaitTermination(60)
    assert sorted(bytes(r.body) for r in spark.read.parquet(str(tmp_path / "out")).collect()) == sorted(bodies)
    roles = {role for _, role in identified(nsqd)}
    assert "" in roles and "executor" not in roles
    assert drained(nsqd, topic)


@pytest.mark.timeout(120)
def test_upstream_nsqd_gets_the_driver_side_reader(spark, upstream_nsqd, tmp_path):
    """Upstream's nsqd does not answer the lease probe: the source falls back to the driver-side
    reader, with all its guarantees. (``NSQPY_SPARK_NSQD=upstream`` runs the whole suite so.)"""
    topic = unique_name("up")
    create_channel(upstream_nsqd.http_address, topic, "spark")
    bodies = publish_n(upstream_nsqd.tcp_address, topic, 2000)
    query = (nsq_stream(spark, topic, nsqd=upstream_nsqd, maxBatchSize=700)
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt")))
    query = start_to_end(query, upstream_nsqd.http_address, topic)
    assert query.awaitTermination(60)
    assert query.exception() is None
    assert sorted(bytes(r.body) for r in spark.read.parquet(str(tmp_path / "out")).collect()) == sorted(bodies)
    assert drained(upstream_nsqd, topic)
    roles = {role for _, role in identified(upstream_nsqd)}
    assert roles == {"", "probe"}  # probed, then read by the driver-side reader
