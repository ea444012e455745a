"""go-nsq ``Config`` options on the command line (``--consumer-opt=name,value``, ``--producer-opt``).

Upstream's utilities pass these to go-nsq's ``ConfigFlag``, so existing command lines must keep
working and a bad one must fail the same way: while the flags are parsed (``invalid value
"max_attempts,x" for flag -consumer-opt: failed to coerce option max_attempts (x) -
strconv.ParseUint: parsing "x": invalid syntax``, the usage, exit 2), with go-nsq's value
syntax, ranges and texts. :func:`parse_go_nsq_options` maps the values onto
:class:`nsqpy.client.ConnectionOptions` and the :class:`nsqpy.client.Consumer` keywords;
:meth:`GoNsqConfig.validate` is go-nsq's ``Config.Validate`` (run when a consumer or producer is
made, so its error is a start-up failure, not a flag error).
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..client import ConnectionOptions
from ..common.flags import Flag, FlagError, format_duration, go_quote
from ..common.gotls import client_context
from ..common.goerrno import path_error

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                   "m": 60.0, "h": 3600.0}
_NUMBER = re.compile(r"(\d*)(\.(\d*))?")


def go_parse_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` → seconds, with Go's error texts."""
    orig = text
    s = text
    neg = False
    if s[:1] in ("-", "+"):
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"time: invalid duration {go_quote(orig)}")
    total = 0.0
    while s:
        m = _NUMBER.match(s)
        assert m is not None
        if not m.group(1) and not m.group(3):
            raise ValueError(f"time: invalid duration {go_quote(orig)}")
        number = float((m.group(1) or "0") + "." + (m.group(3) or "0"))
        s = s[m.end():]
        i = 0
        while i < len(s) and s[i] != "." and not s[i].isdigit():
            i += 1
        unit, s = s[:i], s[i:]
        if not unit:
            raise ValueError(f"time: missing unit in duration {go_quote(orig)}")
        if unit not in _DURATION_UNITS:
            raise ValueError(f"time: unknown unit {go_quote(unit)} in duration {go_quote(orig)}")
        total += number * _DURATION_UNITS[unit]
    return -total if neg else total


def _strconv(func: str, text: str, why: str = "invalid syntax") -> ValueError:
    return ValueError(f"strconv.{func}: parsing {go_quote(text)}: {why}")


def go_parse_int(text: str, bits: int = 64, unsigned: bool = False) -> int:
    """``strconv.ParseInt(s, 10, bits)`` / ``ParseUint`` (no sign for the latter)."""
    func = "ParseUint" if unsigned else "ParseInt"
    digits = text[1:] if not unsigned and text[:1] in ("+", "-") else text
    if not digits or not (digits.isascii() and digits.isdigit()):
        raise _strconv(func, text)
    value = int(text)
    low, high = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if not low <= value <= high:
        raise _strconv(func, text, "value out of range")
    return value


def go_parse_float(text: str) -> float:
    """``strconv.ParseFloat(s, 64)`` for the decimal forms."""
    if "_" in text or not text.strip() or text != text.strip():
        raise _strconv("ParseFloat", text)
    try:
        return float(text)
    except ValueError:
        raise _strconv("ParseFloat", text) from None


def go_parse_bool(text: str) -> bool:
    """``strconv.ParseBool``."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise _strconv("ParseBool", text)


@dataclass(frozen=True)
class _GoOpt:
    kind: str  # duration float int uint bool str strategy addr tls-version tls-ca
    target: str  # "conn.<field>", "consumer.<kwarg>", "tls.<key>", "" (accepted, no effect)
    low: float | None = None
    high: float | None = None


_D = "duration"
_GO_OPTIONS: dict[str, _GoOpt] = {
    "dial_timeout": _GoOpt(_D, "conn.connect_timeout"),
    "read_timeout": _GoOpt(_D, "conn.read_timeout", 0.1, 300),
    "write_timeout": _GoOpt(_D, "", 0.1, 300),
    "local_addr": _GoOpt("addr", ""),
    "lookupd_poll_interval": _GoOpt(_D, "consumer.lookupd_poll_interval", 0.01, 300),
    "lookupd_poll_jitter": _GoOpt("float", "consumer.lookupd_poll_jitter", 0, 1),
    "lookupd_poll_timeout": _GoOpt(_D, "consumer.lookupd_poll_timeout"),
    "max_requeue_delay": _GoOpt(_D, "conn.max_requeue_delay", 0, 3600),
    "default_requeue_delay": _GoOpt(_D, "conn.default_requeue_delay", 0, 3600),
    "backoff_strategy": _GoOpt("strategy", "consumer.backoff_strategy"),
    "max_backoff_duration": _GoOpt(_D, "consumer.max_backoff_duration", 0, 3600),
    "backoff_multiplier": _GoOpt(_D, "consumer.backoff_multiplier", 0, 3600),
    "max_attempts": _GoOpt("uint", "consumer.max_attempts", 0, 65535),
    "low_rdy_idle_timeout": _GoOpt(_D, "consumer.low_rdy_idle_timeout", 1, 300),
    "low_rdy_timeout": _GoOpt(_D, "consumer.low_rdy_timeout", 1, 300),
    "rdy_redistribute_interval": _GoOpt(_D, "consumer.rdy_redistribute_interval", 0.001, 5),
    "client_id": _GoOpt("str", "conn.client_id"),
    "hostname": _GoOpt("str", "conn.hostname"),
    "user_agent": _GoOpt("str", "conn.user_agent"),
    "heartbeat_interval": _GoOpt(_D, "conn.heartbeat_interval"),
    "sample_rate": _GoOpt("int", "conn.sample_rate", 0, 99),
    "tls_v1": _GoOpt("bool", "tls.enabled"),
    "tls_root_ca_file": _GoOpt("tls-ca", "tls.cafile"),
    "tls_insecure_skip_verify": _GoOpt("bool", "tls.insecure"),
    "tls_cert": _GoOpt("str", "tls.cert"),
    "tls_key": _GoOpt("str", "tls.key"),
    "tls_min_version": _GoOpt("tls-version", "tls.min_version"),
    "deflate": _GoOpt("bool", "conn.deflate"),
    "deflate_level": _GoOpt("int", "conn.deflate_level", 1, 9),
    "snappy": _GoOpt("bool", "conn.snappy"),
    "output_buffer_size": _GoOpt("int", "conn.output_buffer_size"),
    "output_buffer_timeout": _GoOpt(_D, "conn.output_buffer_timeout"),
    "max_in_flight": _GoOpt("int", "consumer.max_in_flight", 0, None),
    "msg_timeout": _GoOpt(_D, "conn.msg_timeout", 0, None),
    "max_msg_size": _GoOpt("int", "conn.max_frame_size", 0, 2**31 - 1),
    "auth_secret": _GoOpt("str", "conn.auth_secret"),
    "skip_lookupd_authorization": _GoOpt("bool", ""),
    # upstream's unreleased master (topology-aware consumption); go-nsq 1.1.0 refuses them
    "topology_region": _GoOpt("str", ""),
    "topology_zone": _GoOpt("str", ""),
}

_TLS_VERSIONS = {
    "ssl3.0": ssl.TLSVersion.SSLv3, "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1, "tls1.2": ssl.TLSVersion.TLSv1_2,
}

#: go-nsq's defaults where the tools need them (the client's own defaults differ)
GO_HEARTBEAT_INTERVAL = 30.0
GO_READ_TIMEOUT = 60.0
GO_LOOKUPD_POLL_INTERVAL = 60.0


def _go_value_text(kind: str, value: float) -> str:
    """``%v`` of the option's Go type: a Duration prints as ``100ms``, numbers plainly."""
    if kind == _D:
        return format_duration(value)
    return str(int(value)) if float(value).is_integer() else repr(value)


def _coerce(name: str, opt: _GoOpt, raw: str | bool) -> Any:
    shown = "true" if raw is True else raw
    try:
        if opt.kind == "bool":
            return raw if isinstance(raw, bool) else go_parse_bool(raw)
        if opt.kind == "str":
            return "%!s(bool=true)" if raw is True else raw
        if opt.kind in ("tls-version", "tls-ca") and isinstance(raw, bool):
            raise LookupError("ERROR: true is not a string")
        if isinstance(raw, bool):  # a bare option is "true": only booleans and strings take it
            raise ValueError("invalid value type")
        if opt.kind == _D:
            value: Any = go_parse_duration(raw)
        elif opt.kind == "float":
            value = go_parse_float(raw)
        elif opt.kind == "int":
            value = go_parse_int(raw)
        elif opt.kind == "uint":
            value = go_parse_int(raw, unsigned=True)
        elif opt.kind == "strategy":
            if raw not in ("", "exponential", "full_jitter"):
                raise ValueError("invalid value type")
            value = raw or "exponential"
        elif opt.kind == "tls-version":
            if raw not in _TLS_VERSIONS:
                raise LookupError(f"ERROR: {raw} is not a tls version")
            value = raw
        elif opt.kind == "tls-ca":
            try:
                with open(raw, "rb"):
                    pass
            except OSError as err:
                raise LookupError("ERROR: failed to read custom Certificate Authority file "
                                  + path_error("open", raw, err)) from None
            try:
                client_context(raw)
            except (ssl.SSLError, ValueError):
                raise LookupError("ERROR: failed to append certificates from Certificate "
                                  "Authority file") from None
            value = raw
        else:
            value = raw
    except LookupError as err:  # go-nsq's TLS handler words its own errors
        raise ValueError(str(err.args[0])) from None
    except ValueError as err:
        raise ValueError(f"failed to coerce option {name} ({shown}) - {err}") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if opt.low is not None and value < opt.low:
            raise ValueError(f"invalid {name} ! {_go_value_text(opt.kind, value)} < "
                             f"{_go_value_text(opt.kind, opt.low)}")
        if opt.high is not None and value > opt.high:
            raise ValueError(f"invalid {name} ! {_go_value_text(opt.kind, value)} > "
                             f"{_go_value_text(opt.kind, opt.high)}")
    return value


def parse_one(text: str) -> tuple[str, _GoOpt, Any]:
    """``name,value`` (or a bare ``name`` = true) → (name, option, value); ValueError worded as
    go-nsq's ``Config.Set``. ``-`` in names reads as ``_``."""
    name, comma, raw_value = text.partition(",")
    raw: str | bool = raw_value if comma else True
    key = name.replace("-", "_")
    opt = _GO_OPTIONS.get(key)
    if opt is None:
        if key == "tls_config":
            raise ValueError("tls_config cannot be set from the command line")
        raise ValueError(f"invalid option {key}")
    return key, opt, _coerce(key, opt, raw)


def _key_pair_error(cert: str, key: str) -> str | None:
    """go-nsq loads ``tls_cert`` and ``tls_key`` as soon as it has both (Go's
    ``tls.LoadX509KeyPair``): its error text, or None."""
    pem: dict[str, bytes] = {}
    for path in (cert, key):
        try:
            with open(path, "rb") as fh:
                pem[path] = fh.read()
        except OSError as err:
            return path_error("open", path, err)
    if b"-----BEGIN" not in pem[cert]:
        return "tls: failed to find any PEM data in certificate input"
    if b"-----BEGIN" not in pem[key]:
        return "tls: failed to find any PEM data in key input"
    try:
        client_context(system_roots=False).load_cert_chain(cert, key)
    except ssl.SSLError as err:
        if "KEY_VALUES_MISMATCH" in str(err):
            return "tls: private key does not match public key"
        return f"tls: {err.reason or err}"
    return None


def go_nsq_flag(name: str, help: str) -> Flag:
    """``--consumer-opt``/``--producer-opt``: repeatable, each value checked as it is parsed
    (a bad one is a flag error: message, usage, exit 2, as go-nsq's ``ConfigFlag``)."""
    key_pair: dict[str, str] = {}

    def check(text: str) -> list[str]:
        key, _opt, value = parse_one(text)
        if key in ("tls_cert", "tls_key") and value:
            first = not ("tls_cert" in key_pair and "tls_key" in key_pair)
            key_pair[key] = value
            if first and len(key_pair) == 2:
                problem = _key_pair_error(key_pair["tls_cert"], key_pair["tls_key"])
                if problem is not None:
                    raise ValueError(problem)
        return [text]

    return Flag(name, [], help, kind="list", parse=check)


@dataclass
class GoNsqConfig:
    """go-nsq options resolved for nsqpy: connection settings, consumer keywords, TLS."""

    conn: dict[str, Any] = field(default_factory=dict)
    consumer: dict[str, Any] = field(default_factory=dict)
    tls: dict[str, Any] = field(default_factory=dict)
    #: options accepted for compatibility that change nothing here
    no_effect: list[str] = field(default_factory=list)

    def validate(self, max_in_flight: int | None = None) -> str | None:
        """go-nsq's ``Config.Validate`` (what the tools' own flags can still get wrong): the
        error text, or None."""
        if max_in_flight is not None and max_in_flight < 0:
            return f"invalid MaxInFlight ! {max_in_flight} < 0"
        heartbeat = self.conn.get("heartbeat_interval", GO_HEARTBEAT_INTERVAL)
        read_timeout = self.conn.get("read_timeout", GO_READ_TIMEOUT)
        if heartbeat is not None and read_timeout is not None and heartbeat > read_timeout:
            return (f"HeartbeatInterval {format_duration(heartbeat)} must be less than "
                    f"ReadTimeout {format_duration(read_timeout)}")
        return None

    @property
    def lookupd_poll_interval(self) -> float:
        return float(self.consumer.get("lookupd_poll_interval", GO_LOOKUPD_POLL_INTERVAL))

    def connection_options(self, default_user_agent: str) -> ConnectionOptions:
        kwargs = dict(self.conn)
        kwargs.setdefault("user_agent", default_user_agent)
        context = self.ssl_context()
        if context is not None:
            kwargs["tls"] = context
        return ConnectionOptions(**kwargs)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls.get("enabled"):
            return None
        context = client_context(self.tls.get("cafile") or None)
        if self.tls.get("insecure"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.tls.get("cert") and self.tls.get("key"):
            context.load_cert_chain(self.tls["cert"], self.tls["key"])
        version = self.tls.get("min_version")
        if version:
            context.minimum_version = _TLS_VERSIONS[version]
        return context


def parse_go_nsq_options(values: Iterable[str], flag_name: str, *,
                         ignore_errors: bool = False) -> GoNsqConfig:
    """``["max_attempts,10", "snappy"]`` → a :class:`GoNsqConfig` (go-nsq's ``ConfigFlag``).

    A bad value is a FlagError worded as Go's flag package reports it, or, with
    ``ignore_errors``, left out (upstream's nsq_to_file applies its ``--consumer-opt`` values
    that way, ignoring the errors).
    """
    cfg = GoNsqConfig()
    for text in values:
        try:
            key, opt, value = parse_one(text)
        except ValueError as err:
            if ignore_errors:
                continue
            raise FlagError(f"invalid value {go_quote(text)} for flag -{flag_name}: {err}") from None
        where, _, attr = opt.target.partition(".")
        if not where:
            cfg.no_effect.append(key)
            continue
        if where == "tls":
            cfg.tls[attr] = value
            continue
        if attr in ("heartbeat_interval", "output_buffer_timeout") and value < 0:
            value = None  # go-nsq: -1 disables
        elif attr == "output_buffer_size" and value < 0:
            value = None
        elif attr == "msg_timeout" and value == 0:
            value = None  # 0 = nsqd's --msg-timeout
        elif attr == "max_frame_size" and value:
            value += 30  # frame size field = 4 (type) + 26 (message header) + body
        (cfg.conn if where == "conn" else cfg.consumer)[attr] = value
    return cfg
