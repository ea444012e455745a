"""nsq_to_file as a user runs it: the console script against a real nsqd (and nsqlookupd).

The acceptance tests archive 100k messages into gzipped, size-rotated files: a SIGTERM in the
middle of the stream plus a second run leave every message exactly once; a ``kill -9`` in the
middle plus a second run leave every message at least once.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from helpers.servers import unique_name
from tools.tool_util import (
    archive_lines,
    channel_stats,
    create_channel,
    drained,
    files_under,
    gzip_lines,
    http,
    mpub,
    run_tool,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

CHANNEL = "nsq_to_file"  # the default channel


def finished(http_address: str, topic: str, channel: str = CHANNEL) -> int:
    """Messages the channel has handed out and seen answered (FIN), approximately."""
    c = channel_stats(http_address, topic, channel)
    if not c:
        return 0
    return c["message_count"] - c["depth"] - c["in_flight_count"] - c["deferred_count"]


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


# --- acceptance -------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_100k_gzip_rotated_exactly_once_across_sigterm_and_restart(nsqd, tools, tmp_path):
    topic = unique_name("arch")
    total = 100_000
    bodies = [b"msg-%06d" % i for i in range(total)]
    out, work = tmp_path / "out", tmp_path / "work"
    args = [f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}", f"--output-dir={out}",
            f"--work-dir={work}", "--gzip", "--rotate-size=150000", "--sync-interval=1s"]
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, bodies)

    first = tools.start("nsq_to_file", *args)
    wait_for(lambda: finished(nsqd.http_address, topic) >= 15_000, timeout=120, interval=0.01,
             what="the first run to archive some messages")
    assert first.stop(signal.SIGTERM, timeout=60) == 0, first.stderr()[-3000:]
    stats = channel_stats(nsqd.http_address, topic, CHANNEL)
    assert stats["in_flight_count"] == 0  # everything it received was answered before exiting
    left = stats["depth"]
    assert left > 0, "the SIGTERM should land in the middle of the stream"
    assert files_under(work) == [], "finished files are moved out of --work-dir on exit"
    first_run = archive_lines(files_under(out))
    assert len(first_run) == len(set(first_run)) == total - left

    second = tools.start("nsq_to_file", *args)
    wait_for(drained(nsqd.http_address, topic, CHANNEL, total), timeout=180, interval=0.1,
             what="the second run to archive the rest")
    assert second.stop(signal.SIGTERM, timeout=60) == 0, second.stderr()[-3000:]

    files = files_under(out, work)
    assert files and all(f.parent == out and f.name.endswith(".gz") for f in files)
    assert len(files) >= total * len(b"msg-000000\n") // 150_000  # rotated by size
    lines: list[bytes] = []
    for f in files:
        lines.extend(gzip_lines(f))  # strict: every gzip member complete
    counts = collections.Counter(lines)
    assert len(lines) == total, f"{len(lines) - total:+d} lines"
    assert set(counts) == set(bodies)
    assert max(counts.values()) == 1
    c = channel_stats(nsqd.http_address, topic, CHANNEL)
    assert c["requeue_count"] == 0 and c["timeout_count"] == 0


@pytest.mark.timeout(300)
def test_100k_kill9_mid_stream_then_restart_keeps_every_message(nsqd_factory, tools, tmp_path):
    # nsqd keeps a dead client's in-flight messages until they time out (as upstream)
    nsqd = nsqd_factory("--msg-timeout=5s")
    topic = unique_name("crash")
    total = 100_000
    bodies = [b"crash-%06d" % i for i in range(total)]
    out, work = tmp_path / "out", tmp_path / "work"
    args = [f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}", f"--output-dir={out}",
            f"--work-dir={work}", "--gzip", "--rotate-size=200000"]
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, bodies)

    first = tools.start("nsq_to_file", *args)
    wait_for(lambda: finished(nsqd.http_address, topic) >= 20_000, timeout=120, interval=0.01,
             what="the first run to archive some messages")
    first.kill()  # SIGKILL: no sync, no close, no move
    acked_by_first = finished(nsqd.http_address, topic)
    assert acked_by_first < total, "the kill should land in the middle of the stream"

    second = tools.start("nsq_to_file", *args)
    wait_for(drained(nsqd.http_address, topic, CHANNEL, total), timeout=180, interval=0.1,
             what="the second run to archive the rest")
    assert second.stop(signal.SIGTERM, timeout=60) == 0, second.stderr()[-3000:]

    # the killed run's last file stays in --work-dir, maybe with an unfinished gzip member
    lines = archive_lines(files_under(out, work))
    missing = set(bodies) - set(lines)
    assert not missing, f"{len(missing)} messages lost, e.g. {sorted(missing)[:5]}"
    # duplicates are possible (written, not yet acknowledged at the kill), but bounded by
    # what could be in flight at once
    assert len(lines) - total <= 2 * 200, len(lines) - total


@pytest.mark.timeout(120)
def test_one_topic_on_two_nsqd_into_one_archive(nsqd_factory, tools, tmp_path):
    a, b = nsqd_factory(), nsqd_factory()
    topic = unique_name("two")
    out = tmp_path / "out"
    per_node = 20_000
    for i, node in enumerate((a, b)):
        create_channel(node.http_address, topic, CHANNEL)
        mpub(node.http_address, topic, [b"n%d-%05d" % (i, j) for j in range(per_node)])
    proc = tools.start("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={a.tcp_address}",
                       f"--nsqd-tcp-address={b.tcp_address}", f"--output-dir={out}", "--gzip",
                       "--max-in-flight=50")
    for node in (a, b):
        wait_for(drained(node.http_address, topic, CHANNEL, per_node), timeout=90, interval=0.1,
                 what=f"{node.tcp_address} drained")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    lines = [line for f in files_under(out) for line in gzip_lines(f)]
    assert len(lines) == len(set(lines)) == 2 * per_node


# --- acknowledgement only after fsync; signals ------------------------------------------------------


@pytest.mark.timeout(60)
def test_messages_are_finished_only_after_sync_and_sighup_reopens(nsqd, tools, tmp_path):
    topic = unique_name("sync")
    out = tmp_path / "out"
    create_channel(nsqd.http_address, topic, CHANNEL)
    proc = tools.start("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--output-dir={out}", "--max-in-flight=1000", "--sync-interval=1h",
                       "--datetime-format=static")  # no hourly rotation in the middle of the test
    mpub(nsqd.http_address, topic, [b"opening"])
    path = wait_for(lambda: next(iter(files_under(out)), None), what="the output file")
    # opening a file syncs (as upstream's rotation does): the first message is acknowledged
    wait_for(drained(nsqd.http_address, topic, CHANNEL, 1), what="the first message FINished")
    mpub(nsqd.http_address, topic, [b"one-%d" % i for i in range(10)])
    wait_for(lambda: len(lines_of(path)) == 11, what="10 more lines written")
    # written but not synced: not acknowledged (nsqd still holds them in flight), the consumer
    # is not starved (10 < 85% of 1000) and the sync interval is far away
    time.sleep(0.3)
    assert channel_stats(nsqd.http_address, topic, CHANNEL)["in_flight_count"] == 10
    proc.send_signal(signal.SIGHUP)  # sync + close
    wait_for(lambda: channel_stats(nsqd.http_address, topic, CHANNEL)["in_flight_count"] == 0,
             what="FIN after the SIGHUP sync")
    assert proc.alive()
    mpub(nsqd.http_address, topic, [b"two-%d" % i for i in range(5)])
    wait_for(lambda: len(lines_of(path)) == 16, what="the file reopened for appending")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert files_under(out) == [path]
    assert lines_of(path) == [b"opening", *(b"one-%d" % i for i in range(10)),
                              *(b"two-%d" % i for i in range(5))]
    assert path.name == f"{topic}.{socket.gethostname().split('.')[0]}.static.log"
    assert channel_stats(nsqd.http_address, topic, CHANNEL)["in_flight_count"] == 0


@pytest.mark.timeout(120)
def test_work_dir_files_move_on_sighup_and_stop_without_overwriting(nsqd, tools, tmp_path):
    topic = unique_name("move")
    out, work = tmp_path / "out", tmp_path / "work"
    create_channel(nsqd.http_address, topic, CHANNEL)
    proc = tools.start("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--output-dir={out}", f"--work-dir={work}", "--sync-interval=1h",
                       "--filename-format=<TOPIC><REV>.log")
    mpub(nsqd.http_address, topic, [b"a", b"b", b"c"])
    first = work / f"{topic}-000000.log"
    wait_for(lambda: first.exists() and len(lines_of(first)) == 3, what="the work file")
    proc.send_signal(signal.SIGHUP)
    # a move is a link, the directory's fsync, then the unlink (never a replace): the work
    # file outlives its new name's appearance by that fsync, long on a busy disk
    wait_for(lambda: (out / first.name).exists() and not first.exists(),
             what="the file moved to --output-dir")

    mpub(nsqd.http_address, topic, [b"d", b"e"])
    second = work / f"{topic}-000001.log"  # same name: next revision
    wait_for(lambda: second.exists() and len(lines_of(second)) == 2, what="the next work file")
    (out / second.name).write_bytes(b"someone else's\n")  # a clash appears before the move
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert files_under(work) == []
    assert lines_of(out / first.name) == [b"a", b"b", b"c"]
    assert lines_of(out / second.name) == [b"someone else's"]  # never overwritten
    assert lines_of(out / f"{topic}-000002.log") == [b"d", b"e"]
    assert "to avoid overwrite" in proc.stderr()


@pytest.mark.timeout(60)
def test_filename_tokens_subdirectories_and_size_rotation(nsqd, tools, tmp_path):
    topic = unique_name("names")
    out = tmp_path / "out"
    create_channel(nsqd.http_address, topic, CHANNEL)
    proc = tools.start(
        "nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
        f"--output-dir={out}", "--filename-format=<TOPIC>/<PID>/<HOST><REV>.<DATETIME>.txt",
        "--datetime-format=%Y%m%d-%%-%Q", "--host-identifier=id-<SHORT_HOST>", "--rotate-size=5",
        "--max-in-flight=1",
    )
    day = time.strftime("%Y%m%d")
    mpub(nsqd.http_address, topic, [b"first", b"second", b"third"])
    wait_for(lambda: len(files_under(out)) == 3, what="three files (each over --rotate-size)")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    short = socket.gethostname().split(".")[0]
    files = files_under(out)
    assert {f.parent for f in files} == {out / topic / str(proc.pid)}
    names = sorted(f.name for f in files)
    assert names in (
        [f"id-{short}-{rev:06d}.{d}-%-%Q.txt" for rev in range(3)]
        for d in (day, time.strftime("%Y%m%d"))
    ), names
    assert sorted(l for f in files for l in lines_of(f)) == [b"first", b"second", b"third"]


@pytest.mark.timeout(60)
def test_rotate_interval_opens_new_files(nsqd, tools, tmp_path):
    topic = unique_name("interval")
    out = tmp_path / "out"
    create_channel(nsqd.http_address, topic, CHANNEL)
    proc = tools.start("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--output-dir={out}", "--rotate-interval=300ms", "--sync-interval=100ms",
                       "--skip-empty-files", "--datetime-format=static")
    for i in range(3):
        mpub(nsqd.http_address, topic, [b"round-%d" % i])
        wait_for(lambda: len(files_under(out)) == i + 1, what=f"file {i + 1}")
        time.sleep(0.6)
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    files = files_under(out)
    assert [lines_of(f) for f in files] == [[b"round-0"], [b"round-1"], [b"round-2"]]


@pytest.mark.timeout(60)
def test_plain_append_repairs_a_torn_last_line(nsqd, tools, tmp_path):
    topic = unique_name("torn")
    out = tmp_path / "out"
    out.mkdir()
    create_channel(nsqd.http_address, topic, CHANNEL)
    fmt = "<TOPIC>.log"
    (out / f"{topic}.log").write_bytes(b"whole\ntorn-by-a-cra")  # a previous run died mid-line
    proc = tools.start("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--output-dir={out}", f"--filename-format={fmt}")
    mpub(nsqd.http_address, topic, [b"next"])
    wait_for(drained(nsqd.http_address, topic, CHANNEL, 1), what="the message archived")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert lines_of(out / f"{topic}.log") == [b"whole", b"torn-by-a-cra", b"next"]


# --- topics from nsqlookupd ---------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_topic_pattern_follows_lookupd(nsqd_factory, lookupd_factory, tools, tmp_path):
    lookupd = lookupd_factory()
    nsqd = nsqd_factory(f"--lookupd-tcp-address={lookupd.tcp_address}")
    prefix = unique_name("pat")
    matching = [f"{prefix}_a", f"{prefix}_b"]
    other = unique_name("other")
    for topic in [*matching, other]:
        mpub(nsqd.http_address, topic, [f"{topic}-1".encode()])

    def lookupd_topics() -> set[str]:
        status, body = http("GET", f"http://{lookupd.http_address}/topics")
        import json
        return set(json.loads(body)["topics"]) if status == 200 else set()

    wait_for(lambda: {*matching, other} <= lookupd_topics(), what="lookupd registrations")
    out = tmp_path / "out"
    # Go's regexp, as upstream's: Python's re would read the POSIX class as a set and a "]"
    proc = tools.start("nsq_to_file", f"--topic-pattern=^{prefix}_[[:alpha:]]",
                       f"--lookupd-http-address={lookupd.http_address}", f"--output-dir={out}",
                       "--topic-refresh=200ms", "--filename-format=<TOPIC>.log")
    for topic in matching:
        wait_for(lambda: (out / f"{topic}.log").exists()
                 and lines_of(out / f"{topic}.log") == [f"{topic}-1".encode()],
                 what=f"{topic} archived")
    late = f"{prefix}_late"
    mpub(nsqd.http_address, late, [b"late-1"])  # a topic that appears later is picked up
    wait_for(lambda: (out / f"{late}.log").exists() and lines_of(out / f"{late}.log") == [b"late-1"],
             what="the late topic archived")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert not (out / f"{other}.log").exists()
    assert "doesn't match pattern" in proc.stderr()


# --- flags -------------------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("args, message", [
    (["--nsqd-tcp-address=127.0.0.1:4150"], "--topic or --topic-pattern required"),
    (["--topic=t"], "--nsqd-tcp-address or --lookupd-http-address required"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--lookupd-http-address=b:2"],
     "use --nsqd-tcp-address or --lookupd-http-address not both"),
    (["--topic-pattern=x", "--nsqd-tcp-address=a:1"],
     "--lookupd-http-address must be specified when no --topic specified"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--gzip-level=10"], "invalid --gzip-level value (10), should be 1-9"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--gzip", "--filename-format=<TOPIC>.log"],
     "missing <REV> in --filename-format"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--channel="], "--channel is required"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--http-client-connect-timeout=0"],
     "--http-client-connect-timeout should be positive"),
    # a pattern Go's regexp refuses (Python's re would take the lookahead)
    (["--topic-pattern=(?=x)", "--lookupd-http-address=a:1"],
     "invalid --topic-pattern '(?=x)': error parsing regexp: "),
])
def test_flag_errors_exit_1_with_a_message(args, message):
    result = run_tool("nsq_to_file", *args, timeout=20)
    assert result.returncode == 1
    assert message in result.stderr.decode()


@pytest.mark.timeout(30)
def test_bad_flags_exit_2_and_version(tmp_path):
    result = run_tool("nsq_to_file", "--no-such-flag", timeout=20)
    assert result.returncode == 2
    assert "flag provided but not defined: -no-such-flag" in result.stderr.decode()
    result = run_tool("nsq_to_file", "--version", timeout=20)
    assert result.returncode == 0
    assert result.stdout.decode() == "nsq_to_file v1.3.0\n"  # upstream's exact line


@pytest.mark.timeout(30)
def test_unreachable_nsqd_then_sigterm_exits_cleanly(tools, tmp_path):
    # as upstream's: the topic's logger cannot be made, that is logged, the program runs on
    # (a bad --consumer-opt is ignored, as upstream applies them without looking at errors)
    proc = tools.start("nsq_to_file", "--topic=t", "--nsqd-tcp-address=127.0.0.1:1",
                       f"--output-dir={tmp_path}", "--consumer-opt=max_attempts,-1")
    wait_for(lambda: "couldn't create logger" in proc.stderr(), timeout=20)
    lines = proc.stderr().splitlines()
    assert lines[0].endswith(" INF    1 [t/nsq_to_file] (127.0.0.1:1) connecting to nsqd")
    assert lines[1].endswith(" ERROR: couldn't create logger for new topic t: "
                             "dial tcp 127.0.0.1:1: connect: connection refused")
    time.sleep(0.5)
    assert proc.alive()
    assert proc.stop(signal.SIGTERM) == 0
    assert files_under(tmp_path / "nothing") == []
    assert not any(p.suffix == ".log" for p in Path(tmp_path).iterdir() if p.is_file())


@pytest.mark.timeout(30)
def test_a_message_delivered_many_times_is_still_archived(nsqd, tools, tmp_path):
    from helpers.wire import Wire

    topic = unique_name("attempts")
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, [b"stubborn"])
    wire = Wire(nsqd.tcp_address)
    try:
        wire.identify(feature_negotiation=True)
        wire.sub(topic, CHANNEL, rdy=1)
        for i in range(6):  # six deliveries handed back: the next one is attempt 7
            msg = wire.read_message()
            assert msg.attempts == i + 1
            if i == 5:
                wire.cmd(b"RDY", "0")  # ...and it goes to nsq_to_file, not back to us
            wire.cmd(b"REQ", msg.id, "0")
        wait_for(lambda: channel_stats(nsqd.http_address, topic, CHANNEL)["depth"] == 1,
                 what="the message back in the queue")
    finally:
        wire.close()
    out = tmp_path / "out"
    proc = tools.start("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       f"--output-dir={out}", "--filename-format=<TOPIC>.log")
    wait_for(drained(nsqd.http_address, topic, CHANNEL, 1), what="the message archived")
    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    assert lines_of(out / f"{topic}.log") == [b"stubborn"]  # go-nsq's max_attempts=5 would drop it


@pytest.mark.timeout(30)
def test_unwritable_output_is_fatal_and_acknowledges_nothing(nsqd, tmp_path):
    topic = unique_name("fatal")
    create_channel(nsqd.http_address, topic, CHANNEL)
    mpub(nsqd.http_address, topic, [b"kept-1", b"kept-2"])
    (tmp_path / "a-file").write_text("not a directory")
    result = run_tool("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      f"--output-dir={tmp_path / 'a-file' / 'sub'}", timeout=20)
    assert result.returncode == 1
    assert "unable to create dir" in result.stderr.decode()
    stats = channel_stats(nsqd.http_address, topic, CHANNEL)
    assert stats["in_flight_count"] + stats["depth"] == 2  # nsqd will deliver them again


def test_pid_token_is_this_process(tmp_path):
    from nsqpy.tools.common import Options
    from nsqpy.tools.nsq_to_file import filename_format

    o = Options(dict(filename_format="<TOPIC>-<PID><REV>-<HOST>", gzip=True, rotate_size=0,
                     rotate_interval=0, work_dir="/w", output_dir="/w", host_identifier="<HOSTNAME>"))
    assert filename_format(o, "t", hostname="a.b.c") == f"t-{os.getpid()}<REV>-a.b.c.gz"
    o.gzip = False
    assert filename_format(o, "t", hostname="a.b.c", pid=7) == "t-7-a.b.c"
