"""Flags of the opt-in message lifecycle controls (issue #13), kept apart from upstream's flags.

Every default is upstream v1.3.0's behaviour: no attempt limit, no TTL, unbounded disk queues,
no requeue on disconnect, DPUB limited by ``--max-req-timeout``, deferred messages flushed at
shutdown without their delay (and no file beside the disk queues). None of these flags appears in
``/config/:opt`` (upstream has no such option, so the API keeps answering ``INVALID_OPTION``).
"""

from __future__ import annotations

from typing import Any

from ...common.flags import Flag, FlagError, extensions

DISK_FULL_POLICIES = ("reject", "drop-oldest")
MAX_ATTEMPTS_LIMIT = 65535  # the wire's attempts field is a uint16


def _policy(raw: str) -> str:
    value = raw.strip().lower()
    if value not in DISK_FULL_POLICIES:
        raise ValueError(f"invalid disk-full-policy {raw!r} (reject or drop-oldest)")
    return value


def lifecycle_flags() -> list[Flag]:
    F = Flag
    return extensions(
        F("max-attempts", 0, "dead-letter a message delivered this many times when it comes back (REQ, timeout); 0 = unlimited", kind="int"),
        F("dead-letter-topic", "%s.dead", "topic dead-lettered messages go to (%s = the topic's name)"),
        F("msg-ttl", 0.0, "drop messages older than this at delivery (0 = keep forever)", kind="duration"),
        F("max-disk-bytes", 0, "bound on the bytes of each topic's and channel's disk queue (0 = unbounded)", kind="int"),
        F("disk-full-policy", "reject", "when a disk queue is full: 'reject' publishes or 'drop-oldest' messages", parse=_policy),
        F("drain-timeout", 0.0, "after POST /drain or SIGUSR2, shut down anyway after this long (0 = wait until empty)", kind="duration"),
        F("requeue-on-disconnect", False, "requeue a consumer's in-flight messages as soon as its connection closes", kind="bool"),
        F("max-defer-timeout", 3600.0, "maximum DPUB / pub?defer delay (default: --max-req-timeout)", kind="duration"),
        F("keep-deferred-delays", False, "keep deferred messages' remaining delay across a clean restart (a <queue>.diskqueue.deferred.json file beside each disk queue)", kind="bool"),
    )


def validate_lifecycle(values: dict[str, Any], explicit: set[str]) -> None:
    """Range checks, and the DPUB limit's fallback to --max-req-timeout (upstream PR #1504)."""
    if not 0 <= values["max_attempts"] <= MAX_ATTEMPTS_LIMIT:
        raise FlagError(f"--max-attempts must be [0,{MAX_ATTEMPTS_LIMIT}]")
    if values["msg_ttl"] < 0:
        raise FlagError("--msg-ttl must be >= 0")
    if values["max_disk_bytes"] < 0:
        raise FlagError("--max-disk-bytes must be >= 0")
    if values["drain_timeout"] < 0:
        raise FlagError("--drain-timeout must be >= 0")
    template = values["dead_letter_topic"]
    if not template or template.count("%s") > 1:
        raise FlagError("--dead-letter-topic must be a topic name, optionally with one %s")
    if "max_defer_timeout" not in explicit:
        values["max_defer_timeout"] = values["max_req_timeout"]
    elif values["max_defer_timeout"] < 0:
        raise FlagError("--max-defer-timeout must be >= 0")
