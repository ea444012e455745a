"""The one maker of nsqpy's TLS *client* contexts: a server certificate is verified as Go's
``crypto/x509`` verifies it, on every Python.

Upstream's clients and daemons (nsqd's auth and replication peers, nsqadmin, the utilities through
go-nsq) verify with Go, and an operator's certificates are made for them: by openssl's defaults,
by Go's own tools, by a company CA. ``ssl.create_default_context()`` verifies differently from
one Python to the next: 3.13 turns on ``VERIFY_X509_STRICT``, which refuses what Go accepts (a CA
from ``openssl req -x509`` with Debian's openssl.cnf has no keyUsage; a leaf from ``openssl x509
-req`` no Authority Key Identifier; a CA's basicConstraints not marked critical), and 3.11/3.12 do
not set ``VERIFY_X509_PARTIAL_CHAIN``. So every client context nsqpy makes comes from here, with
OpenSSL's verification set to Go's on every version:

* ``VERIFY_X509_STRICT`` off: Go checks none of those RFC 5280 profile rules.
* ``VERIFY_X509_PARTIAL_CHAIN`` on: Go trusts every certificate in its root pool as an anchor,
  self-signed or not (a CA file holding only an intermediate, or the server's own certificate,
  verifies); Python sets it from 3.13 on, OpenSSL needs it asked for before.

What is left as OpenSSL decides: host names (a certificate with a Common Name and no SAN is
refused by Go 1.15+ and accepted here) and OpenSSL's security level (keys under 2048 bits RSA are
refused at the default level; Go takes them). docs/security.md lists both;
tests/security/test_gotls.py checks the rest against Go's own verdicts.
"""

from __future__ import annotations

import functools
import ssl


def client_context(cafile: str | None = None, *, system_roots: bool = True) -> ssl.SSLContext:
    """A context that verifies the server (certificate and host name) as Go does.

    The roots are ``cafile``'s certificates, else the system's; with ``system_roots=False`` and
    no ``cafile`` none are loaded, for a caller that adds its own (and words its own errors).
    OSError / :class:`ssl.SSLError` as :meth:`ssl.SSLContext.load_verify_locations` raises them.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, host names checked, TLS 1.2+
    ctx.verify_flags = (ctx.verify_flags & ~ssl.VERIFY_X509_STRICT) | ssl.VERIFY_X509_PARTIAL_CHAIN
    if cafile:
        ctx.load_verify_locations(cafile=cafile)
    elif system_roots:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return ctx


@functools.cache
def shared_context() -> ssl.SSLContext:
    """One :func:`client_context` on the system's roots, shared by the HTTP clients (aiohttp
    sessions, urllib) that would otherwise use Python's default: loading the roots costs tens of
    milliseconds, and a context may serve any number of connections."""
    return client_context()


__all__ = ["client_context", "shared_context"]
