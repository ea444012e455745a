"""A history log through the group commit (``--sync-every=1``): a block staged outside a publish
(a dead letter into a topic that keeps history, an adoption) is in the segment file when the
append returns, right behind a batch still being flushed; if that batch is refused and cut back,
the block is written again where the segment now ends and its own batch makes it readable."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers.held_flush import HeldFlush
from nsqpy.nsqd.history.log import Cursor, Log
from nsqpy.nsqd.storage.commit import GroupCommit

pytestmark = pytest.mark.timeout(60)
LOG = logging.getLogger("test.history.commit")


def _msg(i: int) -> tuple:
    return (b"%016x" % i, b"body%d" % i, time.time_ns(), 0)


@pytest.mark.parametrize("fails", [False, True], ids=["flushed", "refused"])
def test_a_held_block_during_a_flush_goes_behind_it_in_the_segment(
        tmp_path, monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    held = HeldFlush(monkeypatch, fail=fails)
    executor = ThreadPoolExecutor(2)

    async def body():
        commit = GroupCommit(asyncio.get_running_loop(), LOG)
        log = Log(str(tmp_path), "t", 3600 * 10**9, 0, 1, 2.0, LOG, executor, commit=commit)
        segment = tmp_path / "t.history" / f"{log.active.sid:020d}.seg"
        published = asyncio.get_running_loop().create_future()
        commit.publish(log.append, [_msg(0)])
        commit.then(published.set_result)  # (the publisher's answer)
        await asyncio.sleep(0)  # the turn ends: its batch goes to the writer thread
        await asyncio.get_running_loop().run_in_executor(None, held.entered.wait, 20)
        first_block = segment.stat().st_size
        assert log.append([_msg(1)]) is True  # not a publish: written now, readable later
        during = segment.stat().st_size
        readable_during = log.messages()
        held.release.set()
        outcome = await published
        settled = asyncio.get_running_loop().create_future()
        commit.then(settled.set_result)
        assert await settled is None  # the held block's own batch
        got = [r[1] for recs in Cursor(log, *log.position(-1)) for r in recs]
        size = segment.stat().st_size
        log.close()
        commit.close()
        return first_block, during, readable_during, outcome, got, size

    try:
        first_block, during, readable_during, outcome, got, size = asyncio.run(body())
    finally:
        executor.shutdown(wait=True)
    assert during == 2 * first_block and readable_during == 0
    if fails:
        assert isinstance(outcome, OSError) and got == [b"body1"] and size == first_block
    else:
        assert outcome is None and got == [b"body0", b"body1"] and size == 2 * first_block
