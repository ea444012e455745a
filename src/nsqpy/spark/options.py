"""Option parsing shared by the source and the sink.

Spark hands a data source its ``.option(k, v)`` pairs as a case-insensitive dict of strings.
We also ignore ``_``/``-``/``.`` in keys, so ``nsqd_tcp_addresses``, ``nsqdTcpAddresses`` and
``nsqd-tcp-addresses`` are the same option (the issue and NSQ's tools use snake/kebab case,
Spark's own sources camelCase).

Nothing here opens a socket: the :class:`ConnectionOptions` (with its ``ssl.SSLContext``) is
built where the connection is made, in the process that uses it, never pickled.
"""

from __future__ import annotations

import ssl
from typing import Any, Mapping

from nsqpy.client import USER_AGENT, ConnectionOptions
from nsqpy.common.gotls import client_context
from nsqpy.client.addr import normalize

SPARK_USER_AGENT = f"{USER_AGENT} (spark)"


def _norm(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "").replace(".", "")


#: keys Spark itself adds to a data source's options (save(path), writeStream's checkpoint...)
_SPARK_KEYS = {"path", "paths", "checkpointlocation", "queryname", "outputmode"}


class Options:
    """Read typed values from Spark's option map; unknown keys are reported, not ignored."""

    def __init__(self, raw: Mapping[str, str] | None, known: set[str]) -> None:
        self._values: dict[str, str] = {}
        unknown = []
        known_norm = {_norm(k) for k in known}
        for key, value in dict(raw or {}).items():
            nk = _norm(key)
            if nk in _SPARK_KEYS:  # Spark's own, passed along to every data source
                continue
            if nk not in known_norm:
                unknown.append(key)
            self._values[nk] = value
        if unknown:
            raise ValueError(f"unknown nsq option(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")

    def get(self, key: str, default: str | None = None) -> str | None:
        value = self._values.get(_norm(key))
        if value is None or value == "":
            return default
        return value

    def require(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            raise ValueError(f"nsq option {key!r} is required")
        return value

    def get_int(self, key: str, default: int, minimum: int | None = None) -> int:
        text = self.get(key)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"nsq option {key!r} must be an integer, not {text!r}") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"nsq option {key!r} must be >= {minimum}, not {value}")
        return value

    def get_bool(self, key: str, default: bool = False) -> bool:
        text = self.get(key)
        if text is None:
            return default
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"nsq option {key!r} must be true/false, not {text!r}")

    def addresses(self, key: str, default_port: int) -> list[str]:
        text = self.get(key)
        if not text:
            return []
        return [normalize(a, default_port) for a in text.split(",") if a.strip()]

    def http_addresses(self, key: str) -> list[str]:
        """lookupd/nsqd HTTP addresses: ``host:port`` or a full URL (kept as given)."""
        text = self.get(key)
        if not text:
            return []
        out = []
        for item in text.split(","):
            item = item.strip()
            if item:
                out.append(item if "://" in item else normalize(item, 4161))
        return out


#: connection settings understood by both the source and the sink
CONNECTION_KEYS = {
    "compression", "deflateLevel", "tls", "tlsCaFile", "tlsCertFile", "tlsKeyFile",
    "tlsInsecureSkipVerify", "tlsServerHostname", "authSecret", "connectTimeoutMs",
    "heartbeatIntervalMs", "clientId", "userAgent",
}


def connection_settings(opts: Options) -> dict[str, Any]:
    """The picklable part of the connection settings (plain values, no SSLContext)."""
    compression = (opts.get("compression") or "none").strip().lower()
    if compression not in ("none", "snappy", "deflate"):
        raise ValueError(f"nsq option 'compression' must be none, snappy or deflate, not {compression!r}")
    settings: dict[str, Any] = {
        "snappy": compression == "snappy",
        "deflate": compression == "deflate",
        "deflate_level": opts.get_int("deflateLevel", 6, 1),
        "tls": opts.get_bool("tls") or bool(opts.get("tlsCaFile") or opts.get("tlsCertFile")),
        "tls_ca_file": opts.get("tlsCaFile"),
        "tls_cert_file": opts.get("tlsCertFile"),
        "tls_key_file": opts.get("tlsKeyFile"),
        "tls_insecure": opts.get_bool("tlsInsecureSkipVerify"),
        "tls_server_hostname": opts.get("tlsServerHostname"),
        "auth_secret": opts.get("authSecret"),
        "connect_timeout": opts.get_int("connectTimeoutMs", 5000, 1) / 1000.0,
        "heartbeat_interval": opts.get_int("heartbeatIntervalMs", 30000, 1000) / 1000.0,
        "client_id": opts.get("clientId"),
        "user_agent": opts.get("userAgent") or SPARK_USER_AGENT,
    }
    if settings["deflate_level"] > 9:
        raise ValueError("nsq option 'deflateLevel' must be within 1..9")
    return settings


def tls_context(settings: dict[str, Any]) -> ssl.SSLContext | None:
    if not settings.get("tls"):
        return None
    ctx = client_context(settings.get("tls_ca_file"))  # verified as upstream's Go clients verify
    if settings.get("tls_cert_file"):
        ctx.load_cert_chain(settings["tls_cert_file"], settings.get("tls_key_file"))
    if settings.get("tls_insecure"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def connection_options(settings: dict[str, Any], **extra: Any) -> ConnectionOptions:
    """Build the client's :class:`ConnectionOptions` in the process that will connect."""
    kwargs: dict[str, Any] = {
        "user_agent": settings["user_agent"],
        "heartbeat_interval": settings["heartbeat_interval"],
        "snappy": settings["snappy"],
        "deflate": settings["deflate"],
        "deflate_level": settings["deflate_level"],
        "tls": tls_context(settings),
        "tls_server_hostname": settings.get("tls_server_hostname"),
        "auth_secret": settings.get("auth_secret"),
        "connect_timeout": settings["connect_timeout"],
    }
    if settings.get("client_id"):
        kwargs["client_id"] = settings["client_id"]
    kwargs.update(extra)
    return ConnectionOptions(**kwargs)
