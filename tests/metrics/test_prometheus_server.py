"""A real Prometheus server (Debian's ``prometheus``, installed by ``make test``) scrapes nsqd,
nsqlookupd and nsqadmin on free ports with a generated config; its HTTP API then answers
queries with the values the daemons report."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import orjson
import pytest

from helpers.daemons_cluster import Cluster
from helpers.nsqd_http import http, wait_for
from helpers.servers import free_port, unique_name

PROMETHEUS = shutil.which("prometheus")
pytestmark = [pytest.mark.timeout(150),
              pytest.mark.skipif(PROMETHEUS is None,
                                 reason="prometheus missing (make test installs it)")]


class PrometheusServer:
    def __init__(self, directory, jobs: dict[str, list[str]]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s", "scrape_configs:"]
        for job, targets in jobs.items():
            lines += [f"  - job_name: {job}", "    static_configs:",
                      "      - targets: [" + ", ".join(f"'{t}'" for t in targets) + "]"]
        conf = directory / "prometheus.yml"
        conf.write_text("\n".join(lines) + "\n")
        self._log = open(directory / "prometheus.log", "ab")
        self.log_path = directory / "prometheus.log"
        self.proc = subprocess.Popen(
            [PROMETHEUS or "prometheus", f"--config.file={conf}",
             f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("prometheus did not start: "
                                     + self.log_path.read_text(errors="replace")[-2000:])
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> dict:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                doc = orjson.loads(resp.read())
        except urllib.error.HTTPError as err:  # a bad query: say which and why
            raise AssertionError(f"{params}: {err.code} {err.read()[:500]!r}") from None
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, promql: str) -> dict[tuple, float]:
        """Instant vector → {sorted label items without __name__: value}."""
        out = {}
        for r in self.api("query", query=promql)["result"]:
            metric = {k: v for k, v in r["metric"].items() if k != "__name__"}
            out[tuple(sorted(metric.items()))] = float(r["value"][1])
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def test_prometheus_scrapes_all_three_daemons(tmp_path):
    cluster = Cluster(tmp_path / "cluster")
    prom = None
    try:
        topic = unique_name("prom")
        n0, n1 = cluster.nodes
        for node, count in ((n0, 3), (n1, 4)):
            http(node, "POST", f"/topic/create?topic={topic}")
            http(node, "POST", f"/channel/create?topic={topic}&channel=ch")
            for i in range(count):
                http(node, "POST", f"/pub?topic={topic}", b"m%d" % i)
        prom = PrometheusServer(tmp_path / "prometheus", {
            "nsqd": [n0.http_address, n1.http_address],
            "nsqlookupd": [cluster.lookupd.http_address],
            "nsqadmin": [cluster.admin.http_address]})

        def all_up():
            targets = prom.api("targets")["activeTargets"]
            return len(targets) == 4 and all(t["health"] == "up" for t in targets) and targets
        targets = wait_for(all_up, 40, "every target scraped and up", 0.5)
        assert {t["labels"]["job"] for t in targets} == {"nsqd", "nsqlookupd", "nsqadmin"}

        sel = f'topic="{topic}"'
        per_node = wait_for(lambda: (r := prom.query(f"nsqd_topic_messages_total{{{sel}}}"))
                            and len(r) == 2 and r, 40, "nsqd series", 0.5)
        assert sorted(per_node.values()) == [3.0, 4.0]
        assert {dict(k)["instance"] for k in per_node} == {n0.http_address, n1.http_address}
        total = prom.query(f"sum(nsqd_channel_depth{{{sel},channel=\"ch\"}})")
        assert list(total.values()) == [7.0]
        assert list(prom.query(f"nsqadmin_topic_messages_total{{{sel}}}").values()) == [7.0]
        assert list(prom.query(f"nsqadmin_topic_nodes{{{sel}}}").values()) == [2.0]
        assert list(prom.query(f"nsqlookupd_topic_producers{{{sel}}}").values()) == [2.0]
        assert list(prom.query("nsqlookupd_producers").values()) == [2.0]
        assert len(prom.query('process_resident_memory_bytes > 0')) == 4

        # a rate the docs' dashboard uses moves once more messages arrive
        for i in range(20):
            http(n0, "POST", f"/pub?topic={topic}", b"more")
        wait_for(lambda: list(prom.query(f"sum(nsqd_topic_messages_total{{{sel}}})").values())
                 == [27.0], 40, "the new messages scraped", 0.5)
        rate = prom.query(f"sum(rate(nsqd_topic_messages_total{{{sel}}}[1m]))")
        assert list(rate.values())[0] > 0
        # the example queries of docs/metrics.md and the Grafana dashboard's all parse and run
        for expr in documented_queries():
            prom.api("query", query=expr)
    finally:
        if prom is not None:
            prom.stop()
        cluster.stop()


def documented_queries() -> list[str]:
    """PromQL of docs/metrics.md's example block (continuation lines joined) and of every panel
    and variable of docs/grafana-nsqpy.json, Grafana's variables replaced by plain values."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    block = (docs / "metrics.md").read_text().split("```promql\n", 1)[1].split("```", 1)[0]
    queries: list[str] = []
    for line in block.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith(" ") and queries:
            queries[-1] += " " + line.strip()
        else:
            queries.append(line)
    dash = orjson.loads((docs / "grafana-nsqpy.json").read_bytes())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", ())]
    exprs += [re.sub(r"^label_values\((.*), (\w+)\)$", r"count by (\2) (\1)", v["definition"])
              for v in dash["templating"]["list"]]
    subst = {"$__rate_interval": "1m", "$topic": ".*", "$channel": ".*"}
    for expr in exprs:
        for key, value in subst.items():
            expr = expr.replace(key, value)
        queries.append(expr)
    assert len(queries) > 20
    return queries
