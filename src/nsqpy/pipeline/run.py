"""The whole click pipeline on local Spark, with one command::

    python -m nsqpy.pipeline --events 20000

1. starts nsqlookupd and nsqd (``--nsqd-nodes``, registered with it, with ``--leases`` so the
   source reads on the executors) unless ``--lookupd-http-addresses`` points at a running cluster;
2. creates topic ``clicks`` with channels ``archive``, ``metrics`` and ``spam_analysis`` (so
   no channel misses the first events) and ``alerts`` with channel ``pipeline_check``;
3. starts ``nsq_to_file`` on channel ``archive`` (or, with ``--archive spark``, a Spark query
   writing Parquet) and the metrics and spam streaming queries (jobs.py) in one local
   SparkSession;
4. publishes the synthetic click stream (events.py) while they run;
5. waits until every channel is drained (depth 0 and nothing in flight: every message was
   committed by Spark, or fsynced by nsq_to_file, and FINished), stops nsq_to_file (its
   files are closed and moved into the archive), recomputes the metrics and the spam alerts from the
   archive with a batch job, and waits until the streaming Parquet agrees with it;
6. recomputes the metrics a second time from NSQ's own history of ``clicks`` (its nsqd keep
   it, ``--retention``) with the batch source ``spark.read.format("nsq")``, and compares that
   with both the archive's recomputation and the streaming result (``--retention 0``, or a
   cluster of your own without history, leaves this step out and says so in the report);
7. reads the alerts back from NSQ, compares them with the batch result, prints a report
   and exits 0 only if everything agrees.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from nsqpy.client.history import NO_HISTORY

from .events import ClickStream
from .jobs import (
    PipelineConfig, add_common_args, archive_query, batch_spam, compare_history, compare_metrics,
    config_from_args, metrics_query, spam_query,
)
from .producer import lookupd_nodes, publish_clicks

CHANNELS = ("archive", "metrics", "spam_analysis")
CHECK_CHANNEL = "pipeline_check"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer")


class LocalCluster:
    """nsqlookupd + ``nodes`` nsqd as subprocesses on free loopback ports, stopped by PID."""

    def __init__(self, root: Path, nodes: int = 1, retention: str = "24h") -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.root = root
        bindir = Path(sys.executable).parent
        root.mkdir(parents=True, exist_ok=True)
        try:
            ltcp, lhttp = _free_port(), _free_port()
            self._start([str(bindir / "nsqlookupd"), f"--tcp-address=127.0.0.1:{ltcp}",
                         f"--http-address=127.0.0.1:{lhttp}", "--broadcast-address=127.0.0.1"],
                        f"http://127.0.0.1:{lhttp}/ping", root / "nsqlookupd.log")
            self.lookupd_http = f"127.0.0.1:{lhttp}"
            self.nsqd: list[tuple[str, str]] = []
            for i in range(nodes):
                tcp, http = _free_port(), _free_port()
                data = root / f"nsqd{i}"
                data.mkdir(exist_ok=True)
                self._start([str(bindir / "nsqd"), f"--tcp-address=127.0.0.1:{tcp}",
                             f"--http-address=127.0.0.1:{http}", f"--data-path={data}",
                             "--broadcast-address=127.0.0.1", f"--lookupd-tcp-address=127.0.0.1:{ltcp}",
                             "--leases",  # so the Spark source reads on the executors
                             *([f"--retention={retention}"] if retention not in ("", "0") else [])],
                            f"http://127.0.0.1:{http}/ping", root / f"nsqd{i}.log")
                self.nsqd.append((f"127.0.0.1:{tcp}", f"127.0.0.1:{http}"))
        except BaseException:
            self.stop()
            raise

    def _start(self, argv: list[str], health: str, log: Path) -> None:
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        _wait_http(health, proc)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


def _post(http: str, path: str) -> None:
    req = urllib.request.Request(f"http://{http}{path}", data=b"", method="POST")
    urllib.request.urlopen(req, timeout=10).read()


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return orjson.loads(resp.read())


class NsqToFile:
    """The ``nsq_to_file`` console script archiving channel ``archive`` as text files.

    Files are written in a work directory and moved to ``cfg.archive`` when closed, so the
    batch job only ever sees complete files; SIGTERM closes and moves the current ones."""

    def __init__(self, cfg: PipelineConfig, nsqd_tcp: list[str], log: Path) -> None:
        exe = Path(sys.executable).parent / "nsq_to_file"
        work = Path(cfg.out) / "archive_work"
        Path(cfg.archive).mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        argv = [str(exe), f"--topic={cfg.topic}", "--channel=archive", f"--output-dir={cfg.archive}",
                f"--work-dir={work}", "--sync-interval=1s", "--max-in-flight=1000", "--log-level=warn"]
        if cfg.lookupd_http:
            argv += [f"--lookupd-http-address={a}" for a in cfg.lookupd_http]
        else:
            argv += [f"--nsqd-tcp-address={a}" for a in nsqd_tcp]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"nsq_to_file exited with {self.proc.returncode}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def nsq_to_file_available() -> bool:
    return (Path(sys.executable).parent / "nsq_to_file").exists()


def prepare_topics(nsqd_http: list[str], cfg: PipelineConfig) -> None:
    for http in nsqd_http:
        _post(http, f"/topic/create?topic={cfg.topic}")
        for ch in CHANNELS:
            _post(http, f"/channel/create?topic={cfg.topic}&channel={ch}")
        _post(http, f"/topic/create?topic={cfg.alerts_topic}")
        _post(http, f"/channel/create?topic={cfg.alerts_topic}&channel={CHECK_CHANNEL}")


def channel_backlog(nsqd_http: list[str], topic: str, channels: tuple[str, ...]) -> dict[str, int]:
    """depth + in flight + deferred per channel, summed over nodes."""
    out = dict.fromkeys(channels, 0)
    for http in nsqd_http:
        for t in _get_json(f"http://{http}/stats?format=json&topic={topic}").get("topics") or ():
            for c in t.get("channels") or ():
                if c["channel_name"] in out:
                    out[c["channel_name"]] += c["depth"] + c["in_flight_count"] + c["deferred_count"]
    return out


def lookup_topic(lookupd_http: list[str], topic: str) -> set[str]:
    """nsqd TCP addresses lookupd lists for ``topic`` (union over the lookupd)."""
    from nsqpy.client.lookupd import ACCEPT, lookup_url, producers_from_answer

    found: set[str] = set()
    for addr in lookupd_http:
        req = urllib.request.Request(lookup_url(addr, topic), headers={"Accept": ACCEPT})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                found |= producers_from_answer(orjson.loads(resp.read()))
        except OSError:  # 404: not registered yet
            pass
    return found


def read_alerts(nsqd_tcp: list[str], topic: str, idle: float = 2.0) -> list[dict[str, Any]]:
    """Everything on ``topic``/pipeline_check until ``idle`` seconds pass without a message."""
    import asyncio

    from nsqpy.client import Consumer

    alerts: list[dict[str, Any]] = []

    async def main() -> None:
        last = [time.monotonic()]

        def handle(msg: Any) -> None:
            alerts.append(orjson.loads(msg.body))
            last[0] = time.monotonic()

        async with Consumer(topic, CHECK_CHANNEL, handle, nsqd_tcp_addresses=nsqd_tcp, max_in_flight=1000):
            while time.monotonic() - last[0] < idle:
                await asyncio.sleep(0.1)

    asyncio.run(main())
    return alerts


def _log(msg: str) -> None:
    print(f"[pipeline {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_pipeline(
    cfg: PipelineConfig,
    events: int,
    *,
    spark: Any = None,
    nsqd_nodes: int = 1,
    rate: float = 0.0,
    seed: int = 7,
    timeout: float = 600.0,
    archive: str = "nsq_to_file",
    retention: str = "24h",
) -> dict[str, Any]:
    """Run everything (see the module docstring); returns the report (``report["ok"]``).

    ``archive``: ``nsq_to_file`` (text files, the console script) or ``spark`` (a streaming
    query writing Parquet)."""
    if archive not in ("nsq_to_file", "spark"):
        raise ValueError(f"archive must be nsq_to_file or spark, not {archive!r}")
    fmt = "text" if archive == "nsq_to_file" else "parquet"
    cluster = None
    archiver: NsqToFile | None = None
    own_spark = spark is None
    queries = StreamingJobs()
    started = time.monotonic()
    deadline = started + timeout
    try:
        if not cfg.lookupd_http and not cfg.nsqd_tcp:
            cluster = LocalCluster(Path(cfg.out) / "cluster", nsqd_nodes, retention)
            cfg.lookupd_http = [cluster.lookupd_http]
            _log(f"local cluster: nsqlookupd http {cluster.lookupd_http}, nsqd {[t for t, _ in cluster.nsqd]}")
            nodes = [{"tcp": t, "http": h} for t, h in cluster.nsqd]
        elif cfg.nsqd_tcp:
            nodes = [{"tcp": t, "http": h} for t, h in zip(cfg.nsqd_tcp, cfg.nsqd_http)]
            if len(nodes) != len(cfg.nsqd_tcp):
                raise ValueError("give one nsqd HTTP address per nsqd TCP address")
        else:
            nodes = lookupd_nodes(cfg.lookupd_http)
        nsqd_tcp = [n["tcp"] for n in nodes]
        nsqd_http = [n["http"] for n in nodes]
        prepare_topics(nsqd_http, cfg)
        if cfg.lookupd_http:  # consumers find the topic at once instead of at their next poll
            _until(lambda: len(lookup_topic(cfg.lookupd_http, cfg.topic)) >= len(nodes), deadline,
                   "lookupd to list the topic on every nsqd")

        if archive == "nsq_to_file":
            archiver = NsqToFile(cfg, nsqd_tcp, Path(cfg.out) / "nsq_to_file.log")
            _log(f"nsq_to_file archiving {cfg.topic}/archive to {cfg.archive}")
        if own_spark:
            spark = local_spark()
        import nsqpy.spark

        nsqpy.spark.register(spark)
        jobs = (metrics_query, spam_query) if archiver is not None else (archive_query, metrics_query, spam_query)
        for start in jobs:
            queries.start(start, spark, cfg)
        _log(f"streaming queries started: {queries.names()}")

        stream = ClickStream(events, seed=seed)
        published: dict[str, Any] = {}
        producer = threading.Thread(target=lambda: published.update(publish_clicks(stream, nsqd_tcp, cfg.topic, rate)))
        producer.start()
        producer.join(max(1.0, deadline - time.monotonic()))
        _log(f"producer: {published}")

        def drained() -> bool:
            queries.check()
            if archiver is not None:
                archiver.check()
            return not any(channel_backlog(nsqd_http, cfg.topic, CHANNELS).values())

        _until(drained, deadline, "channels archive/metrics/spam_analysis drained")
        _log("every channel drained (all messages committed by Spark or synced by nsq_to_file, and FINished)")
        if archiver is not None:
            archiver.stop()  # closes the current files and moves them into the archive directory

        result: dict[str, Any] = {}

        def agree() -> bool:
            queries.check()
            result.update(compare_metrics(spark, cfg, fmt))
            return bool(result["agree"])

        _until(agree, deadline, "streaming metrics to agree with the batch job", interval=2.0)
        _log(f"metrics: streaming and batch agree ({result['stream_rows']} rows, {result['stream_clicks']} clicks)")

        history = _history_comparison(spark, cfg, fmt, retention if cluster is not None else None)
        if "skipped" in history:
            _log(f"history: {history['skipped']}")
        else:
            _log(f"history: nsqd's own history gives {history['history_clicks']} clicks; agrees with the "
                 f"archive: {history['agree_with_archive']}, with the stream: {history['agree_with_stream']}")

        expected_alerts = {r.alert_id: r.asDict() for r in batch_spam(spark, cfg, fmt).collect()}
        got: dict[str, dict[str, Any]] = {}

        def alerts_in() -> bool:
            queries.check()
            for a in read_alerts(nsqd_tcp, cfg.alerts_topic, idle=1.0):
                got[a["alert_id"]] = a
            return set(got) >= set(expected_alerts)

        _until(alerts_in, deadline, "spam alerts on the alerts topic", interval=0.5)
        spam_users = sorted({a["user_id"] for a in expected_alerts.values()})
        report = {
            "ok": (result["agree"] and got == expected_alerts and stream.count == result["batch_clicks"]
                   and history.get("agree", True)),
            "events": events,
            "archive": f"{archive} ({fmt}) in {cfg.archive}",
            "published": published,
            "metrics": result,
            "history": history,
            "alerts": sorted(got),
            "alerts_agree": got == expected_alerts,
            "spam_users_detected": spam_users,
            "spam_users_generated": stream.spam_users,
            "seconds": round(time.monotonic() - started, 1),
        }
        return report
    finally:
        if archiver is not None:
            archiver.stop()
        queries.stop()
        if own_spark and spark is not None:
            spark.stop()
        if cluster is not None:
            cluster.stop()


def _history_comparison(spark: Any, cfg: PipelineConfig, fmt: str, retention: str | None) -> dict[str, Any]:
    """The metrics from nsqd's history vs the archive's and the stream's. Our own local cluster
    keeps history unless ``retention`` is 0; a cluster given to us may not: then it is skipped."""
    if retention in ("", "0"):
        return {"skipped": "the local nsqd run without --retention"}
    try:
        return compare_history(spark, cfg, fmt)
    except Exception as err:
        # the reader's refusal comes back inside Spark's error text: whether no nsqd keeps
        # history (404) or the topic keeps none (RETENTION_OFF), its line says NO_HISTORY
        reason = next((line.strip() for line in str(err).splitlines() if NO_HISTORY in line), None)
        if retention is None and reason is not None:
            return {"skipped": f"nsqd {NO_HISTORY} of {cfg.topic}: {reason.removeprefix('RuntimeError: ')[:500]}"}
        raise


#: Spark 4 gives a streaming source's driver-side Python worker 10 s to connect back
#: (PythonWorkerFactory.createSimpleWorker; a constant, no setting changes it). Its imports
#: (pyspark, pyarrow) take 3 s on a quiet machine and more than 10 s on a busy one: the query
#: then fails with these words, before any of its batches ran.
WORKER_CONNECT_BACK = "Python worker failed to connect back"
RESTARTS = 3  # per query
INIT_WAIT = 60.0  # seconds a query may spend initializing its sources before the next starts


class StreamingJobs:
    """The pipeline's streaming queries, each with the job that starts it. A query that failed
    only because Spark's Python worker did not connect back in time is started again from its
    checkpoint (Spark's own recovery: it resumes where the checkpoint says), at most
    :data:`RESTARTS` times; any other failure ends the run."""

    def __init__(self) -> None:
        self._jobs: list[tuple[Any, Any, PipelineConfig]] = []
        self._queries: list[Any] = []
        self._restarts: list[int] = []

    def start(self, job: Any, spark: Any, cfg: PipelineConfig) -> None:
        self._jobs.append((job, spark, cfg))
        self._queries.append(_started(job, spark, cfg))
        self._restarts.append(0)

    def names(self) -> list[str]:
        return [q.name for q in self._queries]

    def check(self) -> None:
        for i, query in enumerate(self._queries):
            error = query.exception()
            if error is None:
                continue
            if WORKER_CONNECT_BACK not in str(error) or self._restarts[i] >= RESTARTS:
                raise RuntimeError(f"query {query.name} failed: {error}")
            self._restarts[i] += 1
            _log(f"query {query.name}: Spark's Python worker did not connect back in time; "
                 f"starting it again from its checkpoint ({self._restarts[i]} of {RESTARTS})")
            self._queries[i] = _started(*self._jobs[i])

    def stop(self) -> None:
        for query in self._queries:
            try:
                query.stop()
            except Exception:
                pass


def _started(job: Any, spark: Any, cfg: PipelineConfig) -> Any:
    """Start the job's query and wait until its sources are initialized (the source's Python
    worker connected), failed, or INIT_WAIT passed: one such worker starts at a time, where
    three at once on two busy cores each missed Spark's 10 s."""
    query = job(spark, cfg)
    deadline = time.monotonic() + INIT_WAIT
    while (query.isActive and query.exception() is None and time.monotonic() < deadline
           and query.status["message"] == "Initializing sources"):
        time.sleep(0.2)
    return query


def _until(cond: Any, deadline: float, what: str, interval: float = 0.5) -> None:
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)


def local_spark() -> Any:
    """local[2] with settings that suit small stateful streaming jobs."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]")).appName("nsqpy-pipeline")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nsqpy.pipeline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rate", type=float, default=0.0, help="events per second (0: as fast as possible)")
    ap.add_argument("--nsqd-nodes", type=int, default=1, help="nsqd in the local cluster")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--keep", action="store_true", help="keep the temporary output directory when --out is not given")
    ap.add_argument("--archive", choices=["nsq_to_file", "spark"],
                    default="nsq_to_file" if nsq_to_file_available() else "spark",
                    help="who archives channel `archive`: the nsq_to_file tool (text files) or a Spark job (Parquet)")
    ap.add_argument("--retention", default="24h",
                    help="the local cluster's nsqd --retention (0: none; the report then leaves "
                         "the comparison with nsqd's history out)")
    add_common_args(ap)
    ap.set_defaults(out=None)
    args = ap.parse_args(argv)
    tmp = None
    if args.out is None:
        tmp = tempfile.mkdtemp(prefix="nsqpy-pipeline-")
        args.out = tmp
    cfg = config_from_args(args)
    try:
        report = run_pipeline(cfg, args.events, nsqd_nodes=args.nsqd_nodes, rate=args.rate, seed=args.seed,
                              timeout=args.timeout, archive=args.archive, retention=args.retention)
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if tmp is not None and not args.keep:
        # the report must not point at a directory that no longer exists
        report["archive"] = f"{args.archive}: deleted at exit with the temporary output (--keep or --out DIR keeps it)"
    print(json.dumps(report, indent=2, default=str))
    return 0 if report["ok"] else 1
