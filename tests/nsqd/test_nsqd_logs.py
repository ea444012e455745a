"""nsqd's own log lines that operators grep for, in upstream v1.3.0's exact formats.

``NSQ: persisting topic/channel metadata to <data-path>/nsqd.dat`` (start, every create/delete,
exit), ``CI: querying nsqlookupd http://<lookupd>/channels?topic=<escaped>`` when a topic is
created, and ``no available nsqlookupd ...`` when lookupd is configured but not reachable. Read
from the log of a real nsqd process.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from helpers.servers import Nsqd, Nsqlookupd, free_port, unique_name

pytestmark = pytest.mark.timeout(60)

STAMP = r"\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6}"


def post(node: Nsqd, path: str) -> None:
    req = urllib.request.Request(f"http://{node.http_address}{path}", data=b"x", method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def lines_matching(node: Nsqd, pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [line for line in node.log().splitlines() if rx.fullmatch(line)]


def wait_lines(node: Nsqd, pattern: str, count: int = 1, timeout: float = 10) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = lines_matching(node, pattern)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {count} line(s) matching {pattern!r} in:\n{node.log()}")


def test_persisting_metadata_lines(tmp_path):
    node = Nsqd(tmp_path / "d")
    path = re.escape(str(tmp_path / "d" / "nsqd.dat"))
    pattern = f"{STAMP} INFO: NSQ: persisting topic/channel metadata to {path}"
    try:
        assert len(wait_lines(node, pattern)) == 1  # at start, after loading
        post(node, f"/topic/create?topic={unique_name('p')}")
        wait_lines(node, pattern, 2)
        post(node, f"/topic/create?topic={unique_name('e')}%23ephemeral")
        time.sleep(0.3)
        assert len(lines_matching(node, pattern)) == 2  # ephemeral topics are not persisted
    finally:
        assert node.stop() == 0
    assert len(lines_matching(node, pattern)) == 3  # and once more on exit


def test_ci_querying_nsqlookupd_line(tmp_path):
    lookupd = Nsqlookupd(tmp_path / "l")
    node = Nsqd(tmp_path / "d", f"--lookupd-tcp-address={lookupd.tcp_address}")
    try:
        wait_lines(node, rf"{STAMP} INFO: LOOKUPD\({re.escape(lookupd.tcp_address)}\): peer info .*")
        topic = unique_name("ci") + "#ephemeral"
        post(node, f"/pub?topic={topic.replace('#', '%23')}")
        url = f"http://{lookupd.http_address}/channels?topic={topic.replace('#', '%23')}"
        created = wait_lines(node, rf"{STAMP} INFO: TOPIC\({re.escape(topic)}\): created")
        [query] = wait_lines(node, rf"{STAMP} INFO: CI: querying nsqlookupd {re.escape(url)}")
        log = node.log().splitlines()
        assert log.index(created[0]) < log.index(query)
        assert "failed to query nsqlookupd" not in node.log()
    finally:
        node.stop()
        lookupd.stop()


def test_no_available_nsqlookupd_line(tmp_path):
    node = Nsqd(tmp_path / "d", f"--lookupd-tcp-address=127.0.0.1:{free_port()}")
    try:
        topic = unique_name("nl")
        post(node, f"/topic/create?topic={topic}")
        wait_lines(node, rf"{STAMP} ERROR: no available nsqlookupd to query for channels to "
                         rf"pre-create for topic {topic}")
        assert "CI: querying" not in node.log()
    finally:
        node.stop()


def test_start_and_exit_lines_in_upstream_order(tmp_path):
    node = Nsqd(tmp_path / "d")
    assert node.stop() == 0
    text = re.sub(rf"(?m)^{STAMP} ", "", node.log())
    lines = text.splitlines()
    assert lines[0].startswith("INFO: nsqd v1.3.0 (built w/")
    assert re.fullmatch(r"INFO: ID: \d+", lines[1])
    tail = [line for line in lines if "listening" not in line and "persisting" not in line]
    tcp, http = node.tcp_address, node.http_address
    expected = [f"INFO: TCP: closing {tcp}", f"INFO: HTTP: closing {http}",
                "INFO: NSQ: closing topics", "INFO: NSQ: stopping subsystems",
                "INFO: LOOKUP: closing", "INFO: QUEUESCAN: closing", "INFO: NSQ: bye"]
    assert tail[-len(expected):] == expected
