"""Replication's flags (nsqpy, opt-in; docs/replication.md). Unset, nsqd is upstream's."""

from __future__ import annotations

from ...common.flags import Flag, extensions


def _replication_ack(raw: str) -> str:
    if raw not in ("sync", "async"):
        raise ValueError(f"--replication-ack must be sync or async, not {raw!r}")
    return raw


def replication_flags() -> list[Flag]:
    F = Flag
    return extensions(
        F("replicate-to", "", "<addr>:<port> of a peer nsqd's TCP listener that stores a replica of every message (nsqpy)"),
        F("replication-ack", "sync", "sync: a publish is answered after the peer stored it; async: at once (nsqpy)",
          parse=_replication_ack),
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
