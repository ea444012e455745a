"""Go's ``regexp`` where upstream matches input with it: auth grants (``internal/auth``) and
``nsq_to_file --topic-pattern``.

Python's ``re`` is the wrong engine for these: it accepts what Go refuses (lookarounds,
backreferences), so a grant upstream rejects would be honoured, and it refuses what Go accepts
(POSIX classes ``[[:alpha:]]``, ``\\pL``, ``(?U)``), so a grant upstream honours would deny.
Go's engine is a port of RE2, so patterns compile with RE2 itself (the ``google-re2`` package);
they are never rewritten. RE2 (C++) and Go 1.19's ``regexp`` (upstream v1.3.0's build) still
disagree on a few constructs; those are refused here the way Go refuses them:

* ``\\C`` (any byte) outside a character class: RE2 has it, Go does not (inside a class both
  refuse it);
* ``(?<name>re)``: RE2 takes it, Go learned it only in 1.22 (1.19 has ``(?P<name>re)`` only);
* ``\\p{…}`` names of scripts added after Unicode 13.0 (Go 1.19's tables): ``Toto``, ``Kawi`` …

What remains different is in docs/security.md (a parse tree nested more than 1,000 levels deep,
which Go refuses and RE2 takes; RE2's memory budget against Go's size limits).

A match is Go's ``MatchString``: anywhere in the text (RE2's unanchored search). Names are ASCII
(nsqd checks them first), so Go's rune-at-a-time and RE2's byte-at-a-time matching agree.
"""

from __future__ import annotations

from typing import Any

# scripts RE2 may know (Unicode 14.0 onwards) that Go 1.19's Unicode 13.0 tables do not have
_NEWER_SCRIPTS = frozenset((
    "Cypro_Minoan", "Old_Uyghur", "Tangsa", "Toto", "Vithkuqi",  # 14.0
    "Kawi", "Nag_Mundari",  # 15.0
    "Garay", "Gurung_Khema", "Kirat_Rai", "Ol_Onal", "Sunuwar", "Todhri", "Tulu_Tigalari",  # 16.0
    "Beria_Erfe", "Chisoi", "Sidetic", "Tai_Yo", "Tolong_Siki",  # 17.0
))

# RE2's default budget (8 MiB) refuses patterns Go compiles (``\pL{1000}``); Go's own ceiling is
# 128 MiB of instructions, so RE2 gets that much room (used only as a pattern needs it)
_MAX_MEM = 256 << 20

_re2: Any = None
_options: Any = None


class RegexpUnavailable(RuntimeError):
    """The RE2 engine (``google-re2``) is not installed: Go's semantics cannot be had."""


def require() -> None:
    """Load the engine now; :class:`RegexpUnavailable` if it is missing (callers refuse to start
    rather than fall back to ``re``, which decides grants differently)."""
    global _re2, _options
    if _re2 is not None:
        return
    try:
        import re2
    except ImportError as err:
        raise RegexpUnavailable(
            "Go regular expressions need the google-re2 package "
            f"(pip install google-re2): {err}") from None
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    options.max_mem = _MAX_MEM
    options.never_capture = True  # only "does it match" is asked
    _re2, _options = re2, options


class GoRegexp:
    """A compiled pattern; :meth:`match_string` is Go's ``(*Regexp).MatchString``."""

    __slots__ = ("pattern", "_search")

    def __init__(self, pattern: str, compiled: Any) -> None:
        self.pattern = pattern
        self._search = compiled.search

    def match_string(self, text: str) -> bool:
        return self._search(text) is not None

    def __repr__(self) -> str:
        return f"GoRegexp({self.pattern!r})"


def compile(pattern: str) -> GoRegexp:  # noqa: A001 - Go's name, as regexp.Compile
    """Go's ``regexp.Compile``: ValueError (``error parsing regexp: …``) where Go errs."""
    require()
    problem = _go_refuses(pattern)
    if problem is None:
        try:
            return GoRegexp(pattern, _re2.compile(pattern, _options))
        except _re2.error as err:
            problem = str(err)
        except UnicodeEncodeError:  # a lone surrogate: Go's decoder would have made it U+FFFD
            problem = "invalid UTF-8"
    raise ValueError(f"error parsing regexp: {problem}")


def match_string(pattern: str, text: str) -> bool:
    """Go's ``regexp.MatchString``; ValueError when the pattern does not compile."""
    return compile(pattern).match_string(text)


def _go_refuses(pattern: str) -> str | None:
    """Go's error for the constructs RE2 accepts and Go 1.19 does not, found by walking the
    pattern's tokens as Go's parser does (escapes, ``\\Q…\\E``, classes with ``[:name:]``);
    None for every other pattern (RE2 decides those as Go does)."""
    if "\\" not in pattern and "(?<" not in pattern:
        return None
    i, n = 0, len(pattern)
    in_class = first = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if nxt == "Q" and not in_class:  # literal text up to \E (or the end)
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
                continue
            if nxt == "C":
                return "invalid escape sequence: `\\C`"
            if nxt in ("p", "P") and pattern.startswith("{", i + 2):
                end = pattern.find("}", i + 3)
                name = pattern[i + 3:end if end >= 0 else n].lstrip("^")
                if name in _NEWER_SCRIPTS:
                    return f"invalid character class range: `{pattern[i:end + 1]}`"
            i += 2
            first = False
            continue
        if in_class:
            if c == "]" and not first:
                in_class = False
            elif c == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                if end >= 0:  # a POSIX class: its ']' does not close the bracket
                    i = end + 2
                    first = False
                    continue
            first = False
            i += 1
            continue
        if c == "[":
            in_class = first = True
            i += 2 if pattern.startswith("^", i + 1) else 1
            continue
        if pattern.startswith("(?<", i):
            return "invalid or unsupported Perl syntax: `(?<`"
        i += 1
    return None


__all__ = ["GoRegexp", "RegexpUnavailable", "compile", "match_string", "require"]
