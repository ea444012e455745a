"""The leases' flags (nsqpy, opt-in; docs/leases.md §2). Unset, nsqd is upstream's."""

from __future__ import annotations

from typing import Any

from ...common.flags import Flag, FlagError, extensions


def lease_flags() -> list[Flag]:
    F = Flag
    return extensions(
        F("leases", False, "accept consumption leases named in IDENTIFY, and serve /lease/* (nsqpy)", kind="bool"),
        F("max-lease-rdy-count", 1000000, "maximum RDY count of a connection under a lease (nsqpy)", kind="int"),
    )


def validate_leases(values: dict[str, Any]) -> None:
    if values["max_lease_rdy_count"] < 1:
        raise FlagError("--max-lease-rdy-count must be >= 1")
