"""How the suite runs in parallel (pytest-xdist): which tests share a worker and which never
overlap. Rules go by path and by what a test module imports, never by a marker on each test, so
a new test file lands in the right group by where it lives and what it uses.

Groups (docs/testing.md says the same for developers placing a new test):

- ``spark``: everything under tests/spark (JVMs).
- ``chaos``: modules that use the chaos helpers (helpers.chaos, helpers.chaos_pair) or cut the
  power under nsqd (``test_*power_loss*.py``, helpers.power_loss).
- ``browser``: modules that drive Chromium through Playwright.
- ``bench``: modules named ``test_*bench*.py`` (benchmarks written as tests).
- ``ports``: tests that bind the default ports 4150/4151/4160/4161/4171 (a ``make run``-like
  cluster): everything under tests/docs, and modules that start ``nsqpy-dev``/``devcluster``.
- ``serial``: tests that measure time or memory tightly (``test_footprint*.py``): while they
  run, no other test runs on any worker, nor in the Spark floor run beside (``make test``).

The first four are *heavy*. The Spark tests are one unit of work (one worker, one JVM session,
one test after another); chaos, browser and bench tests are another: at most two heavy tests run
at once, one per core. The ``ports`` tests go to one worker too, so they never overlap. Every
other module is one unit of work for whichever worker is free (its tests in order, its
module-scoped servers started once); units are handed out longest first (Spark, heavy, ports,
then the others by test count) and the serial unit last, when the other workers are running out
of work anyway: its tests then have the machine to themselves at little cost. A module may also name
its group itself with a module-level ``XDIST_GROUP = "name"`` line.

The scheduler (``GroupScheduling``, installed by tests/conftest.py for any ``-n`` run, whatever
``--dist`` says) reads the groups from the test ids themselves, so it does not depend on xdist
reading ``xdist_group`` marks: ``--dist loadgroup`` passes them by appending ``@group`` to each
node id on the workers, which pytest 9.2's structured node ids no longer take, so xdist groups
nothing (pytest-xdist#1386; docs/testing.md). The marks are still set, for inspection with
``--collect-only``.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import os
import re
from pathlib import Path
from typing import Iterator

import pytest

TESTS = Path(__file__).resolve().parent.parent

# (pattern on the test id relative to tests/, "path::test[params]", group): the first match wins;
# "*" crosses "/" and "::", so "spark/*" is every test under tests/spark.
ID_RULES: list[tuple[str, str]] = [
    ("spark/*", "spark"),
    ("docs/*", "ports"),
    ("*/test_*bench*.py::*", "bench"),
    ("*/test_footprint*.py::*", "serial"),
    ("*/test_*chaos*.py::*", "chaos"),
    ("*/test_*power_loss*.py::*", "chaos"),  # nsqd on the power-cut FUSE disk, many publishers
    # timing measured tightly: a busy neighbour on the 2 cores makes them fail
    ("nsqd/stats/test_statsd_format.py::test_a_stall_does_not_turn_into_a_burst", "serial"),
    ("security/test_limits.py::test_deflate_bomb_is_inflated_step_by_step", "serial"),
    ("security/test_limits.py::test_publisher_flooding_without_reading_is_bounded_and_cut_off",
     "serial"),
    ("nsqd/test_metadata_persist.py::*", "serial"),  # no PUB waits > 20 ms during 2,000 creates
    ("nsqd/test_scan_at_scale.py::*", "serial"),  # idle CPU and timeouts among 10,000 channels
    ("security/test_auth_upstream.py::*", "serial"),  # 5 s auth timeouts compared to the 0.5 s
    ("http_layer/test_backpressure.py::*", "bench"),  # 480k pipelined requests: a core's worth
    # seen late under a full parallel run: a 15 s adoption wait, log lines read after 0.2 s
    ("nsqd/replication/test_failover.py::test_origin_restarted_*", "serial"),
    ("interop/test_upstream_v2.py::test_same_log_lines*", "serial"),
]

# (regular expression on the module's source, group), for tests no id rule placed.
SOURCE_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^\s*(from|import) helpers\.(chaos|chaos_pair|power_loss)\b", re.M), "chaos"),
    (re.compile(r"\bplaywright\b|\bbrowser_util import\b", re.M), "browser"),
    (re.compile(r"nsqpy-dev|\bdevcluster\b"), "ports"),
]

HEAVY = {"spark", "chaos", "browser", "bench"}
SERIAL = "serial"

_sources: dict[Path, str] = {}


def _source(path: Path) -> str:
    if path not in _sources:
        try:
            _sources[path] = path.read_text(errors="replace")
        except OSError:
            _sources[path] = ""
    return _sources[path]


def group_of(path: Path, name: str = "") -> str | None:
    """The group of test ``name`` (``test_x[param]``) in the module at ``path``; None: none."""
    try:
        rel = path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        rel = path.name
    source = _source(path)
    declared = re.search(r"^XDIST_GROUP\s*=\s*['\"]([\w-]+)['\"]", source, re.M)
    if declared:
        return declared.group(1)
    test_id = f"{rel}::{name}"
    for pattern, group in ID_RULES:
        if fnmatch.fnmatchcase(test_id, pattern):
            return group
    return next((g for rx, g in SOURCE_RULES if rx.search(source)), None)


def assign_groups(items: list[pytest.Item]) -> None:
    """Mark each collected test with its ``xdist_group`` (what the scheduler below goes by)."""
    for item in items:
        group = group_of(Path(item.fspath), item.nodeid.split("::", 1)[-1])
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            item.stash[_GROUP] = group


_GROUP = pytest.StashKey[str]()

#: the xdist work unit (scope) of each group. Spark's JVMs are one unit, the other heavy groups
#: another: at most two heavy tests run at once, one per core, never two JVMs or two Chromiums.
#: (All heavy tests on one worker would be the critical path: ~17 of the 18 minutes measured.)
SCOPES = {"spark": "spark"} | {group: "heavy" for group in HEAVY - {"spark"}} \
    | {"ports": "ports", SERIAL: SERIAL}


#: the order units are handed out in (the longest first; every unit not named here comes
#: after these, largest first): the serial run goes last, when the other workers are running
#: out of work, so draining them costs little and its tests have the machine to themselves
ORDER = {"spark": 0, "heavy": 1, "ports": 2, SERIAL: 4}


def scope_of_nodeid(rootpath: Path, nodeid: str) -> str:
    """The work unit of a test id: its group's scope, else its module (a module's tests run in
    order on one worker and share its module-scoped servers)."""
    if "@" in nodeid.rsplit("]", 1)[-1]:  # --dist loadgroup on a pytest that takes its suffix
        nodeid = nodeid.rsplit("@", 1)[0]
    path, _, name = nodeid.partition("::")
    group = group_of(rootpath / path, name)
    if group is None:
        return path
    return SCOPES.get(group, group)


def make_scheduler(config: pytest.Config, log):
    """xdist's load-by-scope scheduler with our groups' scopes as the units and every other
    module a unit of its own; units go out largest first, so the Spark unit starts at once."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of_nodeid(config.rootpath, nodeid)

        def _assign_work_unit(self, node) -> None:
            # by ORDER (xdist orders by test count only)
            first = min(self.workqueue, key=lambda scope: ORDER.get(scope, 3))
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)


def _lock_dir(config: pytest.Config) -> Path | None:
    """A directory every worker of this run shares: ``NSQPY_TEST_LOCKS`` (``make test`` names
    one for the main run and the Spark floor beside it), else xdist's base temp's parent; None
    when the run is not parallel and no lock is needed."""
    shared = os.environ.get("NSQPY_TEST_LOCKS")
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        return Path(shared)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return None
    return factory.getbasetemp().parent


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


#: this worker's exclusive hold over a run of serial tests (None: not held)
_held: contextlib.ExitStack | None = None


def _hold(where: Path, mode: int) -> contextlib.ExitStack:
    """``run.lock`` in ``mode``, taken through ``gate.lock`` (in the same mode), held until the
    returned stack is closed."""
    stack = contextlib.ExitStack()
    with _flock(where / "gate.lock", mode):
        stack.enter_context(_flock(where / "run.lock", mode))
    return stack


def _is_serial(item: pytest.Item | None) -> bool:
    return item is not None and item.stash.get(_GROUP, None) == SERIAL


@contextlib.contextmanager
def exclusion(item: pytest.Item, nextitem: pytest.Item | None = None) -> Iterator[None]:
    """While a ``serial`` test runs (set-up to teardown) no other test runs on any worker.

    Every test takes ``run.lock`` shared, a serial test takes it exclusively; ``gate.lock`` keeps
    a waiting serial test from being starved by the others (a newcomer passes the gate only
    while no serial test waits). Serial tests come one after another on one worker (they are
    one unit), so the exclusive hold lasts from the first of them to the last (``nextitem``
    tells): the other workers are drained once for the whole run of them, not once per test
    (a module of 430 serial comparisons drained them 430 times, leaving the cores idle)."""
    global _held
    where = _lock_dir(item.config)
    if where is None:
        yield
        return
    if not _is_serial(item):
        with _hold(where, fcntl.LOCK_SH):
            yield
        return
    if _held is None:
        _held = _hold(where, fcntl.LOCK_EX)
    try:
        yield
    finally:
        if not _is_serial(nextitem):
            _held.close()
            _held = None
