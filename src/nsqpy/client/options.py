"""Per-connection settings: what we ask nsqd for in IDENTIFY, plus local timeouts.

Durations are seconds (floats) here and converted to the milliseconds IDENTIFY wants; ``None``
means "disabled" where nsqd has a ``-1`` for it, matching go-nsq's and pynsq's defaults otherwise.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from nsqpy import __version__

USER_AGENT = f"nsqpy/{__version__}"


def _hostname() -> str:
    return socket.gethostname()


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def _ms(seconds: float | None, disabled: int = -1) -> int:
    return disabled if seconds is None else int(round(seconds * 1000))


@dataclass(kw_only=True)
class ConnectionOptions:
    client_id: str = field(default_factory=_short_hostname)
    hostname: str = field(default_factory=_hostname)
    user_agent: str = USER_AGENT
    #: nsqd sends ``_heartbeat_`` this often and drops us after two silent periods; None = off
    #: (nsqd refuses SUB without heartbeats)
    heartbeat_interval: float | None = 30.0
    #: nsqd buffers message frames up to this many bytes or ``output_buffer_timeout``;
    #: None sends every frame at once (lower latency, more syscalls); 0 = nsqd's default
    output_buffer_size: int | None = 16384
    output_buffer_timeout: float | None = 0.25
    #: deliver only this percentage (1-99) of the channel's messages to us; 0 = all
    sample_rate: int = 0
    #: nsqd re-queues a message not answered within this; None = nsqd's --msg-timeout
    msg_timeout: float | None = None
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6
    #: TLS hook: when set, ``tls_v1`` is requested and the socket is upgraded after IDENTIFY
    tls: ssl.SSLContext | None = None
    tls_server_hostname: str | None = None
    auth_secret: str | None = None
    #: dial + IDENTIFY (+ upgrades, AUTH) must finish within this
    connect_timeout: float = 5.0
    #: close the connection after this long without a byte from nsqd; None = 2 × heartbeat
    read_timeout: float | None = None
    #: refuse frames larger than this (protects memory against a confused peer); 0 = no limit
    max_frame_size: int = 0
    #: answers to messages whose handler asks for the default delay (REQ -1 in go-nsq)
    default_requeue_delay: float = 90.0
    max_requeue_delay: float = 900.0
    #: extra IDENTIFY fields for a server extension, e.g. nsqpy's consumption leases
    #: (``{"lease": "run/1/0"}``, docs/leases.md); upstream nsqd ignores fields it does not know
    identify_extra: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.snappy and self.deflate:
            raise ValueError("snappy and deflate cannot both be enabled (nsqd refuses it)")
        if not 0 <= self.sample_rate <= 99:
            raise ValueError("sample_rate must be within 0..99")
        if not 1 <= self.deflate_level <= 9:
            raise ValueError("deflate_level must be within 1..9")

    def identify_body(self) -> dict[str, Any]:
        """The IDENTIFY JSON (feature negotiation on, so nsqd answers with its settings)."""
        body: dict[str, Any] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "user_agent": self.user_agent,
            "feature_negotiation": True,
            "heartbeat_interval": _ms(self.heartbeat_interval),
            "output_buffer_size": -1 if self.output_buffer_size is None else self.output_buffer_size,
            "output_buffer_timeout": _ms(self.output_buffer_timeout),
            "sample_rate": self.sample_rate,
            "msg_timeout": _ms(self.msg_timeout, disabled=0),
            "tls_v1": self.tls is not None,
            "snappy": self.snappy,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
        }
        if self.identify_extra:
            body.update(self.identify_extra)
        return body

    def effective_read_timeout(self) -> float | None:
        if self.read_timeout is not None:
            return self.read_timeout
        if self.heartbeat_interval is None:
            return None
        return 2.0 * self.heartbeat_interval + 5.0

    def requeue_delay(self, attempts: int) -> float:
        """The automatic REQ delay: linear in attempts, capped."""
        return min(self.default_requeue_delay * attempts, self.max_requeue_delay)
