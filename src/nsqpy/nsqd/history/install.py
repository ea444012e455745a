"""History plugged into nsqd: at start-up with ``--retention``/``--retention-bytes``, or the
first time a topic's setting asks for it (``/topic/config``, or one restored from nsqd.dat).
Without either nothing of this package beyond this module and the flags is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .options import history_on

if TYPE_CHECKING:
    from ..nsqd import NSQD


def install_history(nsqd: "NSQD") -> None:
    """Called by the server before the metadata is loaded."""
    if history_on(nsqd.options.values):
        _install(nsqd)


def retain(topic: Any, retention_ns: int, retention_bytes: int) -> None:
    """A topic's effective retention (``lifecycle/config.apply_topic``): open, reconfigure or
    remove its log. Both 0 and no log: nothing happens and nothing is imported."""
    nsqd = topic.nsqd
    if nsqd.history is None:
        if not (retention_ns or retention_bytes):
            return
        _install(nsqd)
    nsqd.history.retain(topic, retention_ns, retention_bytes)


def _install(nsqd: "NSQD") -> None:
    from .http import history_routes
    from .room import History

    nsqd.history = History(nsqd)
    nsqd.http_routes.append(history_routes)
    for app in nsqd.http_apps:  # listeners already open: their routers get the routes now
        app.add_routes(history_routes)
