"""Pieces of the connector that need no Spark session: options, backlog arithmetic, pickling."""

from __future__ import annotations

import pickle
import ssl
import subprocess

import pytest

from nsqpy.pipeline.events import BOT_AGENT, ClickStream
from nsqpy.spark.options import Options, connection_options, connection_settings
from nsqpy.spark.source import NsqStreamReader, SourceConfig, channel_backlog

pytestmark = pytest.mark.timeout(60)


def test_option_keys_ignore_case_and_separators():
    opts = Options({"NSQD_TCP_ADDRESSES": "a:1", "max-batch-size": "5", "checkpointLocation": "/x"},
                   {"nsqdTcpAddresses", "maxBatchSize"})
    assert opts.get("nsqdTcpAddresses") == "a:1"
    assert opts.get_int("maxBatchSize", 1) == 5
    with pytest.raises(ValueError, match="unknown nsq option.*maxBatchSizes"):
        Options({"maxBatchSizes": "5"}, {"maxBatchSize"})


def test_source_config_defaults_and_checks():
    cfg = SourceConfig.from_options({"nsqd_tcp_addresses": "127.0.0.1:4150, [::1]:4151", "topic": "t", "channel": "c"})
    assert cfg.nsqd_tcp == ["127.0.0.1:4150", "[::1]:4151"]
    assert (cfg.max_batch_size, cfg.max_in_flight, cfg.msg_timeout, cfg.touch_interval) == (20000, 40000, 30.0, 10.0)
    with pytest.raises(ValueError, match="touchIntervalMs"):
        SourceConfig.from_options({"nsqd_tcp_addresses": "h:1", "topic": "t", "channel": "c",
                                   "msgTimeoutMs": "2000", "touchIntervalMs": "2000"})
    with pytest.raises(ValueError, match="msgTimeoutMs"):
        SourceConfig.from_options({"nsqd_tcp_addresses": "h:1", "topic": "t", "channel": "c", "msgTimeoutMs": "10"})
    with pytest.raises(ValueError, match="compression"):
        SourceConfig.from_options({"nsqd_tcp_addresses": "h:1", "topic": "t", "channel": "c", "compression": "lz4"})


def test_reader_pickles_without_live_state():
    """The planner pickles the reader: nothing live may be in it, even after use."""
    reader = NsqStreamReader(SourceConfig.from_options({"nsqd_tcp_addresses": "h:1", "topic": "t", "channel": "c"}))
    reader._rt = object()  # stands for the runtime (threads, sockets)
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._rt is None and copy.config == reader.config
    assert reader.initialOffset() == {"seq": 0, "flush": 0}
    assert list(copy.readBetweenOffsets({"seq": 0, "flush": 0}, {"seq": 5, "flush": 0})) == []


def test_channel_backlog_from_stats():
    stats = {"topics": [{"topic_name": "t", "depth": 7, "channels": [
        {"channel_name": "c", "depth": 3, "deferred_count": 2, "in_flight_count": 4},
        {"channel_name": "other", "depth": 100, "deferred_count": 0, "in_flight_count": 0}]}]}
    assert channel_backlog(stats, "t", "c") == (5, 4)
    assert channel_backlog(stats, "t", "missing") == (0, 0)  # other channels exist: starts empty
    no_channels = {"topics": [{"topic_name": "t", "depth": 9, "channels": []}]}
    assert channel_backlog(no_channels, "t", "c") == (9, 0)  # a channel-less topic keeps its queue
    assert channel_backlog({"topics": []}, "t", "c") == (0, 0)


def test_tls_settings_build_a_verifying_context(tmp_path):
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "1", "-subj", "/CN=localhost"], check=True, capture_output=True, timeout=30)
    settings = connection_settings(Options({"tlsCaFile": str(crt), "compression": "snappy"},
                                           {"tlsCaFile", "compression"}))
    opts = connection_options(settings, msg_timeout=5.0)
    assert isinstance(opts.tls, ssl.SSLContext) and opts.tls.verify_mode == ssl.CERT_REQUIRED
    assert opts.snappy and opts.identify_body()["msg_timeout"] == 5000 and opts.identify_body()["tls_v1"]
    insecure = connection_options(connection_settings(Options({"tls": "true", "tlsInsecureSkipVerify": "yes"},
                                                              {"tls", "tlsInsecureSkipVerify"})))
    assert insecure.tls.verify_mode == ssl.CERT_NONE
    assert connection_options(connection_settings(Options({}, set()))).tls is None


def test_click_stream_is_deterministic_and_marks_its_spammers():
    a, b = ClickStream(3000, seed=5), ClickStream(3000, seed=5)
    events = list(a.events())
    assert events == list(b.events())
    clicks = [e for e in events if e["type"] == "click"]
    assert len(clicks) == 3000 and len({e["event_id"] for e in events}) == len(events)
    assert {e["user_id"] for e in clicks if e["user_agent"] == BOT_AGENT} == set(a.spam_users)
    assert events[-1]["type"] == "heartbeat" and events[-1]["ts"] > clicks[-1]["ts"] + 20 * 60_000


def test_guard_recognises_an_nsq_relation_in_an_analyzed_plan():
    from nsqpy.spark.guard import _reads_nsq

    plan = ("WriteToStream 0b1d, org.apache.spark.sql.execution.streaming.sources.NoopTable$, Append\n"
            "+- StreamingRelationV2 org.apache.spark.sql.execution.datasources.v2.python."
            "PythonDataSourceV2@5e3c1f0a, nsq, org.apache.spark.sql.execution.python.PythonTable@1, "
            "[topic=t], [body#0, id#1]\n")
    assert _reads_nsq(plan)
    assert not _reads_nsq(plan.replace(", nsq, ", ", nsqx, "))
    assert not _reads_nsq("+- StreamingRelationV2 org.apache.spark.sql.execution.streaming.sources."
                          "RateStreamProvider@1, rate, [timestamp#0, value#1]\n")


def test_stop_when_drained_needs_an_http_address_to_see_the_channel():
    from nsqpy.spark.drain import stop_when_drained

    with pytest.raises(ValueError, match="nsqd_http_addresses"):
        stop_when_drained(object(), {"nsqd_tcp_addresses": "127.0.0.1:4150", "topic": "t", "channel": "c"})


def test_pyspark_feature_flags_match_the_installed_version():
    from nsqpy.spark import _compat

    assert _compat.PYSPARK_VERSION >= (4, 0)
    assert _compat.HAS_AVAILABLE_NOW == (_compat.PYSPARK_VERSION >= (4, 2))
    assert _compat._version("4.1.0.dev1") == (4, 1) and _compat._version("4.10.2") == (4, 10)


class _Query:
    """What the pipeline reads of a StreamingQuery: its name, its failure, stop()."""

    def __init__(self, name: str, error: str | None = None) -> None:
        self.name, self.error, self.stopped = name, error, False
        self.isActive = error is None
        self.status = {"message": "Waiting for data to arrive"}

    def exception(self) -> str | None:
        return self.error

    def stop(self) -> None:
        self.stopped = True


def test_pipeline_restarts_a_query_whose_python_worker_did_not_connect_back():
    """Spark's fixed 10 s for the source's Python worker to connect back (a busy machine):
    the query starts again from its checkpoint, at most RESTARTS times; other failures end it."""
    from nsqpy.pipeline.run import RESTARTS, WORKER_CONNECT_BACK, StreamingJobs

    late = f"org.apache.spark.SparkException: {WORKER_CONNECT_BACK}."
    started: list[_Query] = []

    def job(spark, cfg):
        started.append(_Query("metrics", late if len(started) < RESTARTS else None))
        return started[-1]

    jobs = StreamingJobs()
    jobs.start(job, None, None)
    for _ in range(RESTARTS):
        jobs.check()
    assert len(started) == RESTARTS + 1 and jobs.names() == ["metrics"]
    jobs.check()  # the last one runs
    jobs.stop()
    assert started[-1].stopped

    broken = StreamingJobs()
    broken.start(lambda spark, cfg: _Query("spam", "AnalysisException: no such column"), None, None)
    with pytest.raises(RuntimeError, match="query spam failed: AnalysisException"):
        broken.check()

    stubborn = StreamingJobs()
    stubborn.start(lambda spark, cfg: _Query("archive", late), None, None)
    for _ in range(RESTARTS):
        stubborn.check()
    with pytest.raises(RuntimeError, match=WORKER_CONNECT_BACK):
        stubborn.check()
