"""History plugged into nsqd: at start-up with ``--retention``/``--retention-bytes``, or the
first time a topic's setting asks for it (``/topic/config``, or one restored from nsqd.dat).
Without either nothing of this package beyond this module and the flags is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...common.goweb import ApiError, first_value
from ...httpserver import DRAIN
from ...protocol.names import is_ephemeral
from ..auth.needs import SUBSCRIBE, on_channel_unless
from ..http import Route
from .options import history_on

if TYPE_CHECKING:
    from ..http import NsqdHTTP
    from ..nsqd import NSQD


def install_history(nsqd: "NSQD") -> None:
    """Called by the server before the metadata is loaded."""
    if history_on(nsqd.options.values):
        _install(nsqd)
    else:
        nsqd.http_routes.append(refuse_from)


def retain(topic: Any, retention_ns: int, retention_bytes: int) -> None:
    """A topic's effective retention (``lifecycle/config.apply_topic``): open, reconfigure or
    remove its log. Both 0 and no log: nothing happens and nothing is imported."""
    nsqd = topic.nsqd
    if nsqd.history is None:
        if not (retention_ns or retention_bytes):
            return
        _install(nsqd)
    nsqd.history.retain(topic, retention_ns, retention_bytes)


def refuse_from(api: "NsqdHTTP") -> list[Route]:
    """``/channel/create`` while no topic keeps history: with ``from=`` it is refused as the
    history's own route refuses a topic without retention (``RETENTION_OFF``), rather than
    making a channel that silently starts now; without ``from=`` it is upstream's route.
    Upstream has no ``from`` parameter, so no client of upstream relies on it being ignored."""

    def channel_create(request: Any) -> Any:
        if first_value(api.query(request, reads_body=True), "from") is None:
            return api.channel_create(request)
        topic, channel = api.topic_and_channel(request)  # upstream's argument errors first
        if topic.ephemeral or is_ephemeral(channel):
            raise ApiError(400, "EPHEMERAL")
        raise ApiError(400, "RETENTION_OFF")

    # the same secret as the route it stands in for: upstream's (strict) without from=
    return [Route("POST", "/channel/create", channel_create, DRAIN,
                  auth=on_channel_unless("from", SUBSCRIBE))]


def _install(nsqd: "NSQD") -> None:
    from .http import history_routes
    from .room import History

    nsqd.history = History(nsqd)
    if refuse_from in nsqd.http_routes:
        nsqd.http_routes.remove(refuse_from)
    nsqd.http_routes.append(history_routes)
    for app in nsqd.http_apps:  # listeners already open: their routers get the routes now
        app.add_routes(history_routes)
