"""Shared fixtures: real server processes on free loopback ports, always stopped by PID."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from helpers import gooracle, groups, powercut, recording, upstream
from helpers.servers import Nsqd

# Every JVM the tests start (Spark sessions, drivers, a standalone master, worker and executors,
# Spark Connect) lives seconds to a minute: C1's quick code pays, C2's never does. Measured on
# tests/spark: 26-38% less CPU, the same or shorter wall time (docs/testing.md). A test run's
# own setting wins. The JVMs print one "Picked up JDK_JAVA_OPTIONS" line on stderr for it.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")


@pytest.hookimpl(tryfirst=True)  # the marks are there before any other plugin looks
def pytest_collection_modifyitems(config, items):
    """Parallel runs: each test's xdist group by its path and imports (helpers/groups.py)."""
    groups.assign_groups(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s workers get their work by group and by module (helpers/groups.py)."""
    return groups.make_scheduler(config, log)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A serial test waits here for the others to finish, outside pytest-timeout's clock; a run
    of serial tests holds the others off from its first test to its last."""
    recording.track(item)  # upstream's recorded answers it compares are counted in its report
    with groups.exclusion(item, nextitem):
        yield


def pytest_sessionfinish(session):
    """``make record-upstream``: the recordings that got upstream's answers are written (by each
    xdist worker for the modules it ran)."""
    recording.write_recorded()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    """The side-by-side tests at the end, after the short summary (which leaves their skips
    out): how many compared ours with upstream's recorded answers or with its binaries live, and
    how many skipped for want of upstream's binaries (0 when every one has a recording)."""
    stats = terminalreporter.stats
    skipped = stats.get("skipped", [])
    ours = [rep for rep in skipped if upstream.is_side_by_side_skip(rep)]
    live_only = [rep for rep in skipped if upstream.is_live_only_skip(rep)]
    if ours or live_only:
        stats["skipped"] = [rep for rep in skipped if rep not in ours and rep not in live_only]
    used = recording.counts(rep for reports in stats.values() for rep in reports)
    try:
        return (yield)
    finally:
        stats["skipped"] = skipped  # the closing counts include them
        for line in recording.summary(used):
            terminalreporter.write_line(line)
        if live_only:
            terminalreporter.write_line(upstream.live_only_summary(len(live_only)))
        if ours or live_only or used[recording.REPLAYED] or used[recording.LIVE]:
            terminalreporter.write_line(upstream.skipped_summary(len(ours)), yellow=bool(ours))


@pytest.fixture(scope="session")
def go_oracle(tmp_path_factory):
    """Go's regexp, encoding/json and crypto/x509 answering batches (helpers/gooracle.py); the
    test skips where ``go`` is not installed."""
    oracle = gooracle.GoOracle(gooracle.build(tmp_path_factory.mktemp("gooracle")))
    yield oracle
    oracle.close()


@pytest.fixture
def nsqd_factory(tmp_path):
    """Start nsqd processes with extra flags; all are stopped at the end of the test."""
    started: list[Nsqd] = []

    def start(*extra: str, data_path: Path | None = None) -> Nsqd:
        node = Nsqd(data_path or tmp_path / f"nsqd{len(started)}", *extra)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop_all()  # and the nodes a test's restart() made from it


@pytest.fixture
def power_cut_fs(tmp_path):
    """Make simulated disks that a power cut can hit (``helpers.powercut.PowerCutFS``):
    ``power_cut_fs(mode="journal" | "strict")``; every mount is stopped at the end (stop the
    programs on it first). Skips when ``/dev/fuse`` cannot be used."""
    reason = powercut.usable()
    if reason:
        pytest.skip(reason)
    made: list[powercut.PowerCutFS] = []

    def make(mode: str = "journal") -> powercut.PowerCutFS:
        fs = powercut.PowerCutFS(tmp_path / f"fs{len(made)}", mode)
        made.append(fs)
        return fs

    yield make
    for fs in made:
        fs.stop()


@pytest.fixture
def power_cut_nsqd(power_cut_fs, tmp_path):
    """Start nsqd processes whose data path is on a power-cut disk each
    (``helpers.power_loss.PowerCutNsqd``); each is stopped, then its disk, at the end."""
    from helpers.power_loss import PowerCutNsqd

    made: list = []

    def start(*flags: str, mode: str = "journal") -> PowerCutNsqd:
        node = PowerCutNsqd(power_cut_fs(mode), tmp_path / f"nsqd_on_fs{len(made)}", *flags)
        made.append(node)
        return node

    yield start
    for node in made:
        node.close()


@pytest.fixture
def nsqd(nsqd_factory):
    return nsqd_factory()


@pytest.fixture(scope="module")
def shared_nsqd(tmp_path_factory):
    """One nsqd for a whole module of tests that use distinct topic names."""
    node = Nsqd(tmp_path_factory.mktemp("shared_nsqd"))
    yield node
    node.stop()


@pytest.fixture
def tornado_run():
    """Run a coroutine function on a fresh asyncio loop that tornado's IOLoop wraps (for pynsq).

    Every pynsq test gets a fresh loop, so connections and timers left behind by one test die
    with its loop instead of firing in the next one.

    ``tornado_run(main, timeout)`` returns ``main()``'s result or fails the test when the hard
    deadline passes. pynsq objects must be created inside ``main`` (they bind ``IOLoop.current()``).
    """
    import tornado.ioloop

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    io_loop = tornado.ioloop.IOLoop.current()  # AsyncIOMainLoop bound to ``loop``

    def run(main: Callable[[], Awaitable], timeout: float):
        try:
            return loop.run_until_complete(asyncio.wait_for(main(), timeout))
        except asyncio.TimeoutError:
            raise AssertionError(f"pynsq scenario exceeded its {timeout}s deadline") from None

    try:
        yield run
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        io_loop.close(all_fds=True)  # closes every socket pynsq left open, and the asyncio loop
        asyncio.set_event_loop(None)
