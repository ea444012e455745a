"""nsqadmin's flags with upstream's names, defaults and config keys (reference §4.1), and the
checks upstream's ``nsqadmin.New`` makes of them at start-up, in its order."""

from __future__ import annotations

import ipaddress
import posixpath
import ssl
from dataclasses import dataclass, field
from typing import Any

from ..common.addr import split_host_port
from ..common.flags import Flag, FlagError, FlagSet, server_flags
from ..common.log import NSQ_LEVEL_NUMBERS
from .v1client import client_tls_context


def build_flagset() -> FlagSet:
    fs = FlagSet("nsqadmin")
    fs.add(*server_flags("nsqadmin"))
    fs.add(
        Flag("http-address", "0.0.0.0:4171", "<addr>:<port> to listen on for HTTP clients"),
        Flag("base-path", "/", "URL base path"),
        Flag("dev-static-dir", "", "(development use only)"),
        Flag("graphite-url", "", "graphite HTTP address"),
        Flag("proxy-graphite", False, "proxy HTTP requests to graphite", kind="bool"),
        Flag("statsd-counter-format", "stats.counters.%s.count",
             "The counter stats key formatting applied by the implementation of statsd. "
             "If no formatting is desired, set this to an empty string."),
        Flag("statsd-gauge-format", "stats.gauges.%s",
             "The gauge stats key formatting applied by the implementation of statsd. "
             "If no formatting is desired, set this to an empty string."),
        Flag("statsd-prefix", "nsq.%s",
             "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)"),
        Flag("statsd-interval", 60.0,
             "time interval nsqd is configured to push to statsd (must match nsqd)",
             kind="duration"),
        Flag("notification-http-endpoint", "",
             "HTTP endpoint (fully qualified) to which POST notifications of admin actions "
             "will be sent"),
        Flag("http-client-connect-timeout", 2.0, "timeout for HTTP connect", kind="duration"),
        Flag("http-client-request-timeout", 5.0, "timeout for HTTP request", kind="duration"),
        Flag("http-client-tls-insecure-skip-verify", False,
             "configure the HTTP client to skip verification of TLS certificates", kind="bool"),
        Flag("http-client-tls-root-ca-file", "", "path to CA file for the HTTP client"),
        Flag("http-client-tls-cert", "", "path to certificate file for the HTTP client"),
        Flag("http-client-tls-key", "", "path to key file for the HTTP client"),
        Flag("allow-config-from-cidr", "127.0.0.1/8",
             "A CIDR from which to allow HTTP requests to the /config endpoint"),
        Flag("acl-http-header", "X-Forwarded-User",
             "HTTP header to check for authenticated admin users"),
        Flag("live-interval", 0.0,
             "sample every nsqd's /stats this often and show live rates and graphs without "
             "graphite (nsqpy; 0 = off, as upstream)", kind="duration", extension=True),
        Flag("live-history", 3600.0, "how much live history to keep in memory (nsqpy)",
             kind="duration", extension=True),
        Flag("nsqd-auth-secret", "", "secret sent to nsqd and nsqlookupd as 'Authorization: "
             "Bearer' (nsqpy; for nsqd with --auth-http-address and --http-auth-required)",
             extension=True),
        Flag("lookupd-http-address", [], "lookupd HTTP address (may be given multiple times)",
             kind="list", cfg="nsqlookupd_http_addresses"),
        Flag("nsqd-http-address", [], "nsqd HTTP address (may be given multiple times)",
             kind="list", cfg="nsqd_http_addresses"),
        Flag("admin-user", [],
             "admin user (may be given multiple times; if specified, only these users will be "
             "able to perform privileged actions; acl-http-header is used to determine the "
             "authenticated user)", kind="list", cfg="admin_users"),
        Flag("metrics", True, "serve Prometheus metrics at GET /metrics (nsqpy addition; "
             "--metrics=false to turn off)", kind="bool", extension=True),
    )
    return fs


@dataclass
class Options:
    config: str
    version: bool
    log_level: str
    log_prefix: str
    verbose: bool
    http_address: str
    base_path: str
    dev_static_dir: str
    graphite_url: str
    proxy_graphite: bool
    statsd_counter_format: str
    statsd_gauge_format: str
    statsd_prefix: str
    statsd_interval: float
    notification_http_endpoint: str
    http_client_connect_timeout: float
    http_client_request_timeout: float
    http_client_tls_insecure_skip_verify: bool
    http_client_tls_root_ca_file: str
    http_client_tls_cert: str
    http_client_tls_key: str
    allow_config_from_cidr: str
    acl_http_header: str
    live_interval: float
    live_history: float
    lookupd_http_address: list[str] = field(default_factory=list)
    nsqd_http_address: list[str] = field(default_factory=list)
    admin_user: list[str] = field(default_factory=list)
    metrics: bool = True
    nsqd_auth_secret: str = ""  # nsqpy: sent to nsqd as Authorization: Bearer


def normalize_base_path(p: str) -> str:
    """Upstream's ``normalizeBasePath``: leading ``/`` added, then Go's ``path.Clean``."""
    if not p:
        return "/"
    if not p.startswith("/"):
        p = "/" + p
    cleaned = posixpath.normpath(p)
    # posixpath keeps a leading "//" (POSIX allows it); Go's path.Clean does not
    return "/" + cleaned.lstrip("/")


def parse_options(argv: list[str]) -> Options:
    """Parse the command line (and ``--config``); FlagError (exit 2) on a bad flag."""
    fs = build_flagset()
    values, _, positional = fs.parse(argv)
    if positional:
        raise FlagError(f"unexpected arguments: {' '.join(positional)}")
    return Options(**values)


def validate(opts: Options) -> ssl.SSLContext:
    """Upstream's ``nsqadmin.New`` checks; ValueError with upstream's message (fatal, exit 1).

    Returns the TLS context of the HTTP client (``--http-client-tls-*``)."""
    if not opts.nsqd_http_address and not opts.lookupd_http_address:
        raise ValueError("--nsqd-http-address or --lookupd-http-address required")
    if opts.nsqd_http_address and opts.lookupd_http_address:
        raise ValueError("use --nsqd-http-address or --lookupd-http-address not both")
    tls = client_tls_context(opts.http_client_tls_insecure_skip_verify,
                             opts.http_client_tls_root_ca_file, opts.http_client_tls_cert,
                             opts.http_client_tls_key)
    for flag, addrs in (("--lookupd-http-address", opts.lookupd_http_address),
                        ("--nsqd-http-address", opts.nsqd_http_address)):
        for addr in addrs:
            try:
                split_host_port(addr)
            except ValueError as err:
                raise ValueError(f"failed to resolve {flag} ({addr}) - {err}") from None
    if opts.allow_config_from_cidr:
        try:
            ipaddress.ip_network(opts.allow_config_from_cidr, strict=False)
        except ValueError as err:
            raise ValueError(f"failed to parse --allow-config-from-cidr "
                             f"({opts.allow_config_from_cidr}) - {err}") from None
    if opts.live_interval < 0 or (opts.live_interval and opts.live_history < opts.live_interval):
        raise ValueError("--live-interval must be >= 0 and not above --live-history")
    opts.base_path = normalize_base_path(opts.base_path)
    return tls


def config_flags() -> dict[str, Flag]:
    """Flags visible through ``/config/:opt``, keyed by cfg name (upstream's Options fields)."""
    hidden = {"config", "version", "verbose"}
    return {f.key: f for f in build_flagset().flags if f.name not in hidden and not f.extension}


def config_value(opts: Options, flag: Flag) -> Any:
    """A field as Go's JSON encodes it: durations in ns, the log level as its number."""
    value = getattr(opts, flag.attr)
    if flag.kind == "duration":
        return int(round(value * 1e9))
    if flag.name == "log-level":
        return NSQ_LEVEL_NUMBERS.get(value, 0)
    return value
