"""Go 1.19's regexp (upstream v1.3.0's build) as ``common.goregexp`` reproduces it: each row's
verdict is what Go's ``regexp.MatchString`` answered (``None``: Go refused the pattern). Then thousands of
generated patterns against Go 1.19's own regexp (tests/gooracle, built when ``go`` is installed).
The same edges run against upstream nsqd's auth grants in tests/security/test_auth_upstream.py."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from nsqpy.common import goregexp

from helpers.gooracle import differential

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


# --- against Go itself: generated patterns, each example a batch for the oracle -----------------

# what auth grants and --topic-pattern are matched against: topic and channel names
_NAME = st.text(alphabet="abkxyzAKZ019_-.#", max_size=8)

# the pieces of a pattern: RE2's and Go's syntax, Python's that neither has, and where they part
_LITERAL = st.sampled_from(list("abkxzAKZ019_-.#é") + ["\u212a", "\u017f", " "])
_ESCAPE = st.sampled_from([
    "\\d", "\\D", "\\w", "\\W", "\\s", "\\S", "\\b", "\\B", "\\A", "\\z", "\\.", "\\*", "\\\\",
    "\\-", "\\#", "\\x41", "\\x{6B}", "\\x{10FFFF}", "\\101", "\\0", "\\n", "\\t", "\\f", "\\v",
    "\\a", "\\pL", "\\PL", "\\pN", "\\p{Greek}", "\\p{^Greek}", "\\P{Latin}", "\\p{Lu}", "\\p{L}",
    "\\p{Toto}", "\\p{Kawi}", "\\p{Vithkuqi}", "\\p{Nag_Mundari}", "\\p{Any}", "\\p{Foo}",
    "\\C", "\\Z", "\\G", "\\e", "\\1", "\\8", "\\K", "\\Q.k\\E", "\\Q(?<\\E", "\\Q\\C", "\\"])
_CLASS_ITEM = st.sampled_from([
    "a", "k", "z", "0", "9", "_", "-", ".", "#", "a-k", "0-9", "K-a", "z-a", "[:alpha:]",
    "[:^digit:]", "[:word:]", "[:foo:]", "[:alpha", "\\d", "\\pL", "\\p{Greek}", "\\p{Toto}",
    "\\C", "\\]", "\\-", "\\\\", "(?<", "[", "\u212a"])
_FLAGS = st.sampled_from(["i", "s", "m", "U", "x", "-i", "i-s", "im", "", "-", "q"])
_REPEAT = st.sampled_from([
    "*", "+", "?", "*?", "+?", "??", "{2}", "{0,1}", "{1,}", "{1,3}", "{,3}", "{3,1}", "{1000}",
    "{1001}", "{2,1000}", "**", "*+", "++", "{", "{1", "{1,2"])


@st.composite
def _class(draw) -> str:
    negate = draw(st.sampled_from(["", "^"]))
    first = draw(st.sampled_from(["", "]", "-"]))
    return f"[{negate}{first}{''.join(draw(st.lists(_CLASS_ITEM, max_size=4)))}]"


def _wrapped(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    group = st.sampled_from(["(", "(?:", "(?P<n>", "(?<n>", "(?P<n", "(?=", "(?!", "(?<=",
                             "(?<!", "(?#", "(?P=n", "(?i:", "(?U:", "(?>"])
    return st.one_of(
        st.tuples(group, inner).map(lambda t: f"{t[0]}{t[1]})"),
        st.tuples(inner, _REPEAT).map("".join),
        st.lists(inner, min_size=2, max_size=3).map("|".join),
        st.lists(inner, min_size=2, max_size=4).map("".join),
        _FLAGS.map(lambda f: f"(?{f})") | st.just(""),
    )


_PATTERN = st.recursive(
    st.one_of(_LITERAL, _ESCAPE, _class(), st.sampled_from(["^", "$", ".", "(", ")", "|", "]"])),
    _wrapped, max_leaves=8)


@differential(batches=60)
@given(cases=st.lists(st.tuples(_PATTERN, st.lists(_NAME, min_size=1, max_size=4)),
                      min_size=30, max_size=60))
def test_generated_patterns_compile_and_match_as_go(go_oracle, cases):
    """Every generated pattern is refused where Go refuses it, and matches the same names."""
    replies = go_oracle.ask(("r", [pattern, *texts]) for pattern, texts in cases)
    differences = []
    for (pattern, texts), reply in zip(cases, replies):
        try:
            compiled = goregexp.compile(pattern)
        except ValueError as err:
            if reply.error is None:
                differences.append(f"{pattern!r}: Go compiles it, we refuse it ({err})")
            continue
        if reply.error is not None:
            differences.append(f"{pattern!r}: Go refuses it ({reply.error}), we compile it")
            continue
        verdicts = "".join("1" if compiled.match_string(text) else "0" for text in texts)
        if verdicts != reply.value:
            differences.append(f"{pattern!r} on {texts}: Go {reply.value}, we {verdicts}")
    assert not differences, "\n".join(differences)


def test_refusals_worded_as_go(go_oracle):
    """Where goregexp refuses a pattern RE2 would take, it says what Go says."""
    patterns = ["t\\C", "(?<n>t)", "\\p{Toto}", "[\\p{^Vithkuqi}]", "a(?<x>b)\\C"]
    for pattern, reply in zip(patterns, go_oracle.ask(("r", [p]) for p in patterns)):
        with pytest.raises(ValueError) as refused:
            goregexp.compile(pattern)
        assert str(refused.value) == reply.error, pattern
