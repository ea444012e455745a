"""Command-line flags the way NSQ's Go programs take them, plus ``--config`` TOML files.

Accepted forms: ``-flag value``, ``-flag=value``, ``--flag value``, ``--flag=value``; boolean flags
as ``-flag`` or ``-flag=false`` (never ``-flag false``, as in Go); list flags repeat and also split
on commas. Precedence: command line, then the config file (keyed by ``cfg`` name), then defaults.
Durations use Go syntax (``250ms``, ``1m30s``); in a config file an integer duration means ms.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from .durations import format_duration, parse_duration

_BACKQUOTED = re.compile(r"`([^`]*)`")


class FlagError(Exception):
    """Bad command line or config: the program prints it and exits with ``exit_code``."""

    exit_code = 2


class FlagUsageError(FlagError):
    """What Go's flag package answers with the usage: ``-h`` (exit 0), or an unknown flag, a
    missing argument or an unparsable value (the message, then the usage; exit 2)."""

    def __init__(self, message: str, usage: str, help_requested: bool = False) -> None:
        super().__init__(f"{message}\n{usage}" if message else usage)
        self.exit_code = 0 if help_requested else 2


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string (``strconv.Quote``), as ``PrintDefaults`` shows string defaults."""
    escapes = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f",
               "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    out = []
    for ch in text:
        if ch in escapes:
            out.append(escapes[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def parse_go_int(text: str) -> int:
    """Go's ``strconv.ParseInt(s, 0, 64)`` as int flags use it: ``0x1f``, ``0o17``, ``017``
    (octal), ``0b101``, a sign, ``_`` between digits as in Go literals."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or body[:1] == "_" or body[:1] in "+-":
        raise ValueError(text)
    if len(body) > 1 and body[0] == "0" and body[1] in "01234567_":
        body = "0o" + body[1:]  # Go's legacy octal; Python spells it 0o
    value = int(body, 0)
    if text[:1] == "-":
        value = -value
    if not -(1 << 63) <= value < (1 << 63):
        raise OverflowError(text)
    return value


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
    #: an nsqpy addition beyond upstream v1.3.0: listed in --help, never needed, kept out of
    #: ``/config/:opt`` (upstream answers 400 there); the upstream flags around it stay byte-identical
    extension: bool = False
    parse: Callable[[str], Any] | None = None
    #: for ``--help``: the Go type name (``value`` for custom flags, ``""`` for bool-like ones)
    go_type: str | None = None
    #: for ``--help``: the default as the Go ``Value.String()`` shows it, when not derivable
    go_default: str | None = None

    @property
    def key(self) -> str:
        return self.cfg or self.name.replace("-", "_")

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    def type_name(self) -> str:
        """What ``flag.UnquoteUsage`` prints after the flag name: a back-quoted word of the
        usage text if there is one, else the Go type."""
        quoted = _BACKQUOTED.search(self.help)
        if quoted:
            return quoted.group(1)
        if self.go_type is not None:
            return self.go_type
        if self.parse is not None:
            return "value"
        return {"str": "string", "int": "int", "float": "float", "bool": "",
                "duration": "duration", "list": "value"}[self.kind]

    def default_text(self) -> str | None:
        """`` (default X)`` as ``PrintDefaults`` writes it, or None for a zero default."""
        if self.go_default is not None:
            return self.go_default or None
        d = self.default
        if self.kind == "bool":
            return "true" if d else None
        if self.kind == "duration":
            return format_duration(d) if d else None
        if self.kind == "list":
            return ",".join(d) or None
        if self.kind == "float":
            return f"{d:g}" if d else None
        if self.kind == "int":
            return str(d) if d else None
        if not d:
            return None
        return go_quote(d) if self.type_name() == "string" else str(d)

    def usage(self) -> str:
        """This flag's two lines of Go's ``PrintDefaults``."""
        head = f"  -{self.name}"
        if self.type_name():
            head += " " + self.type_name()
        # Go puts a one-letter bool flag's usage on the same line
        head += "\t" if len(head) <= 4 else "\n    \t"
        text = head + _BACKQUOTED.sub(r"\1", self.help, count=1).replace("\n", "\n    \t")
        default = self.default_text()
        if default is not None:
            text += f" (default {default})"
        return text

    def convert(self, raw: str) -> Any:
        if self.parse is not None:
            return self.parse(raw)
        if self.kind == "str":
            return raw
        if self.kind == "int":
            return parse_go_int(raw)
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


def extensions(*flags: Flag) -> list[Flag]:
    """Mark ``flags`` as nsqpy additions (see :attr:`Flag.extension`)."""
    for flag in flags:
        flag.extension = True
    return list(flags)


@dataclass
class FlagSet:
    """The flags of one program. :meth:`parse` returns a plain namespace of attribute values."""

    program: str
    flags: list[Flag] = field(default_factory=list)
    #: the name in ``Usage of <name>:``; the utilities use ``os.Args[0]`` as Go's do
    usage_name: str | None = None

    def add(self, *flags: Flag) -> None:
        self.flags.extend(flags)

    def by_name(self) -> dict[str, Flag]:
        return {f.name: f for f in self.flags}

    def usage(self) -> str:
        """Go's ``Usage of <name>:`` and ``PrintDefaults``: flags sorted by name (no trailing
        newline; the caller's print adds Go's last one)."""
        lines = [f"Usage of {self.usage_name or self.program}:"]
        lines += [f.usage() for f in sorted(self.flags, key=lambda f: f.name) if not f.hidden]
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
            flag = known.get(name)
            if flag is None:
                if name in ("h", "help"):
                    raise FlagUsageError("", self.usage(), help_requested=True)
                raise FlagUsageError(f"flag provided but not defined: -{name}", self.usage())
            if not eq:
                if flag.kind == "bool" or flag.go_type == "":
                    raw = "true"
                else:
                    if i >= len(argv):
                        raise FlagUsageError(f"flag needs an argument: -{name}", self.usage())
                    raw = argv[i]
                    i += 1
            try:
                value = flag.convert(raw)
            except (ValueError, OverflowError) as err:
                raise FlagUsageError(_invalid_value(flag, raw, err), self.usage()) from None
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


def _invalid_value(flag: Flag, raw: str, err: Exception) -> str:
    """Go's wording: built-in kinds say ``parse error`` / ``value out of range``."""
    if flag.parse is not None:
        reason = str(err)
    elif isinstance(err, OverflowError):
        reason = "value out of range"
    else:
        reason = "parse error"
    if flag.kind == "bool" or flag.go_type == "":
        return f"invalid boolean value {go_quote(raw)} for -{flag.name}: {reason}"
    return f"invalid value {go_quote(raw)} for flag -{flag.name}: {reason}"


def server_flags(program: str) -> list[Flag]:
    """The flags every NSQ daemon has: --config, --version, --log-level, --log-prefix, --verbose."""
    from .log import parse_level

    return [
        Flag("config", "", "path to config file"),
        Flag("version", False, "print version string", kind="bool"),
        Flag("log-level", "info", "set log verbosity: debug, info, warn, error, or fatal",
             parse=parse_level, go_default="INFO"),
        Flag("log-prefix", f"[{program}] ", "log message prefix"),
        Flag("verbose", False, "[deprecated] has no effect, use --log-level", kind="bool",
             deprecated=True),
    ]


def _load_config(path: str) -> dict[str, Any]:
    import tomllib  # only with --config

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
