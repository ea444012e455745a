"""Command-line flags the way NSQ's Go programs take them, plus ``--config`` TOML files.

Accepted forms: ``-flag value``, ``-flag=value``, ``--flag value``, ``--flag=value``; boolean flags
as ``-flag`` or ``-flag=false`` (never ``-flag false``, as in Go); list flags repeat and also split
on commas. Precedence: command line, then the config file (keyed by ``cfg`` name), then defaults.
Durations use Go syntax (``250ms``, ``1m30s``); in a config file an integer duration means ms.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable

_DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class FlagError(Exception):
    """Bad command line or config: the program prints it and exits with status 2."""


def parse_duration(text: str) -> float:
    """Go ``time.ParseDuration`` → seconds."""
    s = text.strip()
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Go's ``Duration.String`` for the values our defaults use (``1h0m0s``, ``250ms``, ``2s``)."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    neg = ns < 0
    ns = abs(ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                val = ns / size
                txt = f"{val:.9f}".rstrip("0").rstrip(".")
                return ("-" if neg else "") + txt + unit
    secs = ns / 1e9
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    s_txt = f"{s:.9f}".rstrip("0").rstrip(".")
    out = ""
    if h:
        out = f"{int(h)}h{int(m)}m{s_txt}s"
    elif m:
        out = f"{int(m)}m{s_txt}s"
    else:
        out = f"{s_txt}s"
    return ("-" if neg else "") + out


def _parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "t", "true"):
        return True
    if t in ("0", "f", "false"):
        return False
    raise ValueError(f"invalid boolean value {text!r}")


@dataclass
class Flag:
    """One flag: ``kind`` is str, int, float, bool, duration, list or custom (``parse`` given)."""

    name: str
    default: Any
    help: str = ""
    kind: str = "str"
    cfg: str | None = None  # key in the config file and /config/:opt; default name with - → _
    implemented: bool = True
    deprecated: bool = False
    hidden: bool = False  # accepted but left out of --help (flags from upstream's unreleased master)
    parse: Callable[[str], Any] | None = None

    @property
    def key(self) -> str:
        return self.cfg or self.name.replace("-", "_")

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    def convert(self, raw: str) -> Any:
        if self.parse is not None:
            return self.parse(raw)
        if self.kind == "str":
            return raw
        if self.kind == "int":
            return int(raw, 10)
        if self.kind == "float":
            return float(raw)
        if self.kind == "bool":
            return _parse_bool(raw)
        if self.kind == "duration":
            return parse_duration(raw)
        if self.kind == "list":
            return [p for p in raw.split(",") if p]
        raise AssertionError(self.kind)

    def from_config(self, value: Any) -> Any:
        if self.kind == "duration" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return value / 1000.0
        if self.kind == "list":
            if isinstance(value, str):
                return [p for p in value.split(",") if p]
            return [str(v) for v in value]
        if isinstance(value, str):
            return self.convert(value)
        if self.kind == "bool" and not isinstance(value, bool):
            raise ValueError(f"expected boolean, got {value!r}")
        if self.parse is not None:
            return self.parse(str(value).lower() if isinstance(value, bool) else str(value))
        return value


@dataclass
class FlagSet:
    """The flags of one program. :meth:`parse` returns a plain namespace of attribute values."""

    program: str
    flags: list[Flag] = field(default_factory=list)

    def add(self, *flags: Flag) -> None:
        self.flags.extend(flags)

    def by_name(self) -> dict[str, Flag]:
        return {f.name: f for f in self.flags}

    def usage(self) -> str:
        lines = [f"Usage of {self.program}:"]
        for f in self.flags:
            if f.hidden:
                continue
            lines.append(f"  -{f.name} {'' if f.kind == 'bool' else f.kind}".rstrip())
            lines.append(f"    \t{f.help} (default {f.default!r})")
        return "\n".join(lines)

    def parse(self, argv: list[str]) -> tuple[dict[str, Any], set[str], list[str]]:
        """Returns (values by attr, attrs set explicitly on the command line or config, args)."""
        known = self.by_name()
        cli: dict[str, Any] = {}
        positional: list[str] = []
        i = 0
        while i < len(argv):
            arg = argv[i]
            i += 1
            if arg == "--":
                positional.extend(argv[i:])
                break
            if not arg.startswith("-") or arg == "-":
                positional.append(arg)
                continue
            body = arg[2:] if arg.startswith("--") else arg[1:]
            name, eq, raw = body.partition("=")
            if name in ("h", "help"):
                raise FlagError(self.usage())
            flag = known.get(name)
            if flag is None:
                raise FlagError(f"flag provided but not defined: -{name}")
            if not eq:
                if flag.kind == "bool":
                    raw = "true"
                else:
                    if i >= len(argv):
                        raise FlagError(f"flag needs an argument: -{name}")
                    raw = argv[i]
                    i += 1
            try:
                value = flag.convert(raw)
            except ValueError as err:
                raise FlagError(f'invalid value "{raw}" for flag -{name}: {err}') from None
            if flag.kind == "list":
                cli.setdefault(flag.attr, []).extend(value)
            else:
                cli[flag.attr] = value
        values: dict[str, Any] = {}
        config_path = cli.get("config") or ""
        config = _load_config(config_path) if config_path else {}
        explicit = set(cli)
        for flag in self.flags:
            if flag.attr in cli:
                values[flag.attr] = cli[flag.attr]
            elif flag.key in config:
                try:
                    values[flag.attr] = flag.from_config(config[flag.key])
                except (ValueError, TypeError) as err:
                    raise FlagError(f"config {flag.key}: {err}") from None
                explicit.add(flag.attr)
            else:
                default = flag.default
                values[flag.attr] = list(default) if isinstance(default, list) else default
        return values, explicit, positional


def server_flags(program: str) -> list[Flag]:
    """The flags every NSQ daemon has: --config, --version, --log-level, --log-prefix, --verbose."""
    from .log import parse_level

    return [
        Flag("config", "", "path to config file"),
        Flag("version", False, "print version string", kind="bool"),
        Flag("log-level", "info", "set log verbosity: debug, info, warn, error, or fatal",
             parse=parse_level),
        Flag("log-prefix", f"[{program}] ", "log message prefix"),
        Flag("verbose", False, "[deprecated] has no effect, use --log-level", kind="bool",
             deprecated=True),
    ]


def _load_config(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as err:
        raise FlagError(f"failed to load config file {path} - {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise FlagError(f"failed to load config file {path} - {err}") from None


def reject_unimplemented(flagset: FlagSet, explicit: set[str], values: dict[str, Any]) -> None:
    """Flags accepted for compatibility but not built yet must not be silently ignored."""
    for flag in flagset.flags:
        if not flag.implemented and flag.attr in explicit and values[flag.attr] != flag.default:
            raise FlagError(
                f"flag -{flag.name} is not implemented yet in {flagset.program} (nsqpy); "
                "remove it to start"
            )


def fail(message: str, program: str) -> None:
    """Print a start-up error the way NSQ does and exit with status 1."""
    print(f"[{program}] FATAL: {message}", file=sys.stderr)
    raise SystemExit(1)
