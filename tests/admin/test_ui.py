"""nsqadmin's pages as a user sees them: headless Chromium (Debian's) driven by Playwright.

Only Playwright's driver is used (never ``playwright install``); the browser is /usr/bin/chromium.
Skipped, with the reason, only when one of the two is missing.
"""

from __future__ import annotations

import pytest

from admin.admin_util import nsqd_stats, start_cluster, wait_until
from admin.browser_util import expect
from helpers.servers import unique_name

pytestmark = pytest.mark.timeout(60)


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
