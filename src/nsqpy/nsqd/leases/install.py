"""Leases plugged into an nsqd started with ``--leases``; without it nothing of this package
beyond this module and the flags is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..nsqd import NSQD


def install_leases(nsqd: "NSQD") -> None:
    """Before the listeners open: the registry, its routes and its once-a-second sweep."""
    if not nsqd.options.leases:
        return
    from .http import lease_routes
    from .registry import Leases

    leases = Leases(nsqd)
    nsqd.leases = leases
    nsqd.http_routes.append(lease_routes)
    nsqd.keep_task(nsqd.loop.create_task(leases.sweep_loop()))
