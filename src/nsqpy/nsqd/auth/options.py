"""The flag of AUTH over HTTP (nsqpy, opt-in; docs/security.md, "AUTH over HTTP")."""

from __future__ import annotations

from typing import Any

from ...common.flags import Flag, FlagError, extensions


def auth_flags() -> list[Flag]:
    return extensions(
        Flag("http-auth-required", False, "with --auth-http-address, also ask a secret (Authorization: Bearer) on upstream's HTTP routes: /pub, /mpub, /stats, /topic/*, /channel/*, /config... (/ping stays open; nsqpy's routes that read or move messages always ask)", kind="bool"),
    )


def validate_auth(values: dict[str, Any]) -> None:
    if values["http_auth_required"] and not any(values["auth_http_address"]):
        raise FlagError("--http-auth-required needs --auth-http-address")
