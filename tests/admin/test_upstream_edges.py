"""nsqadmin's answers on the edges where upstream v1.3.0 has a particular shape (issue #10 item 6).

Each expectation was read off upstream's nsqadmin v1.3.0 answering the same request over a real
socket; here it is asserted of nsqpy's nsqadmin over a real cluster (nsqlookupd + 2 nsqd).
"""

from __future__ import annotations

import pytest

from admin.admin_util import request
from admin.browser_util import expect
from helpers.servers import unique_name

pytestmark = pytest.mark.timeout(60)


def test_missing_channel_answers_empty_message(cluster):
    """Upstream embeds a nil channel: 200 with only ``message``, not 500."""
    topic = unique_name("edge")
    cluster.create_channel(topic, "present")
    cluster.wait_registered(topic)
    resp = request(f"{cluster.admin.url}/api/topics/{topic}/absent")
    assert resp.status == 200
    assert resp.body == b'{"message":""}'
    assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
    assert resp.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    # the channel that exists still answers in full
    assert request(f"{cluster.admin.url}/api/topics/{topic}/present").json()["node"] == "*"


def test_config_text_options_answer_bare_text(cluster):
    resp = request(f"{cluster.admin.url}/config/base_path")
    assert (resp.status, resp.body) == (200, b"/")
    assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert resp.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    resp = request(f"{cluster.admin.url}/config/statsd_prefix")
    assert resp.body == b"nsq.%s"
    # an empty string: an empty body, and Go sets no Content-Type for it
    resp = request(f"{cluster.admin.url}/config/graphite_url")
    assert (resp.status, resp.body) == (200, b"")
    assert "Content-Type" not in resp.headers
    # everything else stays JSON
    resp = request(f"{cluster.admin.url}/config/statsd_interval")
    assert resp.body == b"60000000000"
    assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
    assert request(f"{cluster.admin.url}/config/proxy_graphite").body == b"false"


@pytest.mark.parametrize("query, status, message", [
    ("", 400, "INVALID_ARG_METRIC"),
    ("?metric=depth&target=x", 400, "INVALID_ARG_METRIC"),
    ("?metric=rate", 400, "INVALID_ARG_TARGET"),
    # no --graphite-url: the request to graphite fails, as upstream's does
    ("?metric=rate&target=x", 500, "INTERNAL_ERROR"),
])
def test_api_graphite_argument_errors(cluster, query, status, message):
    resp = request(f"{cluster.admin.url}/api/graphite{query}")
    assert resp.status == status
    assert resp.json() == {"message": message}


def test_render_is_not_routed_without_proxy_graphite(cluster):
    assert request(f"{cluster.admin.url}/render?target=x").status == 404


def test_missing_channel_page_shows_no_producers_notice(cluster, page):
    topic = unique_name("edgeui")
    cluster.create_channel(topic, "present")
    cluster.wait_registered(topic)
    page.goto(f"{cluster.admin.url}/topics/{topic}/absent")
    notice = page.locator("#no-producers")
    expect(notice).to_contain_text("No producers exist for this topic/channel.")
    expect(notice.get_by_role("link", name="Lookup")).to_be_visible()
    expect(page.locator("#app")).not_to_contain_text("INTERNAL_ERROR")
    expect(page.locator("button[data-action]")).to_have_count(0)


def test_render_proxy_keeps_path_and_query_and_sends_url_credentials(tmp_path, cluster):
    """``--proxy-graphite``: ``GET /render`` goes to graphite's host unchanged; user:password in
    ``--graphite-url`` becomes basic auth (upstream's director). Graphite here is a plain HTTP
    server recording what it was asked."""
    import base64
    import json as jsonlib
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from admin.admin_util import NsqAdmin

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append((self.path, self.headers.get("Authorization")))
            body = jsonlib.dumps([{"target": "t", "datapoints": [[30.0, 1]]}]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    lookupd = f"--lookupd-http-address={cluster.lookupd.http_address}"
    admin = NsqAdmin(tmp_path, lookupd, f"--graphite-url=http://ops:s3cret@127.0.0.1:{port}",
                     "--proxy-graphite", "--statsd-interval=15s")
    try:
        resp = request(f"{admin.url}/render?target=a.b&from=-1h&format=json")
        assert resp.status == 200 and resp.json()[0]["datapoints"] == [[30.0, 1]]
        path, auth = seen[-1]
        assert path == "/render?target=a.b&from=-1h&format=json"
        assert auth == "Basic " + base64.b64encode(b"ops:s3cret").decode()
        # the rate: graphite's value over the statsd interval, asked the way upstream asks
        assert request(f"{admin.url}/api/graphite?metric=rate&target=a.b").json() == {"rate": "2.00"}
        path, auth = seen[-1]
        assert path == "/render?format=json&from=-30sec&target=a.b&until=-15sec"
        assert auth == "Basic " + base64.b64encode(b"ops:s3cret").decode()
        # the page is told to draw through nsqadmin, not from graphite's address
        page = request(f"{admin.url}/").body.decode()
        assert '"graphiteUrl":""' in page and '"proxyGraphite":true' in page
        assert '"graphEnabled":true' in page and '"statsdInterval":15' in page
    finally:
        admin.stop()
        server.shutdown()
        server.server_close()
