"""A damaged nsqd.dat never makes nsqd forget topics whose messages are still on disk (issue #36).

Upstream v1.3.0 refuses to start (``FATAL: failed to load metadata - failed to parse metadata in
<path>/nsqd.dat - <Go's JSON error>``). nsqpy rebuilds the topic and channel set from the disk
queues' file names, registers it with nsqlookupd, says so (an ERROR line, a WARNING per topic) and
keeps the damaged file as ``nsqd.dat.bad``; it refuses, with upstream's line, when a queue-like
file belongs to no valid name. A read-only data directory fails with upstream's words.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import urllib.request
from collections import Counter
from pathlib import Path

import orjson
import pytest

from helpers.nsqd_http import http
from helpers.polling import wait_for
from helpers.servers import VENV_BIN, Nsqd, Nsqlookupd, free_port
from helpers.recording import recording
from helpers.upstream import upstream_binary
from helpers.wire import Wire

pytestmark = pytest.mark.timeout(120)
#: upstream's FATAL lines (``NSQ_UPSTREAM_BIN`` live, else as recorded)
RECORDED = recording("exits", "test_damaged_metadata")

TOPICS = {f"t{i}": ["c1", "c2"] for i in range(3)}
PER_TOPIC = 50
DAMAGE = {
    "invalid": (b"{garbage", "invalid character 'g' looking for beginning of object key string"),
    "empty": (b"", "unexpected end of JSON input"),
    "truncated": (None, "unexpected end of JSON input"),  # the real file cut in the middle
}


def _filled_data_dir(path: Path) -> Counter:
    """3 topics x 2 channels, each channel holding PER_TOPIC messages on disk after a clean stop;
    one channel paused (that state is what a damaged file loses)."""
    node = Nsqd(path, "--mem-queue-size=0")
    want: Counter = Counter()
    try:
        wire = Wire(node.tcp_address)
        for topic, channels in TOPICS.items():
            http(node, "POST", f"/topic/create?topic={topic}")
            for channel in channels:
                http(node, "POST", f"/channel/create?topic={topic}&channel={channel}")
            bodies = [f"{topic}-{i}".encode() for i in range(PER_TOPIC)]
            wire.mpub(topic, bodies)
            for channel in channels:
                want.update((topic, channel, b) for b in bodies)
        wire.close()
        http(node, "POST", "/channel/pause?topic=t1&channel=c2")
    finally:
        assert node.stop() == 0
    return want


def _damage(path: Path, how: str) -> bytes:
    dat = path / "nsqd.dat"
    original = dat.read_bytes()
    raw = DAMAGE[how][0]
    dat.write_bytes(original[: len(original) // 2] if raw is None else raw)
    return dat.read_bytes()


def _lookup(lookupd: Nsqlookupd, topic: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"http://{lookupd.http_address}/lookup?topic={topic}",
                                    timeout=2) as resp:
            doc = orjson.loads(resp.read())
    except OSError:
        return []
    return sorted(doc.get("channels") or [])


async def _consume_all(lookupd: Nsqlookupd, expected: int) -> Counter:
    from nsqpy.client import Consumer

    got: Counter = Counter()
    consumers = []
    for topic, channels in TOPICS.items():
        for channel in channels:
            def handler(msg, topic=topic, channel=channel):
                got[(topic, channel, msg.body)] += 1
            consumers.append(Consumer(topic, channel, handler, max_in_flight=100,
                                      lookupd_http_addresses=[lookupd.http_address],
                                      lookupd_poll_interval=0.2))
    for c in consumers:
        await c.start()
    try:
        for _ in range(400):
            if sum(got.values()) >= expected:
                break
            await asyncio.sleep(0.05)
    finally:
        for c in consumers:
            await c.close()
    return got


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_damaged_metadata_rebuilt_from_disk_queues(tmp_path, how):
    data = tmp_path / "data"
    want = _filled_data_dir(data)
    damaged = _damage(data, how)
    lookupd = Nsqlookupd(tmp_path / "lookupd")
    node = None
    try:
        node = Nsqd(data, f"--lookupd-tcp-address={lookupd.tcp_address}")
        # every topic and channel registered with nsqlookupd, as if nsqd.dat had been read
        for topic, channels in TOPICS.items():
            wait_for(lambda: _lookup(lookupd, topic) == channels, timeout=30, what=topic)
        got = asyncio.run(_consume_all(lookupd, sum(want.values())))
        assert got == want  # every message, once, on every channel (t1:c2 unpaused again)
        log = node.log()
        path = re.escape(str(data / "nsqd.dat"))
        assert re.search(rf"ERROR: failed to parse metadata in {path} - "
                         rf"{re.escape(DAMAGE[how][1]) if how != 'truncated' else '.+'}; kept as "
                         rf"{path}\.bad", log), log
        for topic in TOPICS:
            assert f"WARNING: TOPIC({topic}): restored from its disk queues with channels " \
                   f"[c1 c2]: unpaused, default settings" in log
        assert (data / "nsqd.dat.bad").read_bytes() == damaged
        # the rebuilt nsqd.dat is upstream's JSON, complete
        doc = orjson.loads((data / "nsqd.dat").read_bytes())
        assert {t["name"]: [c["name"] for c in t["channels"]] for t in doc["topics"]} == TOPICS
    finally:
        if node is not None:
            node.stop()
        lookupd.stop()


def _run_nsqd(binary: str, data: Path) -> tuple[int, str]:
    proc = subprocess.run([binary, f"--data-path={data}", f"--tcp-address=127.0.0.1:{free_port()}",
                           f"--http-address=127.0.0.1:{free_port()}"],
                          capture_output=True, text=True, timeout=30)
    return proc.returncode, proc.stderr + proc.stdout


def _fatal(output: str) -> str:
    lines = [line for line in output.splitlines() if "FATAL" in line]
    assert len(lines) == 1 and output.rstrip().endswith(lines[0]), output
    return lines[0].split("FATAL: ", 1)[1]


def test_stray_queue_file_refuses_with_upstreams_line(tmp_path):
    """A queue-like file that splits into no valid name: nsqd cannot tell what it belongs to,
    so it refuses as upstream does, and leaves everything as it found it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "nsqd.dat").write_bytes(b"")
    (data / "good.diskqueue.meta.dat").write_bytes(b"0\n0,0\n0,0\n")
    (data / "a:b:c.diskqueue.meta.dat").write_bytes(b"0\n0,0\n0,0\n")
    code, out = _run_nsqd(str(VENV_BIN / "nsqd"), data)
    assert code == 1
    assert _fatal(out) == (f"failed to load metadata - failed to parse metadata in "
                           f"{data / 'nsqd.dat'} - unexpected end of JSON input")
    assert "a:b:c.diskqueue.meta.dat belong to no valid durable topic or channel" in out
    assert sorted(p.name for p in data.iterdir()) == [
        "a:b:c.diskqueue.meta.dat", "good.diskqueue.meta.dat", "nsqd.dat"]


@pytest.mark.parametrize("raw", [b"{garbage", b"", b'{"topics":[{"name":"t","paused":fal',
                                 b'[]', b'{"topics":5}', b'{"topics":[{"name":5}]}', b"{} x",
                                 b'{"topics":[{"channels":[{"paused":"x"}]}]}'])
def test_refusal_text_is_upstreams(tmp_path, raw):
    """When nsqpy refuses (here: a stray queue file), its FATAL line is upstream's word for word
    for the same nsqd.dat (Go's own JSON error texts)."""
    def fatal_line(side: str, binary: str) -> str:
        data = tmp_path / side
        data.mkdir()
        (data / "nsqd.dat").write_bytes(raw)
        (data / "x#ephemeral.diskqueue.meta.dat").write_bytes(b"")  # makes nsqpy refuse too
        code, out = _run_nsqd(binary, data)
        assert code == 1, out
        return _fatal(out).replace(str(data), "<data>")

    upstream = RECORDED.answer(None, lambda: fatal_line("upstream", upstream_binary("nsqd")))
    assert fatal_line("nsqpy", str(VENV_BIN / "nsqd")) == upstream


def test_read_only_data_path_fails_with_upstreams_words(tmp_path):
    """An immutable directory (chattr +i: what a read-only directory is even to root) fails at
    the first persist with upstream's ``failed to persist metadata - open <tmp>: <why>``."""
    def fatal_line(side: str, binary: str) -> str:
        data = tmp_path / side
        data.mkdir()
        if subprocess.run(["chattr", "+i", str(data)], capture_output=True).returncode:
            pytest.skip("chattr +i is not available on this filesystem")
        try:
            code, out = _run_nsqd(binary, data)
        finally:
            subprocess.run(["chattr", "-i", str(data)], check=True)
        assert code == 1, out
        line = _fatal(out)
        assert re.fullmatch(rf"failed to persist metadata - open {re.escape(str(data))}/nsqd\.dat"
                            rf"\.\d+\.tmp: (operation not permitted|permission denied|read-only "
                            rf"file system)", line), line
        return re.sub(r"\.\d+\.tmp", ".N.tmp", line).replace(str(data), "<data>")

    ours = fatal_line("nsqpy", str(VENV_BIN / "nsqd"))
    assert ours == RECORDED.answer(None, lambda: fatal_line("upstream", upstream_binary("nsqd")))


def test_queue_file_names_split_one_way(tmp_path):
    """What the rebuild reads of a data path: names read from their right end, a topic may
    itself contain ``.diskqueue.``, and files that are not a queue's data or metadata are
    left alone (``.bad``, temps, the deferred sidecar, nsqd.dat itself)."""
    from nsqpy.nsqd.metadata import queues_on_disk

    for name in ["t.diskqueue.meta.dat", "t:c1.diskqueue.000000.dat", "t:c2.diskqueue.meta.dat",
                 "t:c2.diskqueue.1234567.dat", "x.diskqueue.meta.dat.diskqueue.meta.dat",
                 "only_channel:c.diskqueue.meta.dat", "t:c3.diskqueue.000001.dat.bad",
                 "t:c4.diskqueue.meta.dat.12345.tmp", "t:c5.diskqueue.deferred.json",
                 "nsqd.dat", "nsqd.dat.bad", "t.diskqueue.meta.dat.bad"]:
        (tmp_path / name).write_bytes(b"")
    assert queues_on_disk(str(tmp_path)) == (
        {"only_channel": ["c"], "t": ["c1", "c2"], "x.diskqueue.meta.dat": []}, [])
    for stray in ["a:b:c.diskqueue.meta.dat", "e#ephemeral.diskqueue.meta.dat",
                  "t:c#ephemeral.diskqueue.000000.dat", "sp ace.diskqueue.meta.dat",
                  f"{'x' * 65}.diskqueue.meta.dat"]:
        (tmp_path / stray).write_bytes(b"")
        assert queues_on_disk(str(tmp_path))[1] == [stray]
        (tmp_path / stray).unlink()


def test_nsqd_dat_written_in_pieces_is_the_same_bytes():
    """The metadata thread encodes topic by topic; the file is what one encode of the whole
    list gives (upstream's JSON, byte for byte, as tests/interop/test_upstream_datadir.py checks)."""
    from nsqpy.nsqd.metadata import encode_metadata, join_metadata

    topics = [{"name": "a", "paused": False, "channels": None},
              {"name": "b", "paused": True, "channels": [{"name": "c", "paused": False}],
               "config": {"max_attempts": 3}}]
    assert join_metadata(orjson.dumps(t) for t in topics) == encode_metadata(topics)
    assert join_metadata([]) == encode_metadata([]) == b'{"topics":[],"version":"1.3.0"}'
