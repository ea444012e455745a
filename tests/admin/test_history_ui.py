"""nsqadmin and nsqd's history (docs/history.md): the topic page's History section and the
channel page's rewind action, in headless Chromium, against two nsqd with --retention."""

from __future__ import annotations

import pytest

from admin.admin_util import nsqd_stats, request, start_cluster, wait_until
from admin.browser_util import expect
from helpers.servers import unique_name
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def history_cluster(tmp_path_factory, browser):
    cl, started = start_cluster(tmp_path_factory.mktemp("admin_history"), with_sink=False,
                                nsqd_flags=("--retention=1h",))
    yield cl
    for proc in reversed(started):
        proc.stop()


def _drain(node, topic: str, channel: str, n: int) -> list[bytes]:
    w = Wire(node.tcp_address, timeout=10)
    w.sub(topic, channel, 50)
    got = []
    while len(got) < n:
        m = w.read_message()
        got.append(m.body)
        w.cmd(b"FIN", m.id)
    w.close()
    return got


def test_history_section_and_rewind(history_cluster, page):
    cluster = history_cluster
    topic = unique_name("hist")
    cluster.create_channel(topic, "work")
    cluster.publish(cluster.nodes[0], topic, 3)
    cluster.publish(cluster.nodes[1], topic, 5)
    cluster.wait_registered(topic)
    cluster.wait_in_channel(topic, "work", [3, 5])
    for node, n in zip(cluster.nodes, (3, 5)):
        assert len(_drain(node, topic, "work", n)) == n
    wait_until(lambda: all(nsqd_stats(n, topic)["channels"][0]["depth"] == 0 for n in cluster.nodes),
               what="channel drained")

    page.goto(f"{cluster.admin.url}/topics/{topic}")
    section = page.locator("#history")
    expect(section.get_by_role("heading", name="History")).to_be_visible()
    total = section.locator('tr[data-history-node="*"]')
    expect(total.locator("td").nth(1)).to_have_text("8")
    for node, n in zip(cluster.nodes, (3, 5)):
        expect(section.locator(f'tr[data-history-node="{node.http_address}"] td').nth(1)).to_have_text(str(n))
    expect(total.locator("td").nth(4)).to_contain_text("Z")  # the oldest, as RFC 3339

    page.goto(f"{cluster.admin.url}/topics/{topic}/work")
    expect(page.locator("#rewind-to")).to_have_value("earliest")
    page.get_by_role("button", name="Rewind Channel").click()
    page.locator("#confirm-dialog").get_by_role("button", name="Confirm").click()
    expect(page.locator("#flash")).to_contain_text("Channel rewound.")
    for node, n in zip(cluster.nodes, (3, 5)):  # every node replays what it kept
        assert sorted(_drain(node, topic, "work", n)) == sorted(b"msg %d" % i for i in range(n))

    # a topic without history shows neither
    plain = unique_name("plain")
    for node in cluster.nodes:
        request(f"http://{node.http_address}/topic/create?topic={plain}", "POST", b"")
        request(f"http://{node.http_address}/topic/config?topic={plain}", "POST", b'{"retention": "0s"}')
        request(f"http://{node.http_address}/channel/create?topic={plain}&channel=c", "POST", b"")
    cluster.wait_registered(plain)
    page.goto(f"{cluster.admin.url}/topics/{plain}")
    expect(page.get_by_role("heading", name="Topic Message Queue")).to_be_visible()
    expect(page.locator("#history")).to_have_count(0)
    page.goto(f"{cluster.admin.url}/topics/{plain}/c")
    expect(page.get_by_role("button", name="Pause Channel")).to_be_visible()
    expect(page.locator("#rewind-to")).to_have_count(0)
