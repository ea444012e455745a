"""Replication's flags (nsqpy, opt-in; docs/replication.md). Unset, nsqd is upstream's."""

from __future__ import annotations

from typing import Any

from ...common.flags import Flag, FlagError, extensions

DEGRADED_SETTINGS = ("fail", "accept")


def _replication_ack(raw: str) -> str:
    if raw not in ("sync", "async"):
        raise ValueError(f"--replication-ack must be sync or async, not {raw!r}")
    return raw


def _replication_degraded(raw: str) -> str:
    if raw not in DEGRADED_SETTINGS:
        raise ValueError(f"--replication-degraded must be fail or accept, not {raw!r}")
    return raw


def replication_flags() -> list[Flag]:
    F = Flag
    return extensions(
        F("replicate-to", "", "<addr>:<port> of a peer nsqd's TCP listener that stores a replica of every message (nsqpy)"),
        F("replication-ack", "sync", "sync: a publish is answered after the peer stored it; async: at once (nsqpy)",
          parse=_replication_ack),
        F("replication-degraded", "", "sync mode, when the peer cannot store a copy: 'fail' answers the publish "
          "E_PUB_FAILED / HTTP 503 after --replication-sync-timeout (the default with sync), 'accept' answers OK "
          "with one copy (nsqpy)", parse=_replication_degraded),
        F("replication-sync-timeout", 5.0, "sync mode: the longest a publish waits for the peer's copy before "
          "--replication-degraded decides (nsqpy)", kind="duration"),
        F("replication-failover-timeout", 15.0, "how long an origin must be unreachable before its replica is adopted (nsqpy)",
          kind="duration"),
        F("accept-replicas", False, "accept replication links from other nsqd (implied by --replicate-to) (nsqpy)",
          kind="bool"),
        F("replication-tls", False, "upgrade the replication link to TLS: the peer is verified with --tls-root-ca-file "
          "(or the system's CAs) and --tls-cert/--tls-key are presented as the client certificate (nsqpy)",
          kind="bool"),
        F("replication-auth-secret", "", "secret the replication link sends with AUTH when the peer requires it; the "
          "peer's auth server must grant it publish and subscribe on topic/channel nsqpy-replication (nsqpy)"),
    )


def validate_replication(values: dict[str, Any], explicit: set[str]) -> None:
    """The strictness flags mean something only on an origin in sync mode (issue #25); unset,
    ``--replication-degraded`` is ``fail`` with ``sync`` and ``accept`` with ``async``."""
    for name in ("replication_degraded", "replication_sync_timeout"):
        if name in explicit and not values["replicate_to"]:
            raise FlagError(f"--{name.replace('_', '-')} needs --replicate-to")
    sync = values["replication_ack"] == "sync"
    if not values["replication_degraded"]:
        values["replication_degraded"] = "fail" if sync else "accept"
    elif values["replication_degraded"] == "fail" and not sync:
        raise FlagError("--replication-degraded=fail needs --replication-ack=sync")
    if values["replication_sync_timeout"] <= 0:
        raise FlagError("--replication-sync-timeout must be > 0")
