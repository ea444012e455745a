"""The HTTP API's side of AUTH (docs/security.md, "AUTH over HTTP").

A request carries its secret as ``Authorization: Bearer <secret>``; nsqd asks the same auth
servers, through the same :class:`~.client.AuthClient`, with the same values as a V2 ``AUTH``
(the peer's IP, ``tls`` as the listener is, the client certificate's common name), and matches
the grants the same way. :meth:`HttpAuth.guard` wraps a route's handler with the route's
:class:`~.needs.Need`, so the check runs before the handler: a refused request gets its answer
and nothing else happens.

An HTTP request has no connection state to keep the answer in, as a V2 client does, so the
answers are kept here for their ``ttl``, keyed by everything the auth server was told; a reader
sending many requests (Spark's executors, a tool's range read) asks once per ``ttl``, and
concurrent requests with one key share one query.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ...common.goweb import ApiError
from ...common.http_api import v1_error
from .client import AuthClient, AuthState
from .needs import ADMIN, ANY, PUBLISH, PUBLISH_OR_SUBSCRIBE, SUBSCRIBE, Need

#: no secret: RFC 6750's challenge names the scheme to use
AUTH_REQUIRED = v1_error(401, "AUTH_REQUIRED", (("WWW-Authenticate", 'Bearer realm="nsqd"'),))
#: the auth servers refused the secret or gave no valid answer (V2's E_AUTH_FAILED)
AUTH_FAILED = v1_error(403, "AUTH_FAILED")
#: the answer does not grant what the route needs (V2's E_UNAUTHORIZED)
UNAUTHORIZED = v1_error(403, "UNAUTHORIZED")

_CACHE_SIZE = 1024  # answers kept; past it the expired ones go, then all (endless secrets)

Key = tuple[bytes, str, bool, str]


def bearer(request: Any) -> bytes | None:
    """The secret of ``Authorization: Bearer <secret>`` (the scheme is case-insensitive), as
    the bytes that were sent; None without one."""
    value = request.header("authorization")
    if value is None:
        return None
    scheme, _, secret = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    secret = secret.strip()
    return secret.encode("latin-1") if secret else None


def remote_ip(remote_addr: str) -> str:
    """The IP of Go's ``RemoteAddr`` (``1.2.3.4:5``, ``[::1]:5``); ``""`` for a unix socket,
    as V2 tells the auth server."""
    host, sep, _ = remote_addr.rpartition(":")
    return host.strip("[]") if sep else ""


def permitted(state: AuthState, grant: str, topic: str, channel: str) -> bool:
    """One check of a :class:`~.needs.Need` against an auth server's answer."""
    if grant == ANY:
        return True
    if grant == PUBLISH:
        return state.allows(topic, "")  # (channel "" is V2's publish check)
    reads = state.allows(topic, channel) if channel else state.may_read_topic(topic)
    if grant == SUBSCRIBE:
        return reads
    if grant == ADMIN:
        return reads and state.allows(topic, "")
    if grant == PUBLISH_OR_SUBSCRIBE:
        return reads or state.allows(topic, "")
    raise ValueError(f"unknown grant {grant!r}")


class HttpAuth:
    """The check every guarded route runs; one per nsqd (shared by HTTP and HTTPS)."""

    def __init__(self, client: AuthClient, strict: bool, logger: logging.Logger,
                 common_name: Callable[[Any], str]) -> None:
        """``strict``: ``--http-auth-required`` (upstream's routes are checked too);
        ``common_name(ssl_object)``: the client certificate's CN on HTTPS."""
        self.client = client
        self.strict = strict
        self.logger = logger
        self._common_name = common_name
        self._answers: dict[Key, AuthState] = {}
        self._asking: dict[Key, asyncio.Future[AuthState]] = {}

    def guard(self, handler: Callable[[Any], Any], need: Need,
              parse: Callable[[Any], dict[str, list[str]]]) -> Callable[[Any], Any]:
        """``handler`` run only for a secret ``need`` admits; ``parse(request)`` reads the query
        as the API does (its errors are left to the handler)."""
        answers = self._answers
        upstream_when = None if self.strict else need.upstream_when

        def checked(request: Any) -> Any:
            if upstream_when is not None:  # (upstream's route on this request: open)
                try:
                    if upstream_when(parse(request)):
                        return handler(request)
                except ApiError:
                    return handler(request)
            secret = bearer(request)
            if secret is None:
                return AUTH_REQUIRED
            ssl_object = request.ssl_object
            key = (secret, remote_ip(request.remote_addr), ssl_object is not None,
                   self._common_name(ssl_object) if ssl_object is not None else "")
            state = answers.get(key)
            if state is not None and not state.expired():
                refusal = _refusal(state, need, parse, request)
                return handler(request) if refusal is None else refusal
            return self._after_answer(key, need, parse, handler, request)

        return checked

    async def _after_answer(self, key: Key, need: Need, parse: Callable[[Any], Any],
                            handler: Callable[[Any], Any], request: Any) -> Any:
        try:
            state = await self._ask(key)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - details go to the log, never to the client
            self.logger.warning("HTTP: [%s] AUTH failed %s", request.remote_addr, err)
            return AUTH_FAILED
        refusal = _refusal(state, need, parse, request)
        if refusal is not None:
            return refusal
        result = handler(request)
        if type(result) is tuple or hasattr(result, "feed"):  # an answer, a body reader
            return result
        return await result

    async def _ask(self, key: Key) -> AuthState:
        asking = self._asking.get(key)
        if asking is None:
            secret, ip, tls, common_name = key
            asking = asyncio.ensure_future(self.client.query(ip, tls, secret, common_name))
            self._asking[key] = asking
            asking.add_done_callback(lambda done: self._answered(key, done))
        # shielded: a request whose client went away does not cancel the others' query
        return await asyncio.shield(asking)

    def _answered(self, key: Key, done: "asyncio.Future[AuthState]") -> None:
        self._asking.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return  # a refusal is not kept: the next request asks again, as V2's AUTH would
        answers = self._answers
        if len(answers) >= _CACHE_SIZE:
            for stale in [k for k, state in answers.items() if state.expired()]:
                del answers[stale]
            if len(answers) >= _CACHE_SIZE:
                answers.clear()
        answers[key] = done.result()


def _refusal(state: AuthState, need: Need, parse: Callable[[Any], Any], request: Any) -> Any:
    """UNAUTHORIZED, or None when the route may run (also when its arguments are bad: the
    handler reports those before it does anything)."""
    if not state.authorizations:
        return UNAUTHORIZED
    try:
        checks = need.checks(parse(request))
    except ApiError:
        return None
    if checks is None:
        return None
    for grant, topic, channel in checks:
        if not permitted(state, grant, topic, channel):
            return UNAUTHORIZED
    return None


__all__ = ["AUTH_FAILED", "AUTH_REQUIRED", "HttpAuth", "UNAUTHORIZED", "bearer", "permitted",
           "remote_ip"]
