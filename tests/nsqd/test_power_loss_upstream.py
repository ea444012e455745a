"""Side by side with upstream nsqd v1.3.0 on the power-cut disk (helpers.powercut): what an ``OK``
under ``--mem-queue-size=0 --sync-every=1`` promises when the power goes.

go-diskqueue answers a write, then fsyncs it at the top of its next loop: upstream's ``OK`` comes
before the fsync that covers the message. ours comes after it (the group commit). One publisher,
one ``PUB`` at a time; the disk is armed to cut its power at the k-th fsync of the topic's queue
file, before it is applied. Upstream loses the message it had just acknowledged, every time;
ours refuses the publish whose fsync never happened (``E_PUB_FAILED``) and keeps every message it
acknowledged. Upstream's side runs live with ``NSQ_UPSTREAM_BIN``, else from its recording.
"""

from __future__ import annotations

import pytest

from helpers.chaos import TcpPublisher, drain
from helpers.power_loss import PowerCutNsqd, lost, no_bad_files
from helpers.powercut import PowerCutFS
from helpers.recording import recording
from helpers.replication import post
from helpers.servers import Nsqd, unique_name
from helpers.upstream import upstream_dir

pytestmark = pytest.mark.timeout(180)

RECORDED = recording("files", "test_power_loss_upstream")
FLAGS = ("--mem-queue-size=0", "--sync-every=1")


class UpstreamNsqd(Nsqd):
    bin_dir = upstream_dir()

    def own_flags(self) -> list[str]:
        return [f"--data-path={self.directory}"]


def _cut_at_fsync(power_cut_fs, tmp_path, server: type, after: int, name: str) -> dict:
    """Publish until the power goes at the ``after``-th fsync of the topic's queue file; after
    the restart: how many were acknowledged, which of them are lost (by their place among the
    acknowledged), and the refusals."""
    node = PowerCutNsqd(power_cut_fs(), tmp_path / name, *FLAGS, server=server)
    try:
        topic = unique_name("up")
        assert post(node, f"/topic/create?topic={topic}") == 200
        node.fs.arm("fsync", after, match=f"{topic}.diskqueue.0")
        publisher = TcpPublisher(node.tcp_address, topic, "r0pub0", pause=0)
        publisher.start()
        try:
            node.power_cut_armed(60)
        finally:
            publisher.stop.set()
            publisher.join(30)
        node.power_on()
        kept = drain(node.tcp_address, topic, "c", idle=1.0, limit=30)
        no_bad_files(node)
        gone = lost([publisher], kept)
        return {"acknowledged": len(publisher.acked),
                "lost": [publisher.acked.index(b) - len(publisher.acked) for b in gone],
                "refused": publisher.errors.get("E_PUB_FAILED", 0)}
    finally:
        node.close()


@pytest.mark.parametrize("after", [4, 9])
def test_an_ok_before_the_fsync_is_what_a_power_cut_takes(power_cut_fs, tmp_path, after):
    theirs = RECORDED.answer(None, lambda: _cut_at_fsync(power_cut_fs, tmp_path, UpstreamNsqd,
                                                         after, "upstream"))
    ours = _cut_at_fsync(power_cut_fs, tmp_path, Nsqd, after, "nsqpy")
    assert theirs["lost"] == [-1]  # upstream: the last acknowledged message is gone
    assert ours["lost"] == [] and ours["acknowledged"] >= 1  # ours: nothing acknowledged lost,
    assert ours["refused"] == 1  # and the publish whose fsync never came was refused
