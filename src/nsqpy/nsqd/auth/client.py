"""The auth-server client (reference §1.5, §6; upstream ``internal/auth``), shared by V2's
``AUTH`` and the HTTP API's check (:mod:`.http`).

nsqd asks the servers given by ``--auth-http-address`` (tried in a random rotation, the first
success wins) what a client's secret may do, and caches the answer for its ``ttl`` seconds:

* GET ``http://<addr>/auth?common_name=…&remote_ip=…&secret=…&tls=…`` (or the full URL given),
  with ``Accept: application/vnd.nsq; version=1.0``; with ``--auth-http-request-method=post``,
  a POST of the same values as JSON (``{"remote_ip": ["…"], …}``, Go's ``url.Values``).
  A 403 carrying ``https_port`` is retried once on HTTPS, as upstream's HTTP client does.
* The answer ``{"ttl": s, "identity": …, "identity_url": …, "authorizations": [{"topic": re,
  "channels": [re, …], "permissions": ["publish", "subscribe"]}]}`` is validated the way Go's
  decoder and upstream's checks do: wrong JSON types, an unknown permission, a regex that does
  not compile or ``ttl <= 0`` all make the query fail.

Regexes are Go's (``common/goregexp``: RE2, never Python's ``re``, which would decide some grants
the other way) and match unanchored, as Go's ``MatchString``. Without the RE2 engine nsqd refuses
to start with ``--auth-http-address``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any
from urllib.parse import quote_plus, urlsplit, urlunsplit

from ...protocol.gojson import INT, STRING, TIME, GoJSONError, ListOf, decode_struct
from ...common.goweb import go_json

from ...common import goregexp
from ...common.goregexp import GoRegexp

ACCEPT_V1 = "application/vnd.nsq; version=1.0"
_MAX_RESPONSE = 1 << 20  # an auth answer larger than this is refused, not buffered


class AuthQueryError(Exception):
    """Every auth server failed; the text names each failure (logged, never sent to clients)."""


class Authorization:
    __slots__ = ("topic", "channels", "publish", "subscribe")

    def __init__(self, topic: GoRegexp, channels: list[GoRegexp], permissions: list[str]) -> None:
        self.topic = topic
        self.channels = channels
        self.publish = "publish" in permissions
        self.subscribe = "subscribe" in permissions

    def allows(self, topic: str, channel: str) -> bool:
        if not (self.subscribe if channel else self.publish):
            return False
        if not self.topic.match_string(topic):
            return False
        return any(c.match_string(channel) for c in self.channels)


class AuthState:
    """One auth server answer, valid until ``expires`` (monotonic seconds)."""

    __slots__ = ("ttl", "identity", "identity_url", "authorizations", "expires", "_decided")

    def __init__(self, ttl: int, identity: str, identity_url: str,
                 authorizations: list[Authorization]) -> None:
        self.ttl = ttl
        self.identity = identity
        self.identity_url = identity_url
        self.authorizations = authorizations
        self.expires = time.monotonic() + ttl
        # (topic, channel) -> allowed: a publisher checks every PUB, the regexes run once
        self._decided: dict[tuple[str, str], bool] = {}

    def expired(self) -> bool:
        return self.expires < time.monotonic()

    def may_read_topic(self, topic: str) -> bool:
        """A read of the whole topic over HTTP (history, peek): a ``subscribe`` grant on it for
        some channel, as every channel of a topic receives all of it (docs/security.md)."""
        return any(a.subscribe and a.channels and a.topic.match_string(topic)
                   for a in self.authorizations)

    def allows(self, topic: str, channel: str) -> bool:
        key = (topic, channel)
        decided = self._decided.get(key)
        if decided is None:
            decided = any(a.allows(topic, channel) for a in self.authorizations)
            if len(self._decided) >= 1024:  # a client touching endless names gets no memory
                self._decided.clear()
            self._decided[key] = decided
        return decided


# --- decoding the answer -------------------------------------------------------------------------

# upstream's auth.State and auth.Authorization, as Go's decoder fills them
_AUTHORIZATION = {"topic": STRING, "channels": ListOf(STRING), "permissions": ListOf(STRING)}
_STATE = {"ttl": INT, "authorizations": ListOf(_AUTHORIZATION), "identity": STRING,
          "identity_url": STRING, "expires": TIME}  # Expires has no tag: its name, folded


def parse_state(body: bytes) -> AuthState:
    """Validate an auth server's answer (upstream QueryAuthd's checks); ValueError on any problem."""
    try:
        doc = decode_struct(body, _STATE, "auth.State")
    except GoJSONError as err:
        raise ValueError(str(err)) from None
    ttl = doc.get("ttl", 0)
    identity = doc.get("identity", "")
    identity_url = doc.get("identity_url", "")
    auths: list[Authorization] = []
    for raw in doc.get("authorizations") or ():
        permissions = raw.get("permissions") or []
        for p in permissions:
            if p not in ("subscribe", "publish"):
                raise ValueError(f"unknown permission {p}")
        topic = raw.get("topic", "")
        try:
            topic_re = goregexp.compile(topic)
        except ValueError as err:
            raise ValueError(f"unable to compile topic {topic!r} {err}") from None
        channel_res = []
        for channel in raw.get("channels") or ():
            try:
                channel_res.append(goregexp.compile(channel))
            except ValueError as err:
                raise ValueError(f"unable to compile channel {channel!r} {err}") from None
        auths.append(Authorization(topic_re, channel_res, permissions))
    if ttl <= 0:
        raise ValueError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(ttl, identity, identity_url, auths)


# --- querying ------------------------------------------------------------------------------------

def _values(remote_ip: str, tls: bool, secret: bytes, common_name: str) -> dict[str, str | bytes]:
    return {"common_name": common_name, "remote_ip": remote_ip, "secret": secret,
            "tls": "true" if tls else "false"}


def encode_query(values: dict[str, str | bytes]) -> str:
    """Go's ``url.Values.Encode``: keys sorted, ``QueryEscape``d (space as ``+``)."""
    return "&".join(f"{quote_plus(k)}={quote_plus(values[k])}" for k in sorted(values))


def _https_endpoint(endpoint: str, body: bytes) -> str:
    """Upstream's httpsEndpoint: same host and path, scheme https, port from the 403 body."""
    try:
        port = decode_struct(body, {"https_port": INT}).get("https_port", 0)
    except GoJSONError as err:
        raise ValueError(f"invalid 403 body - {err}") from None
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(("https", netloc, parts.path, parts.query, parts.fragment))


class AuthClient:
    """Queries the configured auth servers; one aiohttp session per nsqd."""

    def __init__(self, addresses: list[str], method: str, connect_timeout: float,
                 request_timeout: float, ssl_context: Any, logger: logging.Logger) -> None:
        self.addresses = list(addresses)
        self.method = method
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.ssl_context = ssl_context
        self.logger = logger
        self._session: Any = None

    @classmethod
    def from_options(cls, opts: Any, logger: logging.Logger,
                     ssl_context: Any) -> "AuthClient | None":
        """``ssl_context``: for auth servers over HTTPS (the server builds it from nsqd's TLS
        flags, ``v2/tls.client_context``)."""
        addresses = [a for a in opts.auth_http_address if a]
        if not addresses:
            return None
        goregexp.require()  # RegexpUnavailable (a start-up error): grants need Go's semantics
        return cls(addresses, opts.auth_http_request_method, opts.http_client_connect_timeout,
                   opts.http_client_request_timeout, ssl_context, logger)

    def _get_session(self) -> Any:
        if self._session is None:
            import aiohttp

            # ceil_threshold: aiohttp rounds a timeout over 5 s up to the next whole second of
            # the loop clock, so the default 5 s became 5-6 s; Go's client gives up at 5 s
            timeout = aiohttp.ClientTimeout(total=self.request_timeout,
                                            connect=self.connect_timeout,
                                            ceil_threshold=float("inf"))
            self._session = aiohttp.ClientSession(
                timeout=timeout, connector=aiohttp.TCPConnector(ssl=self.ssl_context))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def query(self, remote_ip: str, tls: bool, secret: bytes, common_name: str) -> AuthState:
        """Upstream's QueryAnyAuthd: random start, every server in turn, errors joined."""
        values = _values(remote_ip, tls, secret, common_name)
        errors: list[str] = []
        n = len(self.addresses)
        start = random.randrange(n)
        for i in range(n):
            addr = self.addresses[(start + i) % n]
            try:
                return await self._query_one(addr, values)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - any failure moves on to the next server
                errors.append(f"failed to auth against {addr} - {err or type(err).__name__}")
        raise AuthQueryError("; ".join(errors))

    async def _query_one(self, addr: str, values: dict[str, str | bytes]) -> AuthState:
        from yarl import URL

        endpoint = addr if "://" in addr else f"http://{addr}/auth"
        post = self.method == "post"
        if post:
            body: bytes | None = go_json({k: [v.decode("utf-8", "replace") if isinstance(v, bytes)
                                                   else v] for k, v in sorted(values.items())})
            headers = {"Accept": ACCEPT_V1, "Content-Type": "application/json"}
        else:
            endpoint = f"{endpoint}?{encode_query(values)}"
            body = None
            headers = {"Accept": ACCEPT_V1}
        session = self._get_session()
        for _ in range(2):
            async with session.request("POST" if post else "GET", URL(endpoint, encoded=True),
                                       data=body, headers=headers, allow_redirects=True) as resp:
                data = await resp.content.read(_MAX_RESPONSE + 1)
                if len(data) > _MAX_RESPONSE:
                    raise ValueError("response too large")
                if resp.status == 200:
                    return parse_state(data)
                if resp.status == 403 and not endpoint.startswith("https"):
                    endpoint = _https_endpoint(endpoint, data)
                    continue
                raise ValueError(f"got response {resp.status} {resp.reason} {data[:200]!r}")
        raise ValueError("auth server refused HTTPS too")


__all__ = ["AuthClient", "AuthState", "AuthQueryError", "Authorization", "parse_state",
           "encode_query"]
