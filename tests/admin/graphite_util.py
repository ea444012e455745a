"""A real statsd -> Graphite pipeline for the nsqadmin graphite test, all on free loopback ports.

* carbon-cache and graphite-web from Debian's ``graphite-carbon`` / ``graphite-web`` (system
  Python, ``/usr/bin/python3``), with their own storage and settings in the test's directory;
* the statsd daemon from npm (:class:`helpers.statsd_daemon.StatsdDaemon`) flushing to carbon
  with the non-legacy namespace (``stats.counters.<key>.count``, ``stats.gauges.<key>``): the key
  shapes upstream nsqadmin's defaults expect.

``make graphite`` and the statsd target (dependencies of ``make test``) install them; :func:`missing` says what is not
there so the test can skip with the reason.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers.servers import ServerProcess, free_port
from helpers.statsd_daemon import StatsdDaemon
from helpers.statsd_daemon import missing_reason as statsd_missing_reason
from security.support import _wait_port as wait_port

SYSTEM_PYTHON = "/usr/bin/python3"
CARBON_CACHE = "/usr/bin/carbon-cache"


def missing() -> str:
    """Why the pipeline cannot run here ('' when it can)."""
    if not os.access(CARBON_CACHE, os.X_OK):
        return "graphite-carbon is not installed (make graphite)"
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import graphite.settings, django, cairo"],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        return "graphite-web is not installed (make graphite)"
    return statsd_missing_reason() or ""


class PortProcess(ServerProcess):
    """A server without an HTTP health check: ready once ``port`` accepts connections."""

    def __init__(self, argv: list[str], port: int, log_path: Path, env: dict | None = None,
                 cwd: Path | None = None) -> None:
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, cwd=cwd)
        try:
            wait_port(port, self.proc, timeout=30.0)
        except Exception:
            self.stop()
            raise AssertionError(f"{argv[0]} failed to start: {self.log()}")


class Graphite:
    """carbon-cache (line receiver) + graphite-web (HTTP); ``step`` seconds per whisper point."""

    def __init__(self, root: Path, step: int) -> None:
        self.root = root
        storage = root / "storage"
        for d in (storage / "whisper", storage / "log" / "webapp", root / "conf", root / "py"):
            d.mkdir(parents=True, exist_ok=True)
        self.line_port, self.pickle_port, self.query_port = free_port(), free_port(), free_port()
        self.http_port = free_port()
        (root / "conf" / "carbon.conf").write_text("\n".join([
            "[cache]", f"STORAGE_DIR = {storage}/", f"LOCAL_DATA_DIR = {storage}/whisper/",
            f"WHITELISTS_DIR = {storage}/lists/", f"CONF_DIR = {root}/conf/",
            f"LOG_DIR = {storage}/log/", f"PID_DIR = {storage}/", "ENABLE_LOGROTATION = False",
            "USER =", "MAX_CACHE_SIZE = inf", "MAX_UPDATES_PER_SECOND = 100000",
            "MAX_CREATES_PER_MINUTE = inf", "ENABLE_UDP_LISTENER = False",
            "LINE_RECEIVER_INTERFACE = 127.0.0.1", f"LINE_RECEIVER_PORT = {self.line_port}",
            "PICKLE_RECEIVER_INTERFACE = 127.0.0.1", f"PICKLE_RECEIVER_PORT = {self.pickle_port}",
            "CACHE_QUERY_INTERFACE = 127.0.0.1", f"CACHE_QUERY_PORT = {self.query_port}",
            "LOG_UPDATES = False", "LOG_CACHE_HITS = False", "LOG_LISTENER_CONNECTIONS = False",
            ""]))
        (root / "conf" / "storage-schemas.conf").write_text(
            f"[all]\npattern = .*\nretentions = {step}s:1h\n")
        (root / "conf" / "storage-aggregation.conf").write_text(
            "[all]\npattern = .*\nxFilesFactor = 0\naggregationMethod = average\n")
        (root / "py" / "nsqpy_graphite_local.py").write_text("\n".join([
            'SECRET_KEY = "nsqpy-test"', f'STORAGE_DIR = "{storage}/"',
            f'WHISPER_DIR = "{storage}/whisper/"', f'LOG_DIR = "{storage}/log/webapp/"',
            f'INDEX_FILE = "{storage}/index"', f'CARBONLINK_HOSTS = ["127.0.0.1:{self.query_port}"]',
            'DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", '
            f'"NAME": "{storage}/graphite.db"}}}}', ""]))
        env = {**os.environ, "PYTHONPATH": str(root / "py"),
               "GRAPHITE_SETTINGS_MODULE": "nsqpy_graphite_local",
               "DJANGO_SETTINGS_MODULE": "graphite.settings"}
        self.started: list[ServerProcess] = []
        try:
            self.started.append(PortProcess(
                [SYSTEM_PYTHON, CARBON_CACHE, f"--config={root}/conf/carbon.conf", "--nodaemon",
                 f"--pidfile={storage}/carbon.pid", "start"],
                self.line_port, root / "carbon.log"))
            subprocess.run([SYSTEM_PYTHON, "-m", "django", "migrate", "--run-syncdb", "-v0"],
                           env=env, check=True, capture_output=True, timeout=120)
            self.started.append(PortProcess(
                [SYSTEM_PYTHON, "-m", "django", "runserver", "--noreload",
                 f"127.0.0.1:{self.http_port}"], self.http_port, root / "graphite-web.log",
                env=env))
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def stop(self) -> None:
        for proc in reversed(self.started):
            proc.stop()


def graphite_statsd(directory: Path, graphite: Graphite, step: int) -> StatsdDaemon:
    """The npm statsd daemon flushing to carbon's line receiver every ``step`` s."""
    return StatsdDaemon(directory, graphiteHost="127.0.0.1", graphitePort=graphite.line_port,
                        flushInterval=step * 1000, backends=["./backends/graphite"],
                        graphite={"legacyNamespace": False})
