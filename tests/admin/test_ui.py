"""nsqadmin's pages as a user sees them: headless Chromium (Debian's) driven by Playwright.

Only Playwright's driver is used (never ``playwright install``); the browser is /usr/bin/chromium.
Skipped, with the reason, only when one of the two is missing.
"""

from __future__ import annotations

import re
import socket
from urllib.parse import quote

import pytest

from admin.admin_util import nsqd_stats, request, start_cluster, wait_until
from admin.browser_util import doc_screenshot, expect
from helpers.servers import unique_name

pytestmark = pytest.mark.timeout(180)  # Chromium beside the rest of the suite


@pytest.fixture(scope="module")
def open_cluster(tmp_path_factory, browser):
    """A cluster whose nsqadmin has no --admin-user: every visitor may act."""
    cl, started = start_cluster(tmp_path_factory.mktemp("admin_ui"), with_sink=False)
    yield cl
    for proc in reversed(started):
        proc.stop()


def test_topics_page_then_pause_topic_and_channel(open_cluster, page, tmp_path):
    cluster = open_cluster
    topic = unique_name("ui")
    cluster.create_channel(topic, "workers")
    cluster.publish(cluster.nodes[0], topic, 4)
    cluster.publish(cluster.nodes[1], topic, 6)
    cluster.wait_registered(topic)
    cluster.wait_in_channel(topic, "workers", [4, 6])

    # the topics list shows the topic with its depth summed over both nsqd
    page.goto(cluster.admin.url + "/")
    row = page.locator(f'tr[data-topic="{topic}"]')
    expect(row).to_be_visible()
    expect(row.locator("td").nth(2)).to_have_text("10")  # channel depth
    expect(row.locator("td").nth(4)).to_have_text("10")  # messages

    # into the topic: one row per nsqd, the channel with its summed depth
    row.get_by_role("link", name=topic).click()
    expect(page).to_have_url(f"{cluster.admin.url}/topics/{topic}")
    expect(page.get_by_role("heading", name="Topic Message Queue")).to_be_visible()
    for node in cluster.nodes:
        expect(page.locator(f'tr[data-node="{node.http_address}"]')).to_be_visible()
    channel_row = page.locator('tr[data-channel="workers"]')
    expect(channel_row.locator("td").nth(1)).to_have_text("10")

    # Pause asks first; cancelling does nothing
    page.get_by_role("button", name="Pause Topic").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(f'pause topic "{topic}"')
    page.screenshot(path=str(tmp_path / "confirm_dialog.png"))
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert not any(nsqd_stats(n, topic)["paused"] for n in cluster.nodes)

    page.get_by_role("button", name="Pause Topic").click()
    dialog.get_by_role("button", name="Confirm").click()
    expect(page.locator("#flash")).to_contain_text("Topic paused.")
    expect(page.get_by_role("button", name="UnPause Topic")).to_be_visible()
    wait_until(lambda: all(nsqd_stats(n, topic)["paused"] for n in cluster.nodes),
               what="topic paused on every nsqd")
    shot = tmp_path / "topic_paused.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")

    # the channel page: pause the channel there
    channel_row.get_by_role("link", name="workers").click()
    expect(page.get_by_role("heading", name="Channel Message Queue")).to_be_visible()
    page.get_by_role("button", name="Pause Channel").click()
    dialog.get_by_role("button", name="Confirm").click()
    expect(page.locator("#flash")).to_contain_text("Channel paused.")
    wait_until(lambda: all(nsqd_stats(n, topic)["channels"][0]["paused"] for n in cluster.nodes),
               what="channel paused on every nsqd")
    page.screenshot(path=str(tmp_path / "channel_paused.png"), full_page=True)

    # back in the browser history, then the nodes page lists both nsqd
    page.go_back()
    expect(page.get_by_role("button", name="UnPause Topic")).to_be_visible()
    page.get_by_role("link", name="Nodes").click()
    for node in cluster.nodes:
        expect(page.locator(f'tr[data-node="{node.http_address}"]')).to_be_visible()


def test_non_admin_sees_no_action_buttons(page, cluster):
    """With --admin-user set, a visitor without the ACL header gets a read-only page."""
    topic = unique_name("ro")
    cluster.create_channel(topic, "ch")
    cluster.publish(cluster.nodes[0], topic, 1)
    cluster.wait_registered(topic)
    page.goto(f"{cluster.admin.url}/topics/{topic}")
    expect(page.get_by_role("heading", name="Channel Message Queues")).to_be_visible()
    expect(page.locator("button[data-action]")).to_have_count(0)


def test_host_labels_keep_the_port(open_cluster, page):
    """Upstream's label: ``hostname:port (address:port)``, the address linking to the node page,
    so two nsqd on one host are told apart; ``hostname:port`` alone (linked) when the hostname
    is the address."""
    cluster = open_cluster
    topic = unique_name("label")
    cluster.create_channel(topic, "ch")
    cluster.wait_registered(topic)
    hostname = socket.gethostname()
    for path in (f"/topics/{topic}", f"/topics/{topic}/ch"):
        page.goto(cluster.admin.url + path)
        for node in cluster.nodes:
            cell = page.locator(f'tr[data-node="{node.http_address}"] td').first
            expect(cell.locator(".node-label")).to_have_text(
                f"{hostname}:{node.http_port} ({node.http_address})")
            link = cell.get_by_role("link", name=node.http_address)
            expect(link).to_have_attribute("href", "/nodes/" + quote(node.http_address, safe=""))
    same = page.evaluate("() => { const el = NSQ.nodeLabel({node: 'box:4151', hostname: 'Box'});"
                         " return [el.tagName, el.textContent, el.getAttribute('href')]; }")
    assert same == ["A", "Box:4151", "/nodes/box%3A4151"]
    ipv6 = page.evaluate("() => NSQ.nodeLabel({node: '[::1]:4151', hostname: 'vm'}).textContent")
    assert ipv6 == "vm:4151 ([::1]:4151)"


def test_header_links_to_documentation_and_github(open_cluster, page):
    page.goto(open_cluster.admin.url + "/nodes")
    header = page.locator("header.topbar")
    expect(header.get_by_role("link", name="Documentation")).to_have_attribute(
        "href", "https://nsq.io/")
    expect(header.get_by_role("link", name="GitHub")).to_have_attribute(
        "href", "https://github.com/nsqio/nsq")
    expect(header.locator("#version")).to_have_text("v1.3.0")


def counter_total(cluster) -> int:
    doc = request(f"{cluster.admin.url}/api/counter").json()
    return sum(s["message_count"] for s in doc["stats"].values())


def test_counter_runs_up_to_the_total(open_cluster, page, tmp_path):
    """Upstream's counter: split-flap digits of the messages processed, counting up through the
    values in between when more messages come in, then resting on the new total."""
    cluster = open_cluster
    topic = unique_name("count")
    cluster.create_channel(topic, "ch")
    cluster.wait_registered(topic)
    page.goto(cluster.admin.url + "/counter")
    numbers = page.locator(".counter .numbers")
    expect(numbers).to_have_attribute("data-value", str(counter_total(cluster)))
    start = int(numbers.get_attribute("data-value"))
    digits = page.evaluate("() => [...document.querySelectorAll('.counter .number:not([hidden])')]"
                           ".map(d => d.querySelector('.top').textContent + d.querySelector('.bottom').textContent)")
    assert "".join(d[0] for d in digits) == str(start) and all(d[0] == d[1] for d in digits)
    expect(page.locator(".counter")).to_contain_text("Messages Processed")
    # a counter page left open while messages flow: sample what it shows
    page.evaluate("""() => { window.__shown = [];
        const el = document.querySelector('.counter .numbers');
        new MutationObserver(() => window.__shown.push(+el.dataset.value))
            .observe(el, {attributes: true, attributeFilter: ['data-value']}); }""")
    for _ in range(4):
        cluster.publish(cluster.nodes[0], topic, 500)
        page.wait_for_timeout(700)
    end = start + 2000
    wait_until(lambda: counter_total(cluster) >= end, what="messages counted")
    expect(numbers).to_have_attribute("data-value", str(counter_total(cluster)), timeout=30_000)
    shown = page.evaluate("() => window.__shown")
    assert shown == sorted(shown), "the counter only counts up"
    between = {v for v in shown if start < v < end and v % 500}
    assert len(between) >= 5, f"the digits ran through the values in between: {shown[:40]}"
    expect(page.locator(".counter .messagerate")).to_have_text(re.compile(r"^[\d,]+ msgs/sec$"))
    doc_screenshot(page, tmp_path, "nsqadmin-counter.png")
