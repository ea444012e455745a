"""Upstream's answers as data: the side-by-side tests run without upstream's binaries too.

A side-by-side test asks for upstream's answer through ``recording(kind, name).answer(case,
produce)``. With ``NSQ_UPSTREAM_BIN`` set, ``produce()`` runs against upstream's binaries (live)
and its value is what the test compares ours with; ``make record-upstream``
(``NSQ_RECORD_UPSTREAM=1``) also writes it to ``tests/recordings/<kind>/<name>.json``. Without
the binaries the value comes from that file, so CI compares ours with what upstream answered
when it was recorded. A recording holds upstream's observable answers only (bytes, exit codes,
masked lines, JSON documents), never its code, and only in a masked, sorted form: re-recording
an unchanged upstream leaves ``git status`` clean.

Values are JSON with three tags so that a recorded answer is equal to a live one: ``{"$b":
text}`` for bytes (latin-1, so every byte reads back as itself and text stays readable),
``{"$t": [...]}`` for tuples and ``{"$d": [[key, value], ...]}`` for dicts with keys that are not
strings (sorted by key: Counters and tables, whose order is how they were filled). A file holds one line per case, sorted, so a re-recording diffs case by case.

Each test that compared ours with a recording (or, live, with upstream) notes it in its report's
``user_properties``; tests/conftest.py counts them for the run's closing lines.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest

from helpers.upstream import upstream_dir

RECORDINGS = Path(__file__).resolve().parent.parent / "recordings"
#: ``user_properties`` names: a recording compared (replay), upstream asked live, a recording
#: that differs from what upstream answered live
REPLAYED, LIVE, STALE = "upstream_recording", "upstream_live", "upstream_recording_stale"

T = TypeVar("T")


def live() -> bool:
    """Whether upstream's binaries are there to ask (else recordings answer for them)."""
    return upstream_dir() is not None


def recording_mode() -> bool:
    """``make record-upstream``: live answers are written to the recordings."""
    return live() and os.environ.get("NSQ_RECORD_UPSTREAM") == "1"


# --- the current test, whose report counts what it compared --------------------------------------

_current: list[pytest.Item] = []


def track(item: pytest.Item):
    """Around one test (tests/conftest.py): recordings used now are counted for ``item``."""
    _current[:] = [item]


def current_test() -> str:
    """The running test's name, parameters included."""
    assert _current, "no test is running"
    return _current[0].name


def _note(name: str, value: str) -> None:
    if _current:
        _current[0].user_properties.append((name, value))


# --- encoding ------------------------------------------------------------------------------------

def encode(value: Any) -> Any:
    """``value`` as plain JSON, bytes, tuples and non-string keys tagged."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": bytes(value).decode("latin-1")}
    if isinstance(value, tuple):
        return {"$t": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: encode(v) for k, v in value.items()}
        # (sorted: such a dict is a multiset or a table, whose order is how it was filled)
        pairs = [[encode(k), encode(v)] for k, v in value.items()]
        return {"$d": sorted(pairs, key=lambda pair: json.dumps(pair[0]))}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a recording holds JSON, bytes and tuples, not {type(value).__name__}")


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (tag, inner), = value.items()
            if tag == "$b":
                return inner.encode("latin-1")
            if tag == "$t":
                return tuple(decode(v) for v in inner)
            if tag == "$d":
                return {decode(k): decode(v) for k, v in inner}
        return {k: decode(v) for k, v in value.items()}
    return value


def _line(value: Any) -> str:
    return json.dumps(encode(value), ensure_ascii=True, separators=(",", ":"))


# --- the files -----------------------------------------------------------------------------------

class Recording:
    """Upstream's answers for one test module, ``tests/recordings/<kind>/<name>.json``."""

    _open: dict[Path, "Recording"] = {}

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cases: dict[str, str] = _parse(path.read_text()) if path.exists() else {}
        self.recorded: dict[str, str] = {}  # the cases this process recorded, not yet written

    @property
    def live(self) -> bool:
        return live()

    def answer(self, case: str | None, produce: Callable[[], T],
               kept: Callable[[T], Any] | None = None) -> T:
        """Upstream's answer for ``case`` (None: the running test's name, parameters included):
        ``produce()`` against upstream (written to the file when recording), or the recorded
        one. ``kept`` says which part is recorded where the rest varies from run to run (the
        test then gets the whole answer live, that part replayed). A case never recorded fails
        the test."""
        if case is None:
            case = current_test()
        where = f"{self.path.relative_to(RECORDINGS)}: {case}"
        if live():
            value = produce()
            line = _line(kept(value) if kept else value)
            if recording_mode():
                self.record(case, line)
            elif case in self.cases and self.cases[case] != line:
                _note(STALE, where)
            _note(LIVE, where)
            return value
        if case not in self.cases:
            pytest.fail(f"no recording of upstream's answer for {where}: run "
                        "`make record-upstream` with NSQ_UPSTREAM_BIN set (docs/testing.md)")
        _note(REPLAYED, where)
        return decode(json.loads(self.cases[case]))

    def record(self, case: str, line: str) -> None:
        """Upstream's answer for ``case`` (a JSON line), to be written by ``write``."""
        self.cases[case] = line
        self.recorded[case] = line

    def write(self) -> None:
        """The cases recorded here, merged into the file as it is now, under a lock: the tests
        of one module can run in several processes (each xdist worker ends with its own
        ``write``; a module's serial tests run apart from the rest), and each must add its
        cases to the others', not write its own over them."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # (released when the file is closed)
            fh.seek(0)
            self.cases = _parse(fh.read()) | self.recorded
            fh.seek(0)
            fh.truncate()
            body = ",\n".join(f"{json.dumps(k)}:{v}" for k, v in sorted(self.cases.items()))
            fh.write("{\n" + body + "\n}\n")
        self.recorded.clear()


def _parse(text: str) -> dict[str, str]:
    """A recording's text as case -> its JSON line (as ``Recording.write`` lays them out)."""
    cases = {}
    read_key = json.JSONDecoder().raw_decode
    for line in text.splitlines()[1:-1]:
        key, end = read_key(line)
        cases[key] = line.rstrip(",")[end + 1:]
    return cases


def recording(kind: str, name: str) -> Recording:
    """The recording of module ``name`` among ``kind`` (one directory per kind of answer:
    ``transcripts``, ``http``, ``exits``...), shared by every test of the process."""
    path = RECORDINGS / kind / f"{name}.json"
    if path not in Recording._open:
        Recording._open[path] = Recording(path)
    return Recording._open[path]


def write_recorded() -> None:
    """At the end of the session (each xdist worker's): the files that got new answers."""
    for rec in Recording._open.values():
        if rec.recorded:
            rec.write()


def counts(reports) -> dict[str, int]:
    """How many tests replayed a recording, ran live, met a stale recording (by test id)."""
    seen: dict[str, set[str]] = {REPLAYED: set(), LIVE: set(), STALE: set()}
    for report in reports:
        for name, _ in getattr(report, "user_properties", ()):
            if name in seen:
                seen[name].add(report.nodeid)
    return {name: len(ids) for name, ids in seen.items()}


def summary(used: dict[str, int]) -> list[str]:
    """The closing lines for ``counts``."""
    lines = []
    if used[REPLAYED]:
        lines.append(f"{used[REPLAYED]} side-by-side tests compared ours with upstream's recorded "
                     "answers (tests/recordings); NSQ_UPSTREAM_BIN runs them live")
    if used[LIVE]:
        lines.append(f"{used[LIVE]} side-by-side tests compared ours with upstream's binaries live"
                     + ("; recorded" if recording_mode() else ""))
    if used[STALE]:
        lines.append(f"{used[STALE]} tests found a recording that differs from upstream's answer "
                     "now: `make record-upstream` rewrites them")
    return lines
