"""The rules that place tests in parallel groups (tests/helpers/groups.py), and the closing line
for side-by-side tests skipped without upstream's binaries (tests/helpers/upstream.py)."""

from __future__ import annotations

from helpers import groups, upstream

TESTS = groups.TESTS


def place(rel: str, source: str, name: str = "test_x") -> str | None:
    """The group a module at tests/<rel> holding ``source`` would get (nothing is written: the
    rules only see the path relative to tests/ and the module's source)."""
    path = TESTS / rel
    groups._sources[path] = source  # what the module would hold, without writing into tests/
    try:
        return groups.group_of(path, name)
    finally:
        groups._sources.pop(path, None)


def test_new_files_are_grouped_by_where_they_are_and_what_they_import():
    assert place("spark/test_history_new.py", "") == "spark"
    assert place("docs/test_docs_blocks.py", "") == "ports"
    assert place("nsqd/history/test_history.py", "") is None
    assert place("nsqd/test_scale_bench.py", "") == "bench"
    assert place("lookupd/test_footprint_more.py", "") == "serial"
    assert place("nsqd/replication/test_more.py", "from helpers.chaos import drain\n") == "chaos"
    assert place("admin/test_page.py", "from admin.browser_util import expect\n") == "browser"
    assert place("cluster/test_dev.py", "argv = [VENV_BIN / 'nsqpy-dev']\n") == "ports"
    assert place("nsqd/test_own.py", 'XDIST_GROUP = "serial"\n') == "serial"


def test_scopes_keep_heavy_tests_apart_and_light_modules_whole():
    root = TESTS.parent
    assert groups.scope_of_nodeid(root, "tests/spark/test_source.py::test_a[x@y]") == "spark"
    assert groups.scope_of_nodeid(root, "tests/nsqd/replication/test_chaos.py::test_a") == "heavy"
    assert groups.scope_of_nodeid(root, "tests/admin/test_ui.py::test_a@browser") == "heavy"
    assert groups.scope_of_nodeid(root, "tests/protocol/test_commands.py::test_a") == \
        "tests/protocol/test_commands.py"
    assert groups.scope_of_nodeid(
        root, "tests/security/test_limits.py::test_deflate_bomb_is_inflated_step_by_step") == "serial"


class Report:
    def __init__(self, reason: str) -> None:
        self.longrepr = ("file.py", 1, reason)


def test_side_by_side_skips_are_counted_by_their_prefix():
    reports = [Report("Skipped: " + upstream.skip_reason("nsqd")), Report("Skipped: needs openssl"),
               Report(upstream.skip_reason("nsqd", "nsqadmin"))]
    assert [upstream.is_side_by_side_skip(r) for r in reports] == [True, False, True]
    assert upstream.skipped_summary(2).startswith("2 side-by-side tests skipped")
    assert "NSQ_UPSTREAM_BIN" in upstream.skipped_summary(2)
