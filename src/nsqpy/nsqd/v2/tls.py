"""TLS for nsqd with the standard library's :mod:`ssl` (reference §1.1, §1.3.1, §1.4).

One server :class:`ssl.SSLContext` serves both the in-band ``tls_v1`` upgrade of TCP connections
(``loop.start_tls`` after the IDENTIFY response) and the HTTPS listener, as upstream shares one
``tls.Config``. The client-certificate policies map onto OpenSSL as follows:

* ``""`` (default): no certificate is requested (Go's ``NoClientCert``).
* ``require-verify``: a certificate is required and verified against ``--tls-root-ca-file``
  (or the system store when no file is given): ``CERT_REQUIRED``.
* ``require``: a certificate is required but *not* verified (Go's ``RequireAnyClientCert``).
  :mod:`ssl` has no such mode, so after ``CERT_REQUIRED`` is set the context's OpenSSL verify
  callback is replaced, through ctypes, by one that accepts any chain. Should that ever fail
  (an unexpected OpenSSL/CPython layout), start-up refuses the policy rather than silently
  verifying or silently accepting nothing.

Connection details for ``/stats`` mimic upstream's ``prettyConnectionState``: ``TLS1.2`` style
version names, and cipher suite names only for the thirteen suites upstream's switch knows
(``Unknown <id>`` otherwise, e.g. ``Unknown 4865`` for TLS 1.3's TLS_AES_128_GCM_SHA256).
"""

from __future__ import annotations

import ctypes
import ssl
from typing import Any

TLS_REQUIRED_FALSE = "false"
TLS_REQUIRED_TCP_HTTPS = "tcp-https"  # TCP needs TLS, plain HTTP stays open
TLS_REQUIRED_TRUE = "true"

_MIN_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}

_VERSION_NAMES = {"TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}

# upstream v1.3.0 client_v2.go prettyConnectionState.GetCipherSuite: the only suites it names
_GO_SUITE_NAMES = {
    0x0005: "TLS_RSA_WITH_RC4_128_SHA",
    0x000A: "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    0x002F: "TLS_RSA_WITH_AES_128_CBC_SHA",
    0x0035: "TLS_RSA_WITH_AES_256_CBC_SHA",
    0xC007: "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    0xC009: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    0xC00A: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    0xC011: "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    0xC012: "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    0xC013: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    0xC014: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    0xC02F: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    0xC02B: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
}


class TLSConfigError(RuntimeError):
    """The TLS flags cannot be served (start-up fails with this message)."""


# --- contexts ----------------------------------------------------------------------------------

def server_context(opts: Any) -> ssl.SSLContext | None:
    """The server context, or None without ``--tls-cert``/``--tls-key`` (upstream's buildTLSConfig)."""
    if not opts.tls_cert and not opts.tls_key:
        if opts.tls_required != TLS_REQUIRED_FALSE:
            raise TLSConfigError("cannot require TLS client connections without TLS key and cert")
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _MIN_VERSIONS.get(opts.tls_min_version, ssl.TLSVersion.TLSv1)
    try:
        ctx.load_cert_chain(opts.tls_cert, opts.tls_key)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(f"failed to build TLS config - {_describe(err)}") from None
    if opts.tls_root_ca_file:
        try:
            ctx.load_verify_locations(cafile=opts.tls_root_ca_file)
        except (OSError, ssl.SSLError) as err:
            raise TLSConfigError(f"failed to build TLS config - {_describe(err)}") from None
    policy = opts.tls_client_auth_policy
    if policy == "require-verify":
        ctx.verify_mode = ssl.CERT_REQUIRED
        if not opts.tls_root_ca_file:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    elif policy == "require":
        ctx.verify_mode = ssl.CERT_REQUIRED
        if not _accept_any_client_certificate(ctx):
            raise TLSConfigError("--tls-client-auth-policy=require is not supported by this "
                                 "Python/OpenSSL build; use require-verify")
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def client_context(opts: Any) -> ssl.SSLContext:
    """Outbound HTTPS (the auth server): ``--tls-root-ca-file`` as the roots, else the system's."""
    ctx = ssl.create_default_context(cafile=opts.tls_root_ca_file or None)
    ctx.minimum_version = max(_MIN_VERSIONS.get(opts.tls_min_version, ssl.TLSVersion.TLSv1),
                              ctx.minimum_version)
    return ctx


def _describe(err: BaseException) -> str:
    if isinstance(err, OSError) and err.filename:
        return f"open {err.filename}: {err.strerror or err}"
    return str(err)


# --- "require": ask for a certificate, accept any ---------------------------------------------

_VERIFY_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_accept_all = _VERIFY_CB(lambda preverify_ok, store: 1)  # kept alive for the process lifetime
_SSL_VERIFY_PEER = 0x01
_SSL_VERIFY_FAIL_IF_NO_PEER_CERT = 0x02


def _accept_any_client_certificate(ctx: ssl.SSLContext) -> bool:
    """Install an always-accepting OpenSSL verify callback on ``ctx`` (see the module doc).

    ``PySSLContext`` starts with ``PyObject_HEAD`` followed by the ``SSL_CTX *``; the pointer is
    checked by reading the verify mode back through OpenSSL before anything is changed.
    """
    try:
        import _ssl

        lib = ctypes.CDLL(_ssl.__file__)
        get_mode = lib.SSL_CTX_get_verify_mode
        get_mode.argtypes = [ctypes.c_void_p]
        get_mode.restype = ctypes.c_int
        set_verify = lib.SSL_CTX_set_verify
        set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CB]
        set_verify.restype = None
        ptr = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
        wanted = _SSL_VERIFY_PEER | _SSL_VERIFY_FAIL_IF_NO_PEER_CERT
        if not ptr or get_mode(ptr) != wanted:
            return False
        set_verify(ptr, wanted, _accept_all)
        return get_mode(ptr) == wanted
    except (OSError, AttributeError, ValueError, ImportError):
        return False


# --- connection details ------------------------------------------------------------------------

def _suite_ids(ctx: ssl.SSLContext) -> dict[str, int]:
    ids = getattr(ctx, "_nsq_suite_ids", None)
    if ids is None:
        ids = {c["name"]: c["id"] & 0xFFFF for c in ctx.get_ciphers()}
        try:
            ctx._nsq_suite_ids = ids  # type: ignore[attr-defined]
        except AttributeError:
            pass
    return ids


class TLSInfo:
    """What ``/stats`` and the auth query need from an established TLS connection."""

    __slots__ = ("version", "cipher_suite", "negotiated_protocol", "common_name")

    def __init__(self, ssl_object: Any, ctx: ssl.SSLContext) -> None:
        version = ssl_object.version() or ""
        self.version = _VERSION_NAMES.get(version, f"Unknown {version}")
        cipher = ssl_object.cipher()
        suite = _suite_ids(ctx).get(cipher[0]) if cipher else None
        if suite is None:
            self.cipher_suite = f"Unknown {cipher[0] if cipher else 0}"
        else:
            self.cipher_suite = _GO_SUITE_NAMES.get(suite, f"Unknown {suite}")
        self.negotiated_protocol = ssl_object.selected_alpn_protocol() or ""
        self.common_name = common_name(ssl_object)


def common_name(ssl_object: Any) -> str:
    """The peer certificate's subject CN (Go's ``PeerCertificates[0].Subject.CommonName``)."""
    try:
        cert = ssl_object.getpeercert()
    except (ValueError, ssl.SSLError):
        return ""
    if not cert:
        return ""
    name = ""
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                name = value  # Go keeps the last CN attribute it parses
    return name
