"""nsqlookupd's flags with upstream's names, defaults and config keys (reference §3.1).

Durations are seconds (floats); config-file keys are the flag names with ``-`` → ``_``.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from ..common.flags import Flag, FlagError, FlagSet, server_flags


def build_flagset() -> FlagSet:
    fs = FlagSet("nsqlookupd")
    fs.add(*server_flags("nsqlookupd"))
    fs.add(
        Flag("tcp-address", "0.0.0.0:4160", "<addr>:<port> to listen on for TCP clients"),
        Flag("http-address", "0.0.0.0:4161", "<addr>:<port> to listen on for HTTP clients"),
        Flag("broadcast-address", socket.gethostname(),
             "address of this lookupd node, (default to the OS hostname)"),
        Flag("inactive-producer-timeout", 300.0,
             "duration of time a producer will remain in the active list since its last ping",
             kind="duration"),
        Flag("tombstone-lifetime", 45.0,
             "duration of time a producer will remain tombstoned if registration remains",
             kind="duration"),
        Flag("metrics", True, "serve Prometheus metrics at GET /metrics on the HTTP listener "
             "(nsqpy addition; --metrics=false to turn off)", kind="bool", extension=True),
    )
    return fs


@dataclass
class Options:
    config: str
    version: bool
    log_level: str
    log_prefix: str
    verbose: bool
    tcp_address: str
    http_address: str
    broadcast_address: str
    inactive_producer_timeout: float
    tombstone_lifetime: float
    #: bound on an IDENTIFY body (upstream has none); not a flag upstream, so not one here
    max_body_size: int = 5 * 1024 * 1024
    metrics: bool = True


def parse_options(argv: list[str]) -> Options:
    """Parse nsqlookupd's command line (and ``--config`` file); FlagError on any problem."""
    values, _explicit, positional = build_flagset().parse(argv)
    if positional:
        raise FlagError(f"unexpected arguments: {' '.join(positional)}")
    return Options(**values)
