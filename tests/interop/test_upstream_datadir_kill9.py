"""A data directory nsqpy was killed in (SIGKILL), read by upstream nsqd v1.3.0 (its binary,
``NSQ_UPSTREAM_BIN``): with ``--sync-every=1`` every message nsqpy acknowledged is served by
upstream, none twice.

The group commit flushes a batch's records before their ``OK``; the queue's metadata file
follows on a thread of its own, so after a kill it may lag the data. Upstream then does what it
does after a crash of its own before a sync: it writes on in a new file and reads the old one to
its real end. It reads no file its metadata does not name, though: the batch that starts a data
file (the queue's first, or after a roll) writes the metadata naming it before its answers.
(A clean stop is ``test_upstream_datadir.py``.)
"""

from __future__ import annotations

from collections import Counter

import pytest

from helpers.chaos import TcpPublisher, drain, stop_publishers
from helpers.nsqd_http import http
from helpers.polling import wait_for
from helpers.recording import live
from helpers.servers import Nsqd, unique_name
from helpers.upstream import live_only, upstream_binary, upstream_dir

pytestmark = pytest.mark.timeout(180)


class UpstreamNsqd(Nsqd):
    bin_dir = upstream_dir()

    def own_flags(self) -> list[str]:
        return [f"--data-path={self.directory}"]


@pytest.mark.parametrize("files", [(), ("--max-bytes-per-file=8192",)], ids=["one-file", "rolls"])
def test_upstream_serves_what_nsqpy_acknowledged_before_a_kill9(tmp_path, files):
    if not live():
        pytest.skip(live_only("a data directory nsqpy was killed in, read by upstream's nsqd"))
    upstream_binary("nsqd")  # (or skip)
    directory = tmp_path / "data"
    # (with a small --max-bytes-per-file, a roll every ~200 messages: the kill may come just
    # after one, when the new file holds the only records past the metadata)
    node = Nsqd(directory, "--mem-queue-size=0", "--sync-every=1", *files)
    topic = unique_name()
    publishers = [TcpPublisher(node.tcp_address, topic, f"p{k}", pause=0) for k in range(8)]
    try:
        http(node, "POST", f"/topic/create?topic={topic}")
        # upstream loads the topics nsqd.dat lists (written in the background after a create)
        dat = directory / "nsqd.dat"
        wait_for(lambda: dat.exists() and topic in dat.read_text(), 30, "nsqd.dat lists the topic")
        for p in publishers:
            p.start()
        wait_for(lambda: sum(len(p.acked) for p in publishers) >= 1000, 60,
                 "1,000 acknowledged publishes")
        node.kill9()  # publishers are mid-flight: their next answers never come
    finally:
        stop_publishers(publishers)
        node.stop()
    acked = [body for p in publishers for body in p.acked]
    meta = (directory / f"{topic}.diskqueue.meta.dat").read_text().split("\n")
    write_file = int(meta[2].split(",")[0])
    node = UpstreamNsqd(directory, "--mem-queue-size=0")
    try:
        got = Counter(drain(node.tcp_address, topic, "c", idle=3.0, limit=60))
    finally:
        node.stop()
    assert len(acked) >= 1000
    if files:
        assert write_file > 0  # it rolled
    assert not [b for b in acked if b not in got], "acknowledged messages upstream did not serve"
    assert not [b for b, n in got.items() if n > 1], "messages upstream served twice"
