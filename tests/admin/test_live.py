"""Live graphs without graphite (issue #12 item 4): ``--live-interval``.

The history is checked on its own (stats documents in, series out), then a real cluster is
sampled by a real nsqadmin, and headless Chromium watches the pages update without a reload.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest

from admin.admin_util import request, start_cluster, wait_until
from admin.browser_util import doc_screenshot, expect
from helpers.wire import Wire
from helpers.servers import unique_name
from nsqpy.admin.stats import Producer, TopicStats
from nsqpy.admin.live import LiveHistory
from nsqpy.client.consumer import Consumer
from nsqpy.client.threaded import LoopThread

pytestmark = pytest.mark.timeout(240)  # Chromium beside the rest of the suite


def _stats(node: str, depth: int, msgs: int, chan_msgs: int, in_flight: int) -> TopicStats:
    raw = {"topic_name": "t", "depth": depth, "backend_depth": 0, "message_count": msgs,
           "channels": [{"channel_name": "c", "depth": depth, "backend_depth": 0,
                         "in_flight_count": in_flight, "deferred_count": 0, "requeue_count": 0,
                         "timeout_count": 0, "message_count": chan_msgs, "clients": []}]}
    host, port = node.split(":")
    return TopicStats.from_nsqd(raw, node, Producer(hostname=host, broadcast_address=host,
                                                     http_port=int(port)), time.time())


def test_history_rates_sums_and_bounds():
    h = LiveHistory(points=3)
    for i, now in enumerate((100.0, 102.0, 104.0, 106.0)):
        h.record(now, [_stats("a:1", 10 + i, 100 * i, 50 * i, 1),
                       _stats("b:2", 5, 20 * i, 20 * i, 2)])
    [total] = h.query(topic="t", channel="", node="*")
    assert total["t"] == [102.0, 104.0, 106.0]  # bounded to the last 3 points
    assert total["depth"] == [16, 17, 18]
    assert total["in_flight_count"] == [3, 3, 3]
    assert total["rate"] == [None, 60.0, 60.0]  # (100 + 20) messages per 2 s
    assert total["message_count"] == [120, 240, 360]
    [node_a] = h.query(topic="t", channel="", node="a:1")
    assert node_a["rate"] == [None, 50.0, 50.0]
    [chan] = h.query(topic="t", channel="c", node="*")
    assert chan["rate"] == [None, 35.0, 35.0] and chan["in_flight_count"] == [3, 3, 3]
    [cluster] = h.query(topic="*")
    assert cluster["message_count"][-1] == 210  # the counter page's sum over channels
    # a counter that went down (nsqd restarted) is no rate, not a negative one
    h.record(108.0, [_stats("a:1", 0, 0, 0, 0), _stats("b:2", 5, 60, 60, 2)])
    [total] = h.query(topic="t", channel="", node="*")
    assert total["rate"][-1] is None
    # a topic gone for a whole history is forgotten
    for now in (110.0, 112.0, 114.0, 116.0, 118.0):
        h.record(now, [])
    assert h.query(topic="t") == []


def test_live_api_is_off_by_default(cluster):
    assert request(f"{cluster.admin.url}/api/live").status == 404
    # nsqpy's own options stay out of /config/:opt, which answers as upstream does for them
    assert request(f"{cluster.admin.url}/config/live_interval").status == 400


@pytest.fixture(scope="module")
def live_cluster(tmp_path_factory):
    # e2e percentiles add two columns to every table: the widest pages nsqadmin draws
    cl, started = start_cluster(tmp_path_factory.mktemp("admin_live"), "--live-interval=1s",
                                "--live-history=2m", with_sink=False,
                                nsqd_flags=("--e2e-processing-latency-percentile=0.99",
                                            "--e2e-processing-latency-percentile=0.5",
                                            "--msg-timeout=5m"))
    yield cl
    for proc in reversed(started):
        proc.stop()


class Publisher:
    """Publishes to a topic on every nsqd, in a thread, until stopped."""

    def __init__(self, cluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(0.2):
            for node in self.cluster.nodes:
                self.cluster.publish(node, self.topic, 10)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(5)


def test_live_api_serves_rates_from_real_nsqd(live_cluster):
    cl = live_cluster
    topic = unique_name("live")
    cl.create_channel(topic, "ch")
    cl.wait_registered(topic)
    pub = Publisher(cl, topic)
    try:
        def series():
            doc = request(f"{cl.admin.url}/api/live?topic={topic}&node=*").json()
            return {(s["topic"], s["channel"], s["node"]): s for s in doc["series"]}

        def rate_seen() -> bool:
            s = series().get((topic, "", "*"))
            return bool(s) and any(r and r > 10 for r in s["rate"])
        wait_until(rate_seen, timeout=20, what="a publish rate in /api/live")
        got = series()
        assert set(got) == {(topic, "", "*"), (topic, "ch", "*")}
        assert got[(topic, "ch", "*")]["depth"][-1] > 0
        doc = request(f"{cl.admin.url}/api/live?topic={topic}").json()
        nodes = {s["node"] for s in doc["series"]}
        assert nodes == {"*"} | {n.http_address for n in cl.nodes}
        assert doc["interval"] == 1.0 and doc["message"] == ""
        # the topics' own series only, and only the newest points
        doc = request(f"{cl.admin.url}/api/live?topic={topic}&channel=&points=2").json()
        assert {(s["channel"], s["node"]) for s in doc["series"]} == \
            {("", "*")} | {("", n.http_address) for n in cl.nodes}
        assert all(len(s["t"]) <= 2 and len(s["depth"]) == len(s["t"]) for s in doc["series"])
        assert request(f"{cl.admin.url}/api/live?points=x").json() == {"message": "INVALID_ARG_POINTS"}
    finally:
        pub.stop()


def test_pages_update_live_without_reload(live_cluster, page, tmp_path):
    cl = live_cluster
    topic = unique_name("livepage")
    cl.create_channel(topic, "workers")
    cl.create_channel(topic, "archive")
    cl.wait_registered(topic)
    pub = Publisher(cl, topic)

    async def slow(msg):  # a consumer slower than the publisher: in flight, depth growing
        await asyncio.sleep(0.1)

    loop = LoopThread("live-page-test")
    consumer = Consumer(topic, "workers", slow, nsqd_tcp_addresses=[n.tcp_address for n in cl.nodes],
                        max_in_flight=8, concurrency=8)
    loop.run(consumer.start(), timeout=60)
    try:
        page.goto(f"{cl.admin.url}/topics/{topic}")
        total = page.locator("tr.total")
        rate = total.locator('td.live[data-metric="rate"] .live-num')
        expect(rate).to_have_text(re.compile(r"^[1-9]\d*\.\d\d$"), timeout=60_000)
        expect(total.locator("svg.sparkline polyline").first).to_have_attribute(
            "points", re.compile(r"\d+(\.\d)?,\d+(\.\d)? .+"), timeout=60_000)
        # the page is not reloaded: the same element shows a newer, larger channel depth
        depth_sel = 'tr[data-channel="workers"] td.live[data-metric="depth"] .live-num'
        page.evaluate("sel => { window.__depthCell = document.querySelector(sel); }", depth_sel)
        first = int(page.locator(depth_sel).inner_text().replace(",", ""))
        page.wait_for_function(
            "([sel, n]) => { const el = document.querySelector(sel);"
            " return el === window.__depthCell && parseInt(el.textContent.replace(/,/g, '')) > n; }",
            arg=[depth_sel, first], timeout=60_000)
        for name in ("workers", "archive"):
            row = page.locator(f'tr[data-channel="{name}"]')
            expect(row.locator('td.live[data-metric="rate"] .live-num')).to_have_text(
                re.compile(r"^\d+\.\d\d$"))
            expect(row.locator("svg.sparkline")).to_have_count(4)  # depth, in-flight, deferred, rate
        messages = page.locator('tr.total td.live[data-metric="message_count"] .live-num')
        before = int(messages.inner_text().replace(",", ""))
        page.wait_for_function(
            "([sel, n]) => parseInt(document.querySelector(sel).textContent.replace(/,/g, '')) > n",
            arg=['tr.total td.live[data-metric="message_count"] .live-num', before], timeout=60_000)
        expect(page.locator('tr[data-channel="workers"] td.live[data-metric="in_flight_count"] .live-num')
               ).not_to_have_text("0", timeout=60_000)
        page.wait_for_timeout(6000)  # a few more points for the picture
        doc_screenshot(page, tmp_path, "nsqadmin-live-topic.png")
        page.goto(f"{cl.admin.url}/topics/{topic}/workers")
        expect(page.locator('tr.total td.live[data-metric="rate"] svg.sparkline')).to_have_count(
            1, timeout=60_000)
        page.wait_for_timeout(3000)
        doc_screenshot(page, tmp_path, "nsqadmin-live-channel.png")

        # the topics list, the channel page, the node page and the counter have theirs too
        node = cl.nodes[0].http_address
        positive = re.compile(r"^[1-9]\d*\.\d\d$")
        for path, selector in (
                ("/", f'tr[data-topic="{topic}"] td.live[data-metric="rate"]'),
                (f"/topics/{topic}/workers", 'tr.total td.live[data-metric="rate"]'),
                (f"/nodes/{node}", f'tr.topic[data-topic="{topic}"] td.live[data-metric="rate"]'),
                ("/counter", '.counter div.live')):
            page.goto(cl.admin.url + path)
            expect(page.locator(selector + " .live-num")).to_have_text(positive, timeout=60_000)
            expect(page.locator(selector + " svg.sparkline")).to_have_count(1)
    finally:
        pub.stop()
        loop.run(consumer.close(), timeout=60)
        loop.stop()


FITS_PAGE = """() => {
    const doc = document.documentElement;
    const tables = [...document.querySelectorAll('table.data')];
    return {page: [doc.scrollWidth, doc.clientWidth],
            tables: tables.map(t => [t.getBoundingClientRect().right, doc.clientWidth])};
}"""

COLUMN_SCALES = """() => {
    const out = {};
    for (const svg of document.querySelectorAll('td.live svg.sparkline')) {
        const td = svg.closest('td');
        const key = td.closest('table').dataset.liveTable + '/' + td.dataset.metric;
        const line = svg.querySelector('polyline').getAttribute('points').trim().split(' ');
        (out[key] = out[key] || []).push({top: svg.dataset.top, ys: line.map(p => +p.split(',')[1]),
                                         height: +svg.getAttribute('height'),
                                         row: td.parentElement.dataset.channel || ''});
    }
    return out;
}"""


def test_live_tables_fit_the_page_and_share_a_labelled_scale(live_cluster, page):
    """At a normal viewport no table makes the page scroll sideways; every column of sparklines
    has one scale from 0 (the bottom edge) to a top shown in the column's header, so a
    constant 1 draws between a constant 0 (bottom) and the top, not at the top."""
    cl = live_cluster
    topic = unique_name("livefit")
    for channel in ("held", "idle"):
        cl.create_channel(topic, channel)
    cl.publish(cl.nodes[0], topic, 3)
    cl.wait_registered(topic)
    cl.wait_in_channel(topic, "held", [3, 0])
    holder = Wire(cl.nodes[0].tcp_address)  # one message in flight on "held", for minutes
    try:
        holder.sub(topic, "held", rdy=1)
        holder.read_message()
        page.set_viewport_size({"width": 1280, "height": 800})
        page.goto(f"{cl.admin.url}/topics/{topic}")
        head = page.locator('th[data-scale-metric="in_flight_count"]').last
        expect(head.locator(".scale")).to_have_text("0–2", timeout=60_000)
        page.wait_for_timeout(2500)  # a few points in every series
        sizes = page.evaluate(FITS_PAGE)
        assert sizes["page"][0] <= sizes["page"][1], sizes
        assert all(right <= width for right, width in sizes["tables"]), sizes
        scales = page.evaluate(COLUMN_SCALES)
        in_flight = [s for s in scales["channels/in_flight_count"]]
        assert {s["top"] for s in in_flight} == {"2"}
        by_row = {s["row"]: s for s in in_flight}
        held, idle = by_row["held"], by_row["idle"]
        bottom = max(idle["ys"])
        assert set(idle["ys"]) == {bottom} and bottom >= idle["height"] - 2  # 0: the bottom edge
        held_ys = list(held["ys"])
        while held_ys and held_ys[0] == bottom:  # sampled (every 1s) before the message was held
            held_ys.pop(0)
        assert len(held_ys) >= 2 and len(set(held_ys)) == 1, held["ys"]
        assert 3 < held_ys[0] < bottom - 3  # 1 of 2: halfway, not at the top
        for key, column in scales.items():  # every column has one scale
            assert len({s["top"] for s in column}) == 1, key
        for path in (f"/topics/{topic}/held", f"/nodes/{cl.nodes[0].http_address}", "/"):
            page.goto(cl.admin.url + path)
            expect(page.locator("td.live svg.sparkline").first).to_be_visible(timeout=60_000)
            sizes = page.evaluate(FITS_PAGE)
            assert sizes["page"][0] <= sizes["page"][1], (path, sizes)
            assert all(right <= width for right, width in sizes["tables"]), (path, sizes)
    finally:
        holder.close()


def test_live_history_shorter_than_interval_is_refused():
    import subprocess

    from helpers.servers import VENV_BIN

    proc = subprocess.run([str(VENV_BIN / "nsqadmin"), "--nsqd-http-address=127.0.0.1:1",
                           "--http-address=127.0.0.1:0", "--live-interval=10s",
                           "--live-history=5s"], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 1
    assert "--live-interval must be >= 0 and not above --live-history" in proc.stderr
