"""nsqd's options: upstream's flags with their names, defaults, config keys and validation
(reference §1.1), and the ``Options`` every part of nsqd reads. The features' own flags live with
them (``lifecycle/options.py``, ``replication/options.py``, ``stats/prometheus.py``); ``main.py``
puts the whole command line together."""

from __future__ import annotations

import socket
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..common.flags import Flag, FlagError, FlagSet, go_quote, server_flags


def default_node_id(hostname: str | None = None) -> int:
    """Upstream's default: ``crc32_ieee(md5(hostname)) % 1024``."""
    try:  # CPython's own MD5: hashlib's would keep OpenSSL's libcrypto loaded for this alone
        from _md5 import md5
    except ImportError:
        from hashlib import md5

    digest = md5((hostname or socket.gethostname()).encode()).digest()
    return zlib.crc32(digest) % 1024


def _tls_required(raw: str) -> str:
    t = raw.strip().lower()
    if t in ("true", "1", "t"):
        return "true"
    if t in ("false", "0", "f", ""):
        return "false"
    if t == "tcp-https":
        return "tcp-https"
    raise ValueError(f"strconv.ParseBool: parsing {go_quote(raw)}: invalid syntax")  # Go's words


_TLS_VERSIONS = {"tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303, "tls1.3": 0x0304}


def _tls_min_version(raw: str) -> str:
    t = raw.strip().lower()
    if t not in _TLS_VERSIONS:
        raise ValueError(f"unknown tlsVersionOption {go_quote(raw)}")
    return t


def upstream_flagset() -> FlagSet:
    """Upstream v1.3.0's flags; the features add theirs in ``main.build_flagset``."""
    host = socket.gethostname()
    fs = FlagSet("nsqd")
    fs.add(*server_flags("nsqd"))
    F = Flag
    fs.add(
        F("node-id", default_node_id(host), "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)",
          kind="int", cfg="id"),
        F("worker-id", False, "[deprecated] use --node-id", kind="bool", deprecated=True),
        F("https-address", "0.0.0.0:4152", "<addr>:<port> to listen on for HTTPS clients"),
        F("http-address", "0.0.0.0:4151", "address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket)"),
        F("tcp-address", "0.0.0.0:4150", "address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)"),
        F("auth-http-address", [], "<addr>:<port> or a full url to query auth server (may be given multiple times)",
          kind="list", cfg="auth_http_addresses"),
        F("auth-http-request-method", "get", "HTTP method to use for auth server requests",
          hidden=True),  # upstream master (PR #1487), not v1.3.0: v1.3.0 always GETs
        F("broadcast-address", host, "address that will be registered with lookupd (defaults to the OS hostname)"),
        F("broadcast-tcp-port", 0, "TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening on)", kind="int"),
        F("broadcast-http-port", 0, "HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening on)", kind="int"),
        F("lookupd-tcp-address", [], "lookupd TCP address (may be given multiple times)", kind="list",
          cfg="nsqlookupd_tcp_addresses"),
        F("http-client-connect-timeout", 2.0, "timeout for HTTP connect", kind="duration"),
        F("http-client-request-timeout", 5.0, "timeout for HTTP request", kind="duration"),
        # upstream's unreleased master (PR #1301), not v1.3.0: hidden from --help, and their
        # fields appear in /info, /stats and lookupd only when one of them is set
        F("topology-region", "", "A region represents a larger domain, made up of one or more zones for preferring closer consumer",
          hidden=True),
        F("topology-zone", "", "A zone represents a logical failure domain for preferring closer consumer",
          hidden=True),
        F("data-path", "", "path to store disk-backed messages"),
        F("mem-queue-size", 10000, "number of messages to keep in memory (per topic/channel)", kind="int"),
        F("max-bytes-per-file", 104857600, "number of bytes per diskqueue file before rolling", kind="int"),
        F("sync-every", 2500, "number of messages per diskqueue fsync", kind="int"),
        F("sync-timeout", 2.0, "duration of time per diskqueue fsync", kind="duration"),
        F("queue-scan-worker-pool-max", 4, "max concurrency for checking in-flight and deferred message timeouts", kind="int"),
        F("queue-scan-selection-count", 20, "number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts", kind="int"),
        F("msg-timeout", 60.0, "default duration to wait before auto-requeing a message", kind="duration"),
        F("max-msg-timeout", 900.0, "maximum duration before a message will timeout", kind="duration"),
        F("max-msg-size", 1048576, "maximum size of a single message in bytes", kind="int"),
        F("max-req-timeout", 3600.0, "maximum requeuing timeout for a message", kind="duration"),
        F("max-body-size", 5242880, "maximum size of a single command body", kind="int"),
        F("max-heartbeat-interval", 60.0, "maximum client configurable duration of time between client heartbeats", kind="duration"),
        F("max-rdy-count", 2500, "maximum RDY count for a client", kind="int"),
        F("max-output-buffer-size", 65536, "maximum client configurable size (in bytes) for a client output buffer", kind="int"),
        F("max-output-buffer-timeout", 30.0, "maximum client configurable duration of time between flushing to a client", kind="duration"),
        F("min-output-buffer-timeout", 0.025, "minimum client configurable duration of time between flushing to a client", kind="duration"),
        F("output-buffer-timeout", 0.25, "default duration of time between flushing data to clients", kind="duration"),
        F("max-channel-consumers", 0, "maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)", kind="int"),
        F("statsd-address", "", "UDP <addr>:<port> of a statsd daemon for pushing stats"),
        F("statsd-interval", 60.0, "duration between pushing to statsd", kind="duration"),
        F("statsd-mem-stats", True, "toggle sending memory and GC stats to statsd", kind="bool"),
        F("statsd-prefix", "nsq.%s", "prefix used for keys sent to statsd (%s for host replacement)"),
        F("statsd-udp-packet-size", 508, "the size in bytes of statsd UDP packets", kind="int"),
        F("statsd-exclude-ephemeral", False, "Skip ephemeral topics and channels when sending stats to statsd", kind="bool"),
        F("e2e-processing-latency-percentile", [], "message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated '1.0,0.99,0.95', default none)",
          kind="list", cfg="e2e_processing_latency_percentiles"),
        F("e2e-processing-latency-window-time", 600.0, "calculate end to end latency quantiles for this duration of time (ie: 60s would only show quantile calculations from the past 60 seconds)", kind="duration"),
        F("tls-cert", "", "path to certificate file"),
        F("tls-key", "", "path to key file"),
        F("tls-client-auth-policy", "", "client certificate auth policy ('require' or 'require-verify')"),
        F("tls-root-ca-file", "", "path to certificate authority file"),
        F("tls-required", "false", "require TLS for client connections (true, false, tcp-https)", parse=_tls_required,
          go_type="", go_default=""),  # a bool-like Value in Go: bare -tls-required means true,
        F("tls-min-version", "tls1.0", "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')",
          parse=_tls_min_version),
        F("deflate", True, "enable deflate feature negotiation (client compression)", kind="bool"),
        F("max-deflate-level", 6, "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)", kind="int"),
        F("snappy", True, "enable snappy feature negotiation (client compression)", kind="bool"),
        F("enable-experiment", [], "enable experimental feature (may be given multiple times) (valid options: \"topology-aware-consumption\")",
          kind="list", implemented=False, hidden=True),
    )
    return fs


@dataclass
class Options:
    """Resolved nsqd options; attribute names are the flag names with ``-`` → ``_``."""

    values: dict[str, Any]
    explicit: set[str] = field(default_factory=set)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None


def check_options(values: dict[str, Any], explicit: set[str]) -> None:
    """Upstream's validation of its own flags (FlagError describes a problem); also settles the
    values upstream derives from others."""
    pct = []
    for raw in values["e2e_processing_latency_percentile"]:
        try:
            pct.append(float(raw))
        except ValueError:
            raise _log_fatal(f"Could not parse: {raw}") from None  # upstream's flag.Value
    values["e2e_processing_latency_percentile"] = sorted(set(pct), reverse=True)
    # the range checks of --node-id, --max-deflate-level and the percentiles are upstream's
    # start-up errors (nsqd.New: FATAL, exit 1): see start_up_errors
    if values["mem_queue_size"] < 0:
        raise FlagError("--mem-queue-size must be >= 0")
    if values["auth_http_request_method"] not in ("get", "post"):
        raise FlagError("--auth-http-request-method must be post or get")
    if values["tls_client_auth_policy"] and values["tls_required"] == "false":
        values["tls_required"] = "true"  # upstream: any client-auth policy forces TLS


def _log_fatal(message: str) -> FlagError:
    """Go's ``log.Fatalf`` while the flags are parsed: a stamped line, exit 1."""
    import time

    err = FlagError(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {message}")
    err.exit_code = 1
    return err


def start_up_errors(values: dict[str, Any]) -> str | None:
    """The checks upstream's ``nsqd.New`` makes first: the data path, then option ranges (the
    first failing one's text, for ``failed to instantiate nsqd - ...``; TLS comes next)."""
    import errno
    import os

    from ..common.goerrno import path_error

    data_path = values["data_path"] or os.getcwd()
    if not os.path.exists(data_path):
        return "failed to lock data-path: " + path_error("open", data_path,
                                                         FileNotFoundError(errno.ENOENT, ""))
    if not os.path.isdir(data_path):
        return f"--data-path={data_path} is not a directory"
    if not 1 <= values["max_deflate_level"] <= 9:
        return "--max-deflate-level must be [1,9]"
    if not 0 <= values["node_id"] < 1024:
        return "--node-id must be [0,1024)"
    return None


def percentile_error(values: dict[str, Any]) -> str | None:
    """upstream's last check before it listens (after TLS)."""
    for p in values["e2e_processing_latency_percentile"]:
        if not 0 < p <= 1:
            return f"invalid E2E processing latency percentile: {go_float(p)}"
    return None


def go_float(value: float) -> str:
    """Go's ``%v`` of a float64 (``strconv.FormatFloat(v, 'g', -1, 64)`` with %v's exponent
    rule): ``2``, ``0.5``, ``1e+08``, ``1.5e-05``."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    from decimal import Decimal

    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    point = len(digit_tuple) + int(exponent)  # where the decimal point goes
    exp = point - 1
    eprec = 6
    if eprec > len(digits) and len(digits) >= point:
        eprec = len(digits)
    neg = "-" if value < 0 else ""
    if exp < -4 or exp >= eprec:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{neg}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{neg}{digits}{'0' * (point - len(digits))}"
    return f"{neg}{digits[:point]}.{digits[point:]}"


def normalize_argv(argv: list[str]) -> list[str]:
    """``--tls-required`` is a bool-style flag in Go: given alone it means "true"."""
    return [a + "=true" if a in ("-tls-required", "--tls-required") else a for a in argv]


def topology_set(opts: "Options") -> bool:
    """True when the operator set a topology label: only then do the post-1.3.0 fields appear."""
    return bool(opts.values.get("topology_zone") or opts.values.get("topology_region"))


def config_key_map() -> dict[str, Flag]:
    """``/config/:opt`` keys (cfg names) → flags: upstream's only (nsqpy's own flags are not
    options there, as upstream answers ``INVALID_OPTION`` for any name it lacks)."""
    return {f.key: f for f in upstream_flagset().flags if f.name not in ("config", "version")}
