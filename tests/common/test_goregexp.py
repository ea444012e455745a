"""Go 1.19's regexp (upstream v1.3.0's build) as ``common.goregexp`` reproduces it: each row's
verdict is what Go's ``regexp.MatchString`` answered (``None``: Go refused the pattern).
The same edges run against upstream nsqd's auth grants in tests/security/test_auth_upstream.py."""

from __future__ import annotations

import pytest

from nsqpy.common import goregexp

ROWS = [
    # the two cases of issue #35: Python's re decided them the other way
    ("^(?=t)t$", "t", None), ("^[[:alpha:]]$", "t", True),
    # RE2 and Go disagree: refused as Go refuses them
    ("\\C", "t", None), ("t\\C", "tx", None), ("(?i)\\C", "t", None), ("[\\C]", "t", None),
    ("(?<n>t)", "t", None), ("\\p{Toto}", "t", None), ("\\p{Kawi}", "t", None),
    ("[\\p{^Vithkuqi}]", "t", None),
    # look-alikes that are fine in Go
    ("\\\\C", "\\C", True), ("[\\\\]C", "\\C", True), ("\\Q\\C\\E", "\\C", True),
    ("[(?<]", "<", True), ("\\Q(?<\\E", "(?<", True), ("[[:alpha:](?<]", "<", True),
    ("(?P<n>t)", "t", True), ("[]a]", "]", True), ("[^]C]", "t", True),
    # RE2 syntax Python's re lacks, and Python syntax RE2 lacks
    ("(?U)t+", "tt", True), ("\\pL", "t", True), ("\\p{Greek}", "t", False), ("\\PL", "1", True),
    ("[[:^alpha:]]", "1", True), ("[[:word:]]+$", "t_1", True), ("\\z", "t", True),
    ("\\Z", "t", None), ("(t)\\1", "tt", None), ("(?P=n)", "t", None), ("(?#c)t", "t", None),
    ("(?x) t", "t", None), ("\\G", "t", None), ("\\e", "t", None), ("[[:foo:]]", "t", None),
    ("x**", "x", None), ("a{1001}", "a", None), ("\\pL{1000}", "t", False),
    ("\\101", "A", True), ("\\8", "t", None), ("(?i)K", "k", True), ("x{,3}", "x{,3}", True),
    # unanchored: a match anywhere
    ("foo", "xfooy", True), ("^foo$", "xfooy", False), ("", "anything", True),
]


@pytest.mark.parametrize("pattern,text,verdict", ROWS, ids=[r[0] for r in ROWS])
def test_go_verdicts(pattern, text, verdict):
    if verdict is None:
        with pytest.raises(ValueError, match="^error parsing regexp: "):
            goregexp.compile(pattern)
    else:
        assert goregexp.match_string(pattern, text) is verdict


def test_nesting_beyond_go_limit_is_a_known_difference():
    """Go refuses a parse tree deeper than 1,000 levels; RE2 takes it (docs/security.md)."""
    deep = "(" * 1000 + "a" + ")" * 1000
    assert goregexp.match_string(deep, "a") is True  # Go: expression nests too deeply
    assert goregexp.match_string("(" * 999 + "a" + ")" * 999, "a") is True  # Go too
