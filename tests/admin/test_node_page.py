"""The node pages as upstream shows them (issue #12 item 5), checked in headless Chromium.

A real cluster: nsqlookupd, an nsqd with TLS registered with it, nsqadmin. Three real clients
subscribe to one channel: one over TLS (raw V2 upgraded with the test CA), one with snappy and one
with deflate (nsqpy's own consumer). The node page must show each channel's Deferred / Requeued /
Timed Out, one row per client with its attributes and counts, and a tombstone button per topic that
really tombstones the topic in nsqlookupd; the nodes list its topic-count badge and the
lookupd-connections popover; the channel page the client ids and the end-to-end latency columns.
"""

from __future__ import annotations

import re

import pytest

from admin.admin_util import NsqAdmin, request, wait_until
from admin.browser_util import expect
from helpers.servers import Nsqlookupd, unique_name
from nsqpy.client.consumer import Consumer
from nsqpy.client.threaded import LoopThread
from nsqpy.protocol.frames import FRAME_TYPE_MESSAGE
from security.support import OPENSSL, SecureNsqd, make_certs, tls_wire

pytestmark = pytest.mark.timeout(240)  # Chromium beside the rest of the suite


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    if OPENSSL is None:
        pytest.skip("openssl CLI missing (needed for the TLS client)")
    tmp = tmp_path_factory.mktemp("node_page")
    certs = make_certs(tmp / "certs")
    started = []
    try:
        lookupd = Nsqlookupd(tmp / "lookupd")
        started.append(lookupd)
        nsqd = SecureNsqd(tmp / "nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}",
                          "--e2e-processing-latency-percentile=0.99",
                          "--e2e-processing-latency-percentile=0.5", certs=certs)
        started.append(nsqd)
        admin = NsqAdmin(tmp / "admin", f"--lookupd-http-address={lookupd.http_address}")
        started.append(admin)
        yield lookupd, nsqd, admin, certs
    finally:
        for proc in reversed(started):
            proc.stop()


def _topic_on_nsqd(nsqd, topic: str) -> bool:
    doc = request(f"http://{nsqd.http_address}/stats?format=json&topic={topic}").json()
    return bool(doc.get("topics"))


def _lookupd_producers(lookupd, topic: str) -> int:
    resp = request(f"http://{lookupd.http_address}/lookup?topic={topic}")
    return len(resp.json()["producers"]) if resp.status == 200 else 0


def _lookupd_topics(lookupd, nsqd) -> set[str]:
    doc = request(f"http://{lookupd.http_address}/nodes").json()
    return {t for p in doc["producers"] if p["tcp_port"] == nsqd.tcp_port for t in p["topics"]}


def test_node_pages_show_clients_channels_and_tombstone(tls_cluster, page, tmp_path):
    lookupd, nsqd, admin, certs = tls_cluster
    topic, other = unique_name("node"), unique_name("other")
    base = f"http://{nsqd.http_address}"
    for t in (topic, other):
        assert request(f"{base}/topic/create?topic={t}", "POST", b"").status == 200
    assert request(f"{base}/channel/create?topic={topic}&channel=work", "POST", b"").status == 200
    body = b"\n".join(b"m%d" % i for i in range(20))
    assert request(f"{base}/mpub?topic={topic}", "POST", body).status == 200
    assert request(f"{base}/pub?topic={topic}&defer=60000", "POST", b"later").status == 200

    # a TLS client: FIN one message, REQ another, keep a third in flight at RDY 1
    wire, _ = tls_wire(nsqd.tcp_address, certs.client_context(), client_id="tls-worker",
                       hostname="tls.example", user_agent="raw-tls/1.0")
    wire.sub(topic, "work", rdy=3)
    ids = []
    for _ in range(3):
        frame = wire.read_frame()
        assert frame.frame_type == FRAME_TYPE_MESSAGE
        ids.append(frame.data[10:26])
    wire.cmd(b"RDY", b"1")  # so that nothing more arrives: in flight stays at 1
    wire.cmd(b"FIN", ids[0])
    wire.cmd(b"REQ", ids[1], b"0")

    loop = LoopThread("node-page-test")
    consumers = []

    async def handler(msg):  # nsqpy's consumer finishes it when the handler returns
        return None

    try:
        for cid, kwargs in (("snappy-worker", {"snappy": True}), ("deflate-worker", {"deflate": True})):
            c = Consumer(topic, "work", handler, nsqd_tcp_addresses=[nsqd.tcp_address],
                         max_in_flight=2, client_id=cid, hostname=f"{cid}.example",
                         user_agent="parity-test/1.0", **kwargs)
            loop.run(c.start(), timeout=60)
            consumers.append(c)

        def clients_ready() -> bool:
            doc = request(f"{base}/stats?format=json&topic={topic}&channel=work").json()
            channel = doc["topics"][0]["channels"][0]
            clients = channel["clients"]
            if len(clients) == 3 and all(c["finish_count"] > 0 for c in clients):
                return True
            if len(clients) == 3 and channel["depth"] == 0:
                # the first consumer can take every message before the second has subscribed
                # (a busy machine): one more for whoever has none. The TLS client, at RDY 1
                # with one in flight, is sent none of them.
                assert request(f"{base}/pub?topic={topic}", "POST", b"more").status == 200
            return False
        wait_until(clients_ready, timeout=60, what="three clients finishing messages")

        # the nodes page shows what nsqlookupd lists when it loads (no refresh): both topics
        # registered first (nsqd registers in the background, late on a busy machine)
        wait_until(lambda: _lookupd_topics(lookupd, nsqd) >= {topic, other},
                   what="both topics registered with nsqlookupd")

        # --- the nodes list: topic-count badge and the lookupd-connections popover
        page.goto(f"{admin.url}/nodes")
        row = page.locator(f'tr[data-node="{nsqd.http_address}"]')
        page.wait_for_function(
            "n => { const r = document.querySelector(`tr[data-node=\"${n}\"] .count`);"
            " return r && r.textContent === '2'; }", arg=nsqd.http_address)
        expect(row.locator(".count")).to_have_text("2")
        expect(row.locator("a.topic-label")).to_have_count(2)
        popover = row.locator(".popover")
        expect(popover).to_be_hidden()
        row.locator("button.conn-count").click()
        expect(popover).to_be_visible()
        expect(popover).to_contain_text("127.0.0.1:")
        expect(row.locator("button.conn-count")).to_have_text("1")
        expect(row.locator("button.conn-count")).not_to_have_class("conn-count inconsistent")

        # --- the node page
        row.get_by_role("link", name="127.0.0.1").click()
        expect(page).to_have_url(f"{admin.url}/nodes/{nsqd.http_address}")
        channel = page.locator('tr.channel[data-channel="work"]')
        cells = channel.locator("td")
        expect(cells.nth(5)).to_have_text("1")  # Deferred: the DPUB
        expect(cells.nth(6)).not_to_have_text("0")  # Requeued: the TLS client's REQ
        expect(cells.nth(7)).to_have_text("0")  # Timed Out
        expect(cells.nth(9)).to_have_text("3")  # Connections
        clients = page.locator("tr.client")
        expect(clients).to_have_count(3)
        tls_row = page.locator('tr.client[data-client="tls-worker"]')
        expect(tls_row.locator("td").nth(1)).to_have_text("tls.example (tls-worker)")
        expect(tls_row.locator("td").nth(2)).to_have_text("raw-tls/1.0")
        expect(tls_row.locator('[data-attr="tls"]')).to_have_text("TLS")
        expect(tls_row.locator('[data-attr="tls"]')).to_have_attribute("title", re.compile("mutual:"))
        expect(tls_row.locator("td").nth(4)).to_have_text("1")  # in flight
        expect(tls_row.locator("td").nth(5)).to_have_text("1")  # ready count
        expect(tls_row.locator("td").nth(6)).to_have_text("1")  # requeued
        expect(tls_row.locator("td").nth(7)).to_have_text("1")  # finished
        expect(tls_row.locator("td").nth(9)).to_have_text(
            re.compile(r"^(\d+h)?(\d+m)?\d+(\.\d+)?(ns|us|ms|s)$"))  # connected for
        snappy = page.locator('tr.client[data-client="snappy-worker"]')
        expect(snappy.locator('[data-attr="snappy"]')).to_have_text("Snappy")
        expect(snappy.locator('[data-attr="deflate"]')).to_have_count(0)
        expect(snappy.locator("td").nth(2)).to_have_text("parity-test/1.0")
        deflate = page.locator('tr.client[data-client="deflate-worker"]')
        expect(deflate.locator('[data-attr="deflate"]')).to_have_text("Deflate")
        expect(deflate.locator('[data-attr="tls"]')).to_have_count(0)
        shot = tmp_path / "node_page.png"
        page.screenshot(path=str(shot), full_page=True)

        # the topic without channels has its notice and its own tombstone button
        expect(page.locator(f'tr.topic[data-topic="{other}"]')).to_be_visible()
        page.locator(f'button[data-tombstone="{other}"]').click()
        dialog = page.locator("#confirm-dialog")
        expect(dialog).to_contain_text(f'Tombstone {nsqd.http_address} for topic "{other}"')
        dialog.get_by_role("button", name="Confirm").click()
        expect(page.locator("#flash")).to_contain_text(f'Node tombstoned for topic "{other}".')
        # tombstoned in nsqlookupd and deleted on that nsqd: no producer is listed any more
        wait_until(lambda: not _topic_on_nsqd(nsqd, other), what="topic deleted on the nsqd")
        wait_until(lambda: _lookupd_producers(lookupd, other) == 0, what="no producer in lookupd")
        assert _topic_on_nsqd(nsqd, topic) and _lookupd_producers(lookupd, topic) == 1

        # --- the channel page shows client ids next to host:port, unless the id only repeats
        # the (short) hostname, as upstream
        page.goto(f"{admin.url}/topics/{topic}/work")
        expect(page.locator('tr[data-client="tls-worker"] td').first).to_have_text(
            re.compile(r"^tls\.example:\d+ \(tls-worker\)$"))
        expect(page.locator('tr[data-client="snappy-worker"] td').first).to_have_text(
            re.compile(r"^snappy-worker\.example:\d+$"))
        expect(page.locator('tr[data-client="tls-worker"] [data-attr="tls"]')).to_be_visible()
        # end-to-end latency columns, one per percentile nsqd is configured with, as upstream's
        headers = page.locator("table.data").first.locator("th")
        expect(headers.filter(has_text="E2E 99th")).to_have_count(1)
        expect(headers.filter(has_text="E2E 50th")).to_have_count(1)
        latency = page.locator("tr.total td.e2e").first
        expect(latency).to_have_text(re.compile(r"^(\d+h)?(\d+m)?\d+(\.\d+)?(ns|us|ms|s)$"))
        assert latency.get_attribute("title").startswith("99th: min = ")
    finally:
        for c in consumers:
            loop.run(c.close(), timeout=60)
        loop.stop()
        wire.close()
