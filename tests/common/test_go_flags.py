"""Go ``flag`` package behaviour of :mod:`nsqpy.common.flags`, on strings (no processes).

Pins what ``PrintDefaults`` writes (type names, defaults the Go way, order, quoting) and how
values parse (Go durations, Go integers) and fail (Go's wording), as upstream's programs do.
"""

from __future__ import annotations

import pytest

from nsqpy.common.flags import (
    Flag, FlagError, FlagSet, FlagUsageError, format_duration, go_quote, parse_duration,
    parse_go_int,
)

pytestmark = pytest.mark.timeout(30)


def sample() -> FlagSet:
    fs = FlagSet("demo")
    fs.add(
        Flag("zeta", "", "last by name"),
        Flag("alpha", "nsq.%s", "a string"),
        Flag("count", 0, "an int at zero", kind="int"),
        Flag("size", 508, "an int", kind="int"),
        Flag("on", True, "a bool defaulting on", kind="bool"),
        Flag("off", False, "a bool defaulting off", kind="bool"),
        Flag("every", 60.0, "a duration", kind="duration"),
        Flag("quick", 0.025, "a short duration", kind="duration"),
        Flag("never", 0.0, "a zero duration", kind="duration"),
        Flag("addr", [], "repeatable", kind="list"),
        Flag("rot", 0, "rotate past `bytes` bytes", kind="int"),
        Flag("delim", "\n", "a delimiter"),
        Flag("x", False, "one letter", kind="bool"),
        Flag("secret", "", "not shown", hidden=True),
    )
    return fs


def test_print_defaults_like_go():
    assert sample().usage() == "\n".join([
        "Usage of demo:",
        "  -addr value", "    \trepeatable",
        "  -alpha string", '    \ta string (default "nsq.%s")',
        "  -count int", "    \tan int at zero",
        "  -delim string", '    \ta delimiter (default "\\n")',
        "  -every duration", "    \ta duration (default 1m0s)",
        "  -never duration", "    \ta zero duration",
        "  -off", "    \ta bool defaulting off",
        "  -on", "    \ta bool defaulting on (default true)",
        "  -quick duration", "    \ta short duration (default 25ms)",
        "  -rot bytes", "    \trotate past bytes bytes",
        "  -size int", "    \tan int (default 508)",
        "  -x\tone letter",
        "  -zeta string", "    \tlast by name",
    ])


@pytest.mark.parametrize("seconds,text", [
    (60, "1m0s"), (2, "2s"), (0.25, "250ms"), (3600, "1h0m0s"), (600, "10m0s"), (900, "15m0s"),
    (0.025, "25ms"), (90, "1m30s"), (1.5, "1.5s"), (0, "0s"), (0.000001, "1µs"), (45, "45s"),
])
def test_format_duration_like_go(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text,seconds", [
    ("1m30s", 90), ("500ms", 0.5), ("1h", 3600), ("1.5h", 5400), (".5s", 0.5), ("0", 0),
    ("-2s", -2), ("+3s", 3), ("1h2m3s4ms", 3723.004), ("250us", 0.00025), ("10µs", 0.00001),
])
def test_parse_duration_go_syntax(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10", "", "1 s", "1d", "s", "1m30"])
def test_parse_duration_rejects_what_go_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("text,value", [("42", 42), ("-7", -7), ("+7", 7), ("0x1f", 31),
                                        ("017", 15), ("0o17", 15), ("0b101", 5), ("0", 0),
                                        ("1_000", 1000), ("0x_ff", 255)])
def test_go_int_syntax(text, value):
    assert parse_go_int(text) == value


@pytest.mark.parametrize("text", ["", "1.5", "abc", "1__0", "08", "0x", "--1", "1_"])
def test_go_int_rejects(text):
    with pytest.raises(ValueError):
        parse_go_int(text)


def test_go_quote():
    assert go_quote("nsq.%s") == '"nsq.%s"'
    assert go_quote('a"b\\c\td\n') == '"a\\"b\\\\c\\td\\n"'
    assert go_quote("\x01é") == '"\\x01é"'


@pytest.mark.parametrize("argv,first_line,code", [
    (["-h"], "Usage of demo:", 0),
    (["--help"], "Usage of demo:", 0),
    (["--nope"], "flag provided but not defined: -nope", 2),
    (["--size"], "flag needs an argument: -size", 2),
    (["--size=abc"], 'invalid value "abc" for flag -size: parse error', 2),
    (["--size=99999999999999999999"],
     'invalid value "99999999999999999999" for flag -size: value out of range', 2),
    (["--every=10"], 'invalid value "10" for flag -every: parse error', 2),
    (["--on=maybe"], 'invalid boolean value "maybe" for -on: parse error', 2),
])
def test_errors_worded_like_go_and_followed_by_usage(argv, first_line, code):
    with pytest.raises(FlagUsageError) as info:
        sample().parse(argv)
    text = str(info.value)
    assert text.splitlines()[0] == first_line
    assert text.endswith(sample().usage())
    assert info.value.exit_code == code


def test_durations_in_go_syntax_on_the_command_line_and_in_config(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('every = "1m30s"\nquick = 500\n')
    fs = sample()
    fs.add(Flag("config", "", "config file"))
    values, explicit, _ = fs.parse([f"--config={cfg}", "--never", "1h"])
    assert values["every"] == 90 and values["quick"] == 0.5 and values["never"] == 3600
    assert {"every", "quick", "never"} <= explicit
    values, _, _ = fs.parse(["--every=500ms", "-size", "0x10"])
    assert values["every"] == 0.5 and values["size"] == 16
    cfg.write_text('every = "90"\n')
    with pytest.raises(FlagError, match="every"):
        fs.parse([f"--config={cfg}"])
