"""nsqadmin's HTTP client for nsqlookupd's, nsqd's and graphite's APIs (upstream's
``http_api.Client``), with the ``--http-client-tls-*`` settings.

Every query goes to ``http://host:port/...`` first, as upstream's. An nsqd that requires TLS
(``--tls-required=true``) answers its plain HTTP port with ``403`` and ``{"https_port": N}``; the
request is then sent again to ``https://host:N/...`` through the TLS context built from the flags
(root CA, client certificate for ``--tls-client-auth-policy=require-verify``, or no verification
at all). That is how nsqadmin reaches nodes that serve their API over HTTPS only.

Failures are raised as :class:`RequestError` with the text Go's client would give where the
cause is common (refused connection, timeout), since those texts reach the API's ``message``.
"""

from __future__ import annotations

import asyncio
import errno
import ssl
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from ..client.httpauth import bearer, refusal
from ..common.addr import join_host_port
from ..common.gotls import client_context
from ..common.goerrno import path_error
from ..protocol.gojson import INT, GoJSONError, decode_struct, loads
from ..protocol.commands import go_quote

ACCEPT_V1 = {"Accept": "application/vnd.nsq; version=1.0"}


class RequestError(Exception):
    """One request failed; the text is what upstream's client reports."""


def client_tls_context(insecure_skip_verify: bool, root_ca_file: str, cert: str,
                       key: str) -> ssl.SSLContext:
    """The TLS settings upstream's ``nsqadmin.New`` builds, checked in its order; ValueError
    with its wording. Without a root CA file the system's roots verify the server (Go's
    default); with one, only the file's certificates do (Go's ``RootCAs``)."""
    if cert and not key:
        raise ValueError("--http-client-tls-key must be specified with --http-client-tls-cert")
    if key and not cert:
        raise ValueError("--http-client-tls-cert must be specified with --http-client-tls-key")
    # verifies the peer and its host name as Go does; the roots are added below
    ctx = client_context(system_roots=False)
    if insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        prefix = f"failed to LoadX509KeyPair {cert}, {key} - "
        for path, what in ((cert, "certificate"), (key, "key")):
            try:
                with open(path, "rb") as f:
                    pem = f.read()
            except OSError as err:
                raise ValueError(prefix + path_error("open", path, err)) from None
            if b"-----BEGIN" not in pem:
                raise ValueError(f"{prefix}tls: failed to find any PEM data in {what} input")
        try:
            ctx.load_cert_chain(cert, key)
        except ssl.SSLError as err:
            mismatch = err.reason == "KEY_VALUES_MISMATCH"
            detail = "tls: private key does not match public key" if mismatch else str(err)
            raise ValueError(prefix + detail) from None
    if root_ca_file:
        try:
            with open(root_ca_file, encoding="utf-8", errors="replace") as f:
                pem = f.read()
        except OSError as err:
            raise ValueError(f"failed to read TLS root CA file {root_ca_file} - "
                             f"{path_error('open', root_ca_file, err)}") from None
        try:
            ctx.load_verify_locations(cadata=pem)
        except (ssl.SSLError, ValueError):
            raise ValueError(f"failed to AppendCertsFromPEM {root_ca_file}") from None
    else:
        ctx.load_default_certs()
    return ctx


def https_endpoint(endpoint: str, body: bytes) -> str:
    """Upstream's ``httpsEndpoint``: the same URL with scheme https and the 403's https_port."""
    try:
        port = decode_struct(body, {"https_port": INT}).get("https_port", 0)
    except GoJSONError as err:
        raise RequestError(str(err)) from None
    parts = urlsplit(endpoint)
    return urlunsplit(("https", join_host_port(parts.hostname or "", port), parts.path,
                       parts.query, ""))


def _go_transport_error(method: str, url: str, err: BaseException) -> str:
    """``Get "url": ...`` as Go's ``http.Client`` words the usual failures."""
    op = f"{method.capitalize()} {go_quote(url)}"
    if isinstance(err, asyncio.TimeoutError):
        return f"{op}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    if isinstance(err, aiohttp.ClientConnectorError):
        os_err = err.os_error
        host = join_host_port(err.host, err.port)
        if isinstance(os_err, ConnectionRefusedError) or \
                getattr(os_err, "errno", None) == errno.ECONNREFUSED:
            return f"{op}: dial tcp {host}: connect: connection refused"
        if isinstance(err, aiohttp.ClientConnectorCertificateError):
            return f"{op}: {_x509_error(err.certificate_error)}"
        if isinstance(err, aiohttp.ClientConnectorSSLError):
            return f"{op}: {err.os_error}"
    if isinstance(err, aiohttp.ServerDisconnectedError):
        return f"{op}: EOF"  # closed without an answer (e.g. a client certificate was required)
    return f"{op}: {err}"


#: OpenSSL verify codes Go reports as an unknown authority (self-signed, no issuer in the pool)
_UNKNOWN_AUTHORITY = {18, 19, 20, 21}


def _x509_error(err: Exception) -> str:
    """Go 1.19's ``x509`` wording for the usual verification failures."""
    code = getattr(err, "verify_code", None)
    if code in _UNKNOWN_AUTHORITY:
        return "x509: certificate signed by unknown authority"
    return f"x509: {getattr(err, 'verify_message', None) or err}"


def _auth_refusal(status: int, body: bytes) -> str | None:
    """What nsqd's answer means when it refused the request for its secret (a 403 that is
    nsqd's TLS_REQUIRED is not one: it sends the request to HTTPS)."""
    if status not in (401, 403):
        return None
    try:
        message = loads(body).get("message")
    except (GoJSONError, AttributeError):
        return None
    return refusal(status, message) if isinstance(message, str) else None


class V1Client:
    """GETs and POSTs in upstream's V1 style over one aiohttp session. ``secret``
    (``--nsqd-auth-secret``) goes with every request as ``Authorization: Bearer``, for an nsqd
    that asks for one (docs/security.md); a refusal says so instead of trying HTTPS."""

    def __init__(self, session: aiohttp.ClientSession, tls: ssl.SSLContext | None,
                 secret: str = "") -> None:
        self.session = session
        self.tls = tls
        self.headers = {**ACCEPT_V1, **bearer(secret)}

    async def _request(self, method: str, url: str) -> bytes:
        while True:
            try:
                ssl_arg: Any = self.tls if url.startswith("https:") and self.tls else True
                async with self.session.request(method, url, headers=self.headers,
                                                ssl=ssl_arg) as resp:
                    body = await resp.read()
                    status, reason = resp.status, resp.reason
            except (asyncio.TimeoutError, aiohttp.ClientError) as err:
                raise RequestError(_go_transport_error(method, url, err)) from None
            if status == 200:
                return body
            meaning = _auth_refusal(status, body)
            if meaning is not None:
                raise RequestError(f"got response {status} {reason} {go_quote(body)} - {meaning} "
                                   "(nsqadmin --nsqd-auth-secret)")
            if status == 403 and not url.startswith("https"):
                url = https_endpoint(url, body)
                continue
            raise RequestError(f"got response {status} {reason} {go_quote(body)}")

    async def get_v1(self, url: str) -> Any:
        body = await self._request("GET", url)
        try:
            return loads(body)
        except GoJSONError as err:
            raise RequestError(f"invalid JSON from {url} - {err}") from None

    async def post_v1(self, url: str) -> None:
        await self._request("POST", url)
