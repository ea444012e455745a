"""The history's flags (nsqpy, opt-in; docs/history.md). Both 0: no topic keeps history."""

from __future__ import annotations

from typing import Any

from ...common.flags import Flag, FlagError, extensions


def history_flags() -> list[Flag]:
    F = Flag
    return extensions(
        F("retention", 0.0, "keep every published message of each topic this long in <topic>.history/ (0 = off; per topic: /topic/config)", kind="duration"),
        F("retention-bytes", 0, "keep at most this many bytes of each topic's history (0 = unbounded, or off when --retention is 0)", kind="int"),
    )


def validate_history(values: dict[str, Any]) -> None:
    if values["retention"] < 0:
        raise FlagError("--retention must be >= 0")
    if values["retention_bytes"] < 0:
        raise FlagError("--retention-bytes must be >= 0")


def history_on(values: dict[str, Any]) -> bool:
    return bool(values.get("retention") or values.get("retention_bytes"))
