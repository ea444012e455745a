"""nsqadmin with graphite, end to end (issue #12 item 2): nsqd's statsd -> the real statsd daemon
(npm) -> real Graphite (carbon-cache + graphite-web) -> nsqadmin ``--graphite-url`` -> Chromium.
"""

from __future__ import annotations

import re
import threading

import pytest

from admin.admin_util import NsqAdmin, request, wait_until
from admin.browser_util import expect
from admin.graphite_util import Graphite, graphite_statsd, missing
from helpers.polling import wait_for
from helpers.servers import Nsqd, Nsqlookupd, unique_name

pytestmark = pytest.mark.timeout(240)

STEP = 2  # seconds: nsqd's --statsd-interval = statsd's flush = whisper's step = nsqadmin's


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    why = missing()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("graphite")
    stop = []
    try:
        graphite = Graphite(tmp / "graphite", STEP)
        stop.append(graphite)
        statsd = graphite_statsd(tmp / "statsd", graphite, STEP)
        stop.append(statsd)
        lookupd = Nsqlookupd(tmp / "lookupd")
        stop.append(lookupd)
        nsqd = Nsqd(tmp / "nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}",
                    f"--statsd-address={statsd.address}", f"--statsd-interval={STEP}s",
                    "--statsd-prefix=nsq.%s")
        stop.append(nsqd)
        common = [f"--lookupd-http-address={lookupd.http_address}",
                  f"--graphite-url={graphite.url}", f"--statsd-interval={STEP}s"]
        admin = NsqAdmin(tmp / "admin", *common)
        stop.append(admin)
        # the proxied one also has live graphs: both kinds on one page
        proxied = NsqAdmin(tmp / "admin-proxy", *common, "--proxy-graphite", "--live-interval=1s")
        stop.append(proxied)
        yield graphite, nsqd, admin, proxied
    finally:
        for proc in reversed(stop):
            proc.stop()


def publish(nsqd, topic: str, count: int) -> None:
    body = b"\n".join(b"m%d" % i for i in range(count))
    assert request(f"http://{nsqd.http_address}/mpub?topic={topic}", "POST", body).status == 200


@pytest.fixture(scope="module")
def busy_topic(pipeline):
    """A topic with channel ``ch`` receiving 40 messages every 0.25 s while the tests run."""
    _, nsqd, _, _ = pipeline
    topic = unique_name("gr")
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel=ch"):
        assert request(f"http://{nsqd.http_address}{path}", "POST", b"").status == 200
    stopped = threading.Event()

    def run() -> None:
        while not stopped.wait(0.25):
            publish(nsqd, topic, 40)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield topic
    stopped.set()
    thread.join(5)


def rate_target(nsqd, topic: str) -> str:
    """The rate target upstream's topic page asks for, with the default formats."""
    return (f"sumSeries(stats.counters.nsq.127_0_0_1_{nsqd.http_port}.topic.{topic}"
            ".message_count.count)")


def test_api_graphite_rate_from_real_graphite(pipeline, busy_topic):
    graphite, nsqd, admin, _ = pipeline
    target = rate_target(nsqd, busy_topic)
    rates: list[float] = []

    def numeric_rate() -> bool:
        resp = request(f"{admin.url}/api/graphite?metric=rate&target={target}")
        if resp.status == 200 and re.fullmatch(r"\d+\.\d\d", resp.json()["rate"]):
            rates.append(float(resp.json()["rate"]))
            return 80 <= rates[-1] <= 320
        return False
    # 160 messages/s are published; a statsd flush may catch one nsqd push more or less, so
    # single intervals vary: wait for one in range, and none may be absurd
    wait_until(numeric_rate, timeout=60, what="a rate of about 160/s through statsd and graphite")
    assert all(r <= 480 for r in rates), rates
    # the gauges arrive under upstream's key shapes too
    depth = request(f"{graphite.url}/render?format=json&from=-60sec&target=stats.gauges.nsq."
                    f"127_0_0_1_{nsqd.http_port}.topic.{busy_topic}.channel.ch.depth").json()
    assert any(v for v, _ in depth[0]["datapoints"]), depth
    # a target graphite knows nothing about: upstream's 500
    resp = request(f"{admin.url}/api/graphite?metric=rate&target=no.such.metric")
    assert (resp.status, resp.json()) == (500, {"message": "INTERNAL_ERROR"})


def test_render_proxy(pipeline, busy_topic):
    graphite, nsqd, admin, proxied = pipeline
    target = rate_target(nsqd, busy_topic)
    # graphite knows the series once statsd flushed it (the test alone waits for that itself)
    direct = wait_for(lambda: (r := request(f"{graphite.url}/render?format=json&from=-60sec"
                                            f"&target={target}")).json() and r,
                      timeout=60, what="the series in graphite", interval=0.5)
    via = request(f"{proxied.url}/render?format=json&from=-60sec&target={target}")
    assert via.status == 200 and via.json()[0]["target"] == direct.json()[0]["target"]
    png = request(f"{proxied.url}/render?target={target}&width=120&height=20")
    assert png.status == 200 and png.headers["Content-Type"] == "image/png"
    assert png.body[:8] == b"\x89PNG\r\n\x1a\n"
    assert request(f"{admin.url}/render?target=x").status == 404  # no proxy without the flag


def _images_loaded(page) -> list[str]:
    """The graphite images on the page that did not load (empty when all did)."""
    page.wait_for_function("() => [...document.querySelectorAll('img.graphite')].every(i => i.complete)",
                           timeout=30_000)
    return page.eval_on_selector_all(
        "img.graphite", "els => els.filter(i => !i.naturalWidth).map(i => i.src)")


def _graph_data(src: str, base: str) -> list:
    """The datapoints behind a graph image: its own targets, asked as JSON up to now (the pages,
    as upstream's, draw until one minute ago, which is empty in a test that just started)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit

    parts = urlsplit(src)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k == "target"]
    query += [("from", "-120sec"), ("until", "now"), ("format", "json")]
    origin = f"{parts.scheme}://{parts.netloc}" if parts.netloc else base  # proxied: relative
    doc = request(f"{origin}{parts.path}?{urlencode(query)}").json()
    return [v for series in doc for v, _ in series["datapoints"] if v is not None]


def _rate_shown(page, url: str, selector: str) -> None:
    """Rates are asked once per page view; graphite may not have the interval yet: reload."""
    for _ in range(15):
        page.goto(url)
        cell = page.locator(selector)
        expect(cell).not_to_have_text("", timeout=60_000)
        if re.fullmatch(r"[1-9]\d*\.\d\d", cell.inner_text()):
            return
        page.wait_for_timeout(STEP * 1000)
    raise AssertionError(f"no rate in {selector}: {cell.inner_text()!r}")


@pytest.mark.parametrize("proxy", [False, True], ids=["direct", "proxy-graphite"])
def test_pages_show_graphite_rates_and_graphs(pipeline, busy_topic, page, proxy, tmp_path):
    graphite, nsqd, admin, proxied = pipeline
    base = (proxied if proxy else admin).url
    topic = busy_topic
    origin = base if proxy else graphite.url

    _rate_shown(page, f"{base}/topics/{topic}", "tr.total td.graphite-rate")
    imgs = page.locator("img.graphite")
    assert imgs.count() >= 4 + 7  # topic rows' depth/messages, the channel's seven
    assert all(src.startswith(origin + "/render?") for src in
               page.eval_on_selector_all("img.graphite", "els => els.map(i => i.src)"))
    assert _images_loaded(page) == []
    large = page.locator("tr.graph-row a.graphite-link").first.get_attribute("href")
    assert "height=450" in large and "summarize" in large
    # the graphs ask graphite for series that exist: the channel's depth grows, messages flow
    channel_graphs = page.locator('tr[data-channel="ch"] + tr.graph-row img.graphite')
    depth_src = channel_graphs.nth(0).get_attribute("src")
    assert "channel.ch.depth" in depth_src
    wait_until(lambda: any(v > 0 for v in _graph_data(depth_src, base)), timeout=30,
               what="channel depth in graphite")
    messages_src = channel_graphs.nth(5).get_attribute("src")
    assert "channel.ch.message_count" in messages_src
    assert any(v > 0 for v in _graph_data(messages_src, base))
    page.screenshot(path=str(tmp_path / "graphite-topic.png"), full_page=True)

    if proxy:  # live graphs next to graphite's, each with its own Rate column
        expect(page.locator("th", has_text="Live Rate")).to_have_count(2)  # both tables
        expect(page.locator('tr.total td.live[data-metric="rate"] svg.sparkline')).to_have_count(1)

    _rate_shown(page, f"{base}/topics/{topic}/ch", "tr.total td.graphite-rate")
    assert page.locator("tr.graph-row img.graphite").count() >= 14  # node + total rows
    assert _images_loaded(page) == []

    page.goto(f"{base}/")
    row = page.locator(f'tr[data-topic="{topic}"]')
    expect(row.locator("img.graphite")).to_have_count(2)
    expect(row.locator("td.graphite-rate")).to_have_text(re.compile(r"^(\d+\.\d\d|N/A)$"))

    page.goto(f"{base}/nodes/{nsqd.http_address}")
    expect(page.locator(".mem-graphs img.graphite")).to_have_count(4)
    expect(page.locator("tr.graph-row img.graphite").first).to_be_visible()
    assert _images_loaded(page) == []

    # the timeframe menu: "off" removes graphite from the pages, as upstream's
    page.goto(f"{base}/topics/{topic}")
    page.select_option("#graph-interval", "off")
    page.wait_for_load_state()
    expect(page.locator("#graph-interval")).to_have_value("off")
    expect(page.get_by_role("heading", name="Topic Message Queue")).to_be_visible()
    expect(page.locator("img.graphite")).to_have_count(0)
    page.evaluate("localStorage.removeItem('graph_interval')")
