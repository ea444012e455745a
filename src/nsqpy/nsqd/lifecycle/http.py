"""HTTP routes of the lifecycle controls (issue #13), registered next to upstream's in http.py.

* ``GET|POST /topic/config?topic=T``, ``GET|POST /channel/config?topic=T&channel=C``: the
  effective settings; POST takes a JSON object of settings to change (``null`` clears one, so it
  inherits again) and answers with the new effective settings.
* ``GET /topic/peek``, ``GET /channel/peek``: see :mod:`peek`.
* ``POST /drain``: see :mod:`drain`.

Errors follow upstream's API: ``{"message": "..."}`` with MISSING_ARG_*/INVALID_* (400),
TOPIC_NOT_FOUND/CHANNEL_NOT_FOUND (404).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from . import config as ec
from ...protocol.gojson import GoJSONError, loads
from ...common.goweb import ApiError, first_value
from ...common.http_api import v1_json
from ...httpserver import Request
from .drain import start_drain
from ..auth.needs import ADMIN, NODE, SUBSCRIBE, on_channel, on_topic
from ..http import EMPTY, Route
from .peek import MAX_PEEK, STATES, peek_channel, peek_topic

if TYPE_CHECKING:
    from ..http import NsqdHTTP

MAX_CONFIG_BODY = 1 << 16


def _read_update(request: Request, keys: tuple[str, ...]) -> dict:
    body = request.body
    if body is None:  # the body broke off
        raise ApiError(500, "INTERNAL_ERROR")
    if len(body) > MAX_CONFIG_BODY:
        raise ApiError(413, "BODY_TOO_BIG")
    try:
        doc = loads(body)
    except GoJSONError:
        raise ApiError(400, "INVALID_BODY") from None
    try:
        return ec.parse_update(doc, keys)
    except ec.ConfigError as err:
        raise ApiError(400, err.message) from None


def _peek_args(query: dict[str, list[str]]) -> tuple[int, str | None]:
    raw_n = first_value(query, "n")
    n = 10
    if raw_n is not None:
        if not raw_n.isdigit() or not 1 <= int(raw_n) <= MAX_PEEK:
            raise ApiError(400, "INVALID_ARG_N")
        n = int(raw_n)
    state = first_value(query, "state")
    if state is not None and state not in STATES:
        raise ApiError(400, "INVALID_ARG_STATE")
    return n, state


def lifecycle_routes(api: "NsqdHTTP") -> list[Route]:
    """The routes, as closures over the API object (its argument helpers and persistence)."""

    def configure(request: Request, owner: Any, apply: Callable[[Any], None],
                  effective: Callable[[Any], Any], keys: tuple[str, ...] = ec.KEYS) -> Any:
        if request.method == "POST":
            update = _read_update(request, keys)
            owner.config = ec.merged(owner.config, update)
            apply(owner)
            # answered once persisted, so a crash cannot undo an acknowledged change
            return api.after_persist(v1_json(ec.render(effective(owner))))
        return v1_json(ec.render(effective(owner)))

    def topic_config(request: Request) -> Any:
        topic = api.existing_topic(api.topic_arg(api.query(request)))
        return configure(request, topic, ec.apply_topic, ec.shown_topic, ec.TOPIC_KEYS)

    def channel_config(request: Request) -> Any:
        topic, name = api.topic_and_channel(request)
        channel = api.existing_channel(topic, name)
        return configure(request, channel, ec.apply_channel, ec.effective_channel)

    def topic_peek(request: Request) -> Any:
        query = api.query(request)
        topic = api.existing_topic(api.topic_arg(query))
        n, state = _peek_args(query)
        return v1_json(peek_topic(topic, n, state))

    def channel_peek(request: Request) -> Any:
        topic, name = api.topic_and_channel(request)
        channel = api.existing_channel(topic, name)
        n, state = _peek_args(api.query(request))
        return v1_json(peek_channel(channel, n, state))

    def drain(request: Request) -> Any:
        if api.nsqd.exiting:
            raise ApiError(503, "EXITING")
        start_drain(api.nsqd)
        return EMPTY

    body = MAX_CONFIG_BODY + 1  # a settings update is read whole, at most this much
    # with an auth server (docs/security.md): peeks return bodies, a settings change can drop
    # or move messages (TTL, attempts, dead letters), a drain stops the node; reading the
    # settings is asked only with --http-auth-required, as upstream's reads
    return [
        Route("GET", "/topic/config", topic_config, auth=on_topic(SUBSCRIBE, strict=True)),
        Route("POST", "/topic/config", topic_config, body, auth=on_topic(ADMIN)),
        Route("GET", "/channel/config", channel_config,
              auth=on_channel(SUBSCRIBE, strict=True)),
        Route("POST", "/channel/config", channel_config, body, auth=on_channel(ADMIN)),
        Route("GET", "/topic/peek", topic_peek, auth=on_topic(SUBSCRIBE)),
        Route("GET", "/channel/peek", channel_peek, auth=on_channel(SUBSCRIBE)),
        Route("POST", "/drain", drain, auth=NODE),
    ]
