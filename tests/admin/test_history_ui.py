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

    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{cluster.admin.url}/topics/{topic}/work")
    _check_rewind_field(page)
    field = page.get_by_label("Rewind to")
    expect(field).to_have_value("earliest")
    # a number that can only be unix seconds is refused before any question is asked
    field.fill("1795927286")
    page.get_by_role("button", name="Rewind Channel").click()
    expect(page.locator("#flash")).to_contain_text("milliseconds, not seconds")
    expect(page.locator("#confirm-dialog")).not_to_be_visible()
    # the confirmation says how many retained messages the rewind replays, and from when
    oldest = min(nsqd_stats(n, topic)["history"]["oldest_timestamp"] for n in cluster.nodes)
    field.fill("earliest")
    page.get_by_role("button", name="Rewind Channel").click()
    question = page.locator("#confirm-text")
    expect(question).to_contain_text("It replays 8 retained messages, from ")
    expect(question).to_contain_text(_rfc3339(oldest)[:19])  # to the second
    expect(question).to_contain_text("(2 nsqd), to every subscriber of the channel")
    page.locator("#confirm-dialog").get_by_role("button", name="Cancel").click()
    # a time past the newest message: nothing to replay, and the question says so
    field.fill("2100-01-01T00:00:00Z")
    page.get_by_role("button", name="Rewind Channel").click()
    expect(question).to_contain_text("No message is retained from that point on")
    page.locator("#confirm-dialog").get_by_role("button", name="Cancel").click()
    field.fill("earliest")
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


def _rfc3339(ns: int) -> str:
    from nsqpy.client.history import format_point

    return format_point(ns)


def _check_rewind_field(page) -> None:
    """Issue #43: the rewind point was an unstyled text box with no label, flush against the
    button. Now: a label names it, it is styled as the page's other inputs (border, radius,
    padding), a hint lists its forms, and there is room between it and the button."""
    field = page.get_by_label("Rewind to")
    expect(field).to_be_visible()
    expect(field).to_have_attribute("aria-describedby", "rewind-help")
    expect(page.locator("#rewind-help")).to_contain_text("earliest, an RFC 3339 time")
    style = field.evaluate("el => { const s = getComputedStyle(el); return [s.borderTopLeftRadius, "
                           "s.paddingLeft, s.borderTopStyle, s.borderTopColor, s.fontSize]; }")
    assert style == ["4px", "8px", "solid", "rgb(185, 192, 200)", "14px"], style
    box, button = field.bounding_box(), page.get_by_role("button", name="Rewind Channel").bounding_box()
    assert button["x"] - (box["x"] + box["width"]) >= 8, (box, button)
    pause = page.get_by_role("button", name="Pause Channel").bounding_box()
    assert box["y"] >= pause["y"] + pause["height"], (pause, box)  # a row of its own, below the others
    assert button["height"] == pause["height"], (button, pause)  # a button as the others are
