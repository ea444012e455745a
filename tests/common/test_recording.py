"""The recorder of upstream's answers (helpers/recording.py): what it writes reads back equal, in
a form that diffs case by case, and the run's closing lines count what was compared."""

from __future__ import annotations

from collections import Counter

import pytest

from helpers import recording


class Report:
    def __init__(self, nodeid: str, *props: tuple[str, str]) -> None:
        self.nodeid, self.user_properties = nodeid, list(props)


def test_answers_read_back_equal():
    answer = (1, b"\x00\xff<open>", ["a", ("b", 2)], {"k": None, "f": 1.5},
              Counter({b"rec": 2, b"other": 1}), {("https", "tls1.0"): ("TLSv1", "AES")})
    back = recording.decode(recording.encode(answer))
    assert back == answer
    assert isinstance(back[0], int) and isinstance(back[1], bytes) and isinstance(back[2][1], tuple)


def test_multisets_are_stored_in_one_order():
    one, two = Counter(), Counter()
    one[b"a"] += 1
    one[b"b"] += 1
    two[b"b"] += 1
    two[b"a"] += 1
    assert recording.encode(one) == recording.encode(two)
    with pytest.raises(TypeError):
        recording.encode(object())


def test_a_file_holds_one_sorted_line_per_case(tmp_path):
    rec = recording.Recording(tmp_path / "kind" / "mod.json")
    rec.record("b: two", '{"$b":"x"}')
    rec.record("a", "[1]")
    rec.write()
    assert (tmp_path / "kind" / "mod.json").read_text() == '{\n"a":[1],\n"b: two":{"$b":"x"}\n}\n'
    assert recording.Recording(tmp_path / "kind" / "mod.json").cases == rec.cases


def test_processes_recording_one_module_add_to_each_other(tmp_path):
    """Two xdist workers ran tests of one module (its serial tests apart): each writes its own
    cases and keeps the other's, whichever writes last; a case both recorded is the newer."""
    path = tmp_path / "kind" / "mod.json"
    first, second = recording.Recording(path), recording.Recording(path)
    first.record("a", "1")
    first.record("both", '"first"')
    second.record("b", "2")
    first.write()
    second.write()
    second.record("both", '"second"')
    second.write()
    assert recording.Recording(path).cases == {"a": "1", "b": "2", "both": '"second"'}


def test_the_closing_lines_count_tests_not_answers():
    reports = [Report("t1", (recording.REPLAYED, "a"), (recording.REPLAYED, "b")),
               Report("t1", (recording.REPLAYED, "a")),  # the same test's teardown report
               Report("t2", (recording.REPLAYED, "c")), Report("t3")]
    used = recording.counts(reports)
    assert used == {recording.REPLAYED: 2, recording.LIVE: 0, recording.STALE: 0}
    assert recording.summary(used) == [
        "2 side-by-side tests compared ours with upstream's recorded answers (tests/recordings); "
        "NSQ_UPSTREAM_BIN runs them live"]
