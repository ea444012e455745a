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

What Go accepts and OpenSSL's defaults refuse (upstream is built with Go 1.19):

* **Small keys.** Go serves any certificate; OpenSSL at Python's default security level 2 refuses
  keys under 2048 bits RSA (``EE_KEY_TOO_SMALL``). Such a certificate is loaded at the highest
  lower level that takes it (1 for a 1024-bit RSA key) and nsqd logs a warning once at start-up,
  as clients on OpenSSL defaults will refuse it.
* **TLS 1.0/1.1.** They have only SHA-1 CBC suites and SHA-1/MD5 handshake signatures, which
  OpenSSL 3 allows at security level 0 only. Lowering the whole context would also let TLS 1.2
  clients negotiate those, so the levels are chosen per connection: an OpenSSL ClientHello
  callback (installed through ctypes, as for ``require``) gives a connection whose client cannot
  speak TLS 1.2 security level 0 and Go 1.19's default suites for those versions (its ECDHE and
  RSA AES-CBC-SHA suites, in its order; 3DES left out). TLS 1.2 and 1.3 connections keep the
  context's suites and level. ``--tls-min-version`` still decides which versions are refused.
* **Suite order.** The same suites are preferred in Go's order (AES-128 first, ChaCha20 for a
  client that lists it first), so a client negotiates, and ``/stats`` names, upstream's choice.

Outbound contexts (the auth server, the replication link) stay TLS 1.2+ at OpenSSL's default
level whatever ``--tls-min-version`` allows below 1.2; only the replication link, which presents
``--tls-cert`` itself, drops its level as far as that key needs (a cluster shares its kind of key).

Connection details for ``/stats`` mimic upstream's ``prettyConnectionState``: ``TLS1.2`` style
version names, and cipher suite names only for the thirteen suites upstream's switch knows
(``Unknown <id>`` otherwise, e.g. ``Unknown 4865`` for TLS 1.3's TLS_AES_128_GCM_SHA256).
"""

from __future__ import annotations

import ctypes
import logging
import ssl
import threading
import warnings
from typing import Any

from ...common import gotls
from ...common.goerrno import path_error

TLS_REQUIRED_FALSE = "false"
TLS_REQUIRED_TCP_HTTPS = "tcp-https"  # TCP needs TLS, plain HTTP stays open
TLS_REQUIRED_TRUE = "true"

_MIN_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}

# Go 1.19's default suites that work below TLS 1.2, in its preference order (cipher_suites.go);
# its 3DES suites are left out: 64-bit blocks on long-lived, high-volume connections (Sweet32)
_LEGACY_SUITES = (
    ("ECDHE-ECDSA-AES128-SHA", 0xC009),
    ("ECDHE-RSA-AES128-SHA", 0xC013),
    ("ECDHE-ECDSA-AES256-SHA", 0xC00A),
    ("ECDHE-RSA-AES256-SHA", 0xC014),
    ("AES128-SHA", 0x002F),
    ("AES256-SHA", 0x0035),
)
_LEGACY_CIPHER_LIST = ":".join(name for name, _ in _LEGACY_SUITES).encode()

# Go 1.19's server preference among the TLS 1.2 suites both have (AES-128 before AES-256 before
# ChaCha20, ECDSA before RSA) and at TLS 1.3; the context's other suites follow unchanged
_GO_TLS12_FIRST = ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
                   "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
                   "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305")
_GO_TLS13_ORDER = b"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
_SSL_OP_PRIORITIZE_CHACHA = 0x00200000  # a client that lists ChaCha20 first gets it, as in Go

# OpenSSL's refusals of a certificate chain as too weak for the security level (ssl_security_cert)
_TOO_WEAK = {
    "EE_KEY_TOO_SMALL": "key too small",
    "CA_KEY_TOO_SMALL": "a CA key in the chain too small",
    "CA_MD_TOO_WEAK": "a certificate in the chain signed with too weak a digest",
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

def server_context(opts: Any, logger: logging.Logger | None = None) -> ssl.SSLContext | None:
    """The server context, or None without ``--tls-cert``/``--tls-key`` (upstream's buildTLSConfig).

    ``logger`` gets the start-up warnings: a key only a lowered security level accepts, and
    TLS 1.0/1.1 allowed by ``--tls-min-version`` but impossible on this Python/OpenSSL build.
    """
    if not opts.tls_cert and not opts.tls_key:
        if opts.tls_required != TLS_REQUIRED_FALSE:
            raise TLSConfigError("cannot require TLS client connections without TLS key and cert")
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    minimum = _MIN_VERSIONS.get(opts.tls_min_version, ssl.TLSVersion.TLSv1)
    with warnings.catch_warnings():  # TLS 1.0/1.1 are deprecated in ssl; Go's default allows them
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = minimum
    _prefer_as_go(ctx)
    default_level = ctx.security_level
    try:
        refusal = load_certificate(ctx, opts.tls_cert, opts.tls_key)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(f"failed to build TLS config - {_describe(err)}") from None
    if refusal and logger is not None:
        logger.warning("TLS: %s: %s for OpenSSL's default security level %d (%s); served at "
                       "level %d as upstream nsqd would, but clients on OpenSSL's defaults refuse "
                       "it - use a 2048-bit RSA or an EC key", opts.tls_cert, _TOO_WEAK[refusal],
                       default_level, refusal, ctx.security_level)
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
        _refuse_as_bad_certificate(ctx)
    elif policy == "require":
        ctx.verify_mode = ssl.CERT_REQUIRED
        if not _accept_any_client_certificate(ctx):
            raise TLSConfigError("--tls-client-auth-policy=require is not supported by this "
                                 "Python/OpenSSL build; use require-verify")
    else:
        ctx.verify_mode = ssl.CERT_NONE
    ctx.sslobject_class = AlertingSSLObject  # a failed handshake's alert is sent, as Go's
    if minimum < ssl.TLSVersion.TLSv1_2 and not _serve_legacy_versions(ctx) and logger:
        logger.warning("TLS: this Python/OpenSSL build cannot serve TLS 1.0/1.1 (no ClientHello "
                       "callback reachable); --tls-min-version=%s serves TLS 1.2 and later",
                       opts.tls_min_version)
    return ctx


def client_context(opts: Any, own_certificate: bool = False) -> ssl.SSLContext:
    """Outbound TLS (the auth server, the replication link): ``--tls-root-ca-file`` as the roots,
    else the system's, verified as Go verifies (common/gotls.py); TLS 1.2 or ``--tls-min-version``
    if higher, at OpenSSL's default level.

    With ``own_certificate`` (the replication link) ``--tls-cert``/``--tls-key`` are presented as
    the client certificate; a key too small for the default level lowers it as the server side
    does, which then also accepts peers' keys that small (a cluster shares its kind of key).
    """
    ctx = gotls.client_context(opts.tls_root_ca_file or None)
    ctx.minimum_version = max(_MIN_VERSIONS.get(opts.tls_min_version, ssl.TLSVersion.TLSv1),
                              ctx.minimum_version)
    if own_certificate and opts.tls_cert and opts.tls_key:
        load_certificate(ctx, opts.tls_cert, opts.tls_key)
    return ctx


def _prefer_as_go(ctx: ssl.SSLContext) -> None:
    """Order the server's suites as Go's server prefers them, the set unchanged: a client then
    gets the suite upstream would choose, and /stats names it as upstream does (most TLS 1.2
    clients: ``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``). :mod:`ssl` cannot order the TLS 1.3
    suites; that is done through ctypes, and left at OpenSSL's order should it fail."""
    suites = [c["name"] for c in ctx.get_ciphers() if c["protocol"] != "TLSv1.3"]
    first = [name for name in _GO_TLS12_FIRST if name in suites]
    ctx.set_ciphers(":".join(first + [name for name in suites if name not in first]))
    ctx.options |= _SSL_OP_PRIORITIZE_CHACHA
    try:
        lib = _libssl()
        lib.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.SSL_CTX_set_ciphersuites.restype = ctypes.c_int
        ptr = _ssl_ctx_pointer(ctx, lib)
        if ptr:
            lib.SSL_CTX_set_ciphersuites(ptr, _GO_TLS13_ORDER)
    except (OSError, AttributeError, ValueError, ImportError):
        pass


def load_certificate(ctx: ssl.SSLContext, certfile: str, keyfile: str) -> str:
    """Load the certificate chain and key, at a lower security level if the context's refuses them
    as too weak (Go has no such floor): the highest level that takes them, the cipher list kept.

    Returns the OpenSSL reason that made a lower level necessary, ``""`` when none was needed;
    any other failure (and a chain even level 0 refuses) raises as :meth:`load_cert_chain` does.
    A file that cannot be read raises OSError naming it, as Go's ``tls.LoadX509KeyPair`` reports
    it (the certificate first, then the key).
    """
    for path in (certfile, keyfile):
        with open(path, "rb"):
            pass
    try:
        ctx.load_cert_chain(certfile, keyfile)
        return ""
    except ssl.SSLError as err:
        if err.reason not in _TOO_WEAK:
            raise
        refusal = err
    suites = ":".join(c["name"] for c in ctx.get_ciphers() if c["protocol"] != "TLSv1.3")
    for level in range(ctx.security_level - 1, -1, -1):
        ctx.set_ciphers(f"{suites}:@SECLEVEL={level}")
        try:
            ctx.load_cert_chain(certfile, keyfile)
            return str(refusal.reason)
        except ssl.SSLError as err:
            if err.reason not in _TOO_WEAK:
                raise
    raise refusal


def _describe(err: BaseException) -> str:
    """Go's words for a file that cannot be read (``open <path>: no such file or directory``)."""
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return path_error("open", err.filename, err)
    return str(err)


# --- OpenSSL through ctypes: the SSL_CTX behind an SSLContext ------------------------------------

def _libssl() -> ctypes.CDLL:
    import _ssl

    return ctypes.CDLL(_ssl.__file__)  # the symbols of the libssl that _ssl is linked with


def _ssl_ctx_pointer(ctx: ssl.SSLContext, lib: ctypes.CDLL) -> int | None:
    """The ``SSL_CTX *`` of ``ctx``: ``PySSLContext`` starts with ``PyObject_HEAD`` followed by
    it. Checked by reading the context's options back through OpenSSL before anything is changed."""
    get_options = lib.SSL_CTX_get_options
    get_options.argtypes = [ctypes.c_void_p]
    get_options.restype = ctypes.c_uint64
    ptr = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not ptr or get_options(ptr) != ctx.options:
        return None
    return ptr


# --- "require": ask for a certificate, accept any ---------------------------------------------

_VERIFY_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_accept_all = _VERIFY_CB(lambda preverify_ok, store: 1)  # kept alive for the process lifetime
_SSL_VERIFY_PEER = 0x01
_SSL_VERIFY_FAIL_IF_NO_PEER_CERT = 0x02


def _accept_any_client_certificate(ctx: ssl.SSLContext) -> bool:
    """Install an always-accepting OpenSSL verify callback on ``ctx`` (see the module doc)."""
    try:
        return _set_verify_callback(ctx, _libssl(), _accept_all)
    except (OSError, AttributeError, ValueError, ImportError):
        return False


def _set_verify_callback(ctx: ssl.SSLContext, lib: ctypes.CDLL, callback: Any) -> bool:
    """Give ``ctx`` (in ``CERT_REQUIRED`` mode) an OpenSSL verify callback, the mode unchanged;
    False if the context's mode cannot be read back as expected."""
    get_mode = lib.SSL_CTX_get_verify_mode
    get_mode.argtypes = [ctypes.c_void_p]
    get_mode.restype = ctypes.c_int
    set_verify = lib.SSL_CTX_set_verify
    set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CB]
    set_verify.restype = None
    ptr = _ssl_ctx_pointer(ctx, lib)
    wanted = _SSL_VERIFY_PEER | _SSL_VERIFY_FAIL_IF_NO_PEER_CERT
    if not ptr or get_mode(ptr) != wanted:
        return False
    set_verify(ptr, wanted, callback)
    return get_mode(ptr) == wanted


# --- a refused client certificate: Go's bad_certificate alert, sent before the close ----------

class AlertingSSLObject(ssl.SSLObject):
    """The server side of a handshake that sends its alert before the connection closes.

    OpenSSL writes the alert of a failed handshake (a refused client certificate) into the
    outgoing memory BIO, but asyncio's and uvloop's SSL protocols close the transport as soon as
    ``do_handshake`` raises, without sending what the BIO holds: clients saw the connection
    close with no alert. Here the first failure is kept and reported as "want read", which makes
    the protocol send the BIO (the alert); the kept error is raised at the next call, when the
    client, having read the alert, closes or sends anything (or the handshake timeout ends it).

    At TLS 1.2 a missing certificate's alert is still in clear text and OpenSSL's
    handshake_failure is turned into Go's bad_certificate; at TLS 1.3 it is encrypted and stays
    certificate_required (docs/security.md). A certificate that fails verification gets
    bad_certificate from :func:`_refuse_as_bad_certificate`.
    """

    _nsq_outgoing: Any = None
    _nsq_failed: ssl.SSLError | None = None
    _nsq_on_failure: Any = None  # called once the alert is out (see close_after_alert)

    @classmethod
    def _create(cls, incoming: Any, outgoing: Any, *args: Any, **kwargs: Any) -> Any:
        obj = super()._create(incoming, outgoing, *args, **kwargs)
        obj._nsq_outgoing = outgoing
        return obj

    def do_handshake(self) -> None:
        if self._nsq_failed is not None:
            raise self._nsq_failed
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as err:
            outgoing = self._nsq_outgoing
            if outgoing is None or not outgoing.pending:
                raise
            if err.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
                outgoing.write(_as_bad_certificate(outgoing.read()))
            refusal, _refusal.text = getattr(_refusal, "text", None), None
            if refusal and isinstance(err.strerror, str):
                # OpenSSL's own reason, which _on_verify replaced to choose the alert
                err.strerror = err.strerror.replace(_REJECTED_TEXT, refusal)
            self._nsq_failed = err
            if self._nsq_on_failure is not None:  # runs after the protocol sent the alert
                import asyncio

                asyncio.get_running_loop().call_soon(self._nsq_on_failure)
            raise ssl.SSLWantReadError("the alert goes out first") from None


def _alerting_object(ssl_protocol: Any) -> AlertingSSLObject | None:
    """The SSL object of an SSL protocol, found one level deep (uvloop keeps it private)."""
    import gc

    if ssl_protocol is None:
        return None
    for obj in (getattr(ssl_protocol, "_sslobj", None), *gc.get_referents(ssl_protocol)):
        if isinstance(obj, AlertingSSLObject):
            return obj
    return None


def close_after_alert(ssl_protocol: Any) -> None:
    """End a failed handshake right after its alert, as Go does, instead of when the client
    reacts: the protocol is told the stream ended (its handshake then fails at once)."""
    obj = _alerting_object(ssl_protocol)
    if obj is None:
        return
    if obj._nsq_failed is not None:  # it failed (and sent its alert) before we got here
        ssl_protocol.eof_received()
    else:
        obj._nsq_on_failure = ssl_protocol.eof_received


def handshake_failure(ssl_protocol: Any) -> ssl.SSLError | None:
    """Why a server handshake failed when :class:`AlertingSSLObject` sent its alert first: the
    SSL protocol then ends it with an EOF, which says nothing."""
    obj = _alerting_object(ssl_protocol)
    return obj._nsq_failed if obj is not None else None


_ALERT = 0x15
_FATAL = 2
_HANDSHAKE_FAILURE = 40
_BAD_CERTIFICATE = 42


def _as_bad_certificate(data: bytes) -> bytes:
    """A clear-text fatal handshake_failure alert record (TLS 1.2, the whole of ``data``) as
    bad_certificate; anything else (an encrypted TLS 1.3 record) unchanged."""
    if len(data) == 7 and data[0] == _ALERT and data[3:6] == bytes((0, 2, _FATAL)) \
            and data[6] == _HANDSHAKE_FAILURE:
        return data[:6] + bytes((_BAD_CERTIFICATE,))
    return data


_X509_V_ERR_CERT_REJECTED = 28  # OpenSSL's alert for it: bad_certificate (ssl_x509err2alert)
_REJECTED_TEXT = "certificate rejected"
_refusal = threading.local()  # the reason _on_verify replaced, for the handshake's error


def _on_verify(preverify_ok: int, store: int) -> int:
    """OpenSSL's verify callback for ``require-verify``: the verdict is OpenSSL's own, but a
    refusal is reported as "certificate rejected", whose alert is Go's bad_certificate (an
    unknown CA would send unknown_ca)."""
    if not preverify_ok:
        try:
            lib = _verify_lib
            code = lib.X509_STORE_CTX_get_error(store)
            _refusal.text = lib.X509_verify_cert_error_string(code).decode("utf-8", "replace")
            lib.X509_STORE_CTX_set_error(store, _X509_V_ERR_CERT_REJECTED)
        except Exception:  # noqa: BLE001 - nothing may escape into OpenSSL's handshake
            pass
    return preverify_ok


_verify_lib: Any = None
_verify_callback = _VERIFY_CB(_on_verify)  # kept alive for the process lifetime


def _refuse_as_bad_certificate(ctx: ssl.SSLContext) -> bool:
    """Install :func:`_on_verify` on ``ctx`` (verification unchanged); False if impossible,
    which leaves OpenSSL's own alerts (unknown_ca ...)."""
    global _verify_lib
    try:
        lib = _libssl()
        lib.X509_STORE_CTX_set_error.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.X509_STORE_CTX_set_error.restype = None
        lib.X509_STORE_CTX_get_error.argtypes = [ctypes.c_void_p]
        lib.X509_STORE_CTX_get_error.restype = ctypes.c_int
        lib.X509_verify_cert_error_string.argtypes = [ctypes.c_long]
        lib.X509_verify_cert_error_string.restype = ctypes.c_char_p
        _verify_lib = lib
        return _set_verify_callback(ctx, lib, _verify_callback)
    except (OSError, AttributeError, ValueError, ImportError):
        return False


# --- TLS 1.0/1.1: security level 0 and Go's suites, for those connections only ------------------

_TLS1_2 = 0x0303
_EXT_SUPPORTED_VERSIONS = 43
_HELLO_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                             ctypes.c_void_p)
_hello_lib: Any = None  # the libssl the callback calls, bound by _serve_legacy_versions


def client_max_version(legacy_version: int, supported_versions: bytes | None) -> int:
    """The highest TLS version a ClientHello offers: its ``supported_versions`` extension
    (RFC 8446 §4.2.1; GREASE and non-TLS values skipped) when present, else ``legacy_version``."""
    if supported_versions is None:
        return legacy_version
    listed = supported_versions[1:1 + supported_versions[0]] if supported_versions else b""
    versions = [int.from_bytes(listed[i:i + 2], "big") for i in range(0, len(listed) - 1, 2)]
    return max((v for v in versions if v >> 8 == 0x03), default=0)


def _on_client_hello(ssl_ptr: int, alert: Any, arg: Any) -> int:
    """OpenSSL's ClientHello callback: a client that cannot speak TLS 1.2 gets security level 0
    and the legacy suites on its connection; any other keeps the context's. Always lets the
    handshake go on (1): a failure here leaves the context's settings, which refuse TLS 1.0/1.1."""
    try:
        lib = _hello_lib
        data = ctypes.POINTER(ctypes.c_ubyte)()
        size = ctypes.c_size_t()
        found = lib.SSL_client_hello_get0_ext(ssl_ptr, _EXT_SUPPORTED_VERSIONS,
                                              ctypes.byref(data), ctypes.byref(size))
        offered = ctypes.string_at(data, size.value) if found else None
        if client_max_version(lib.SSL_client_hello_get0_legacy_version(ssl_ptr), offered) < _TLS1_2:
            lib.SSL_set_security_level(ssl_ptr, 0)
            lib.SSL_set_cipher_list(ssl_ptr, _LEGACY_CIPHER_LIST)
    except Exception:  # noqa: BLE001 - nothing may escape into OpenSSL's handshake
        pass
    return 1


_hello_callback = _HELLO_CB(_on_client_hello)  # kept alive for the process lifetime


def _serve_legacy_versions(ctx: ssl.SSLContext) -> bool:
    """Install :func:`_on_client_hello` on ``ctx``; False if this build does not allow it."""
    global _hello_lib
    try:
        lib = _libssl()
        lib.SSL_client_hello_get0_legacy_version.argtypes = [ctypes.c_void_p]
        lib.SSL_client_hello_get0_legacy_version.restype = ctypes.c_uint
        lib.SSL_client_hello_get0_ext.argtypes = [
            ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.POINTER(ctypes.c_ubyte)),
            ctypes.POINTER(ctypes.c_size_t)]
        lib.SSL_client_hello_get0_ext.restype = ctypes.c_int
        lib.SSL_set_security_level.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.SSL_set_security_level.restype = None
        lib.SSL_set_cipher_list.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.SSL_set_cipher_list.restype = ctypes.c_int
        set_cb = lib.SSL_CTX_set_client_hello_cb
        set_cb.argtypes = [ctypes.c_void_p, _HELLO_CB, ctypes.c_void_p]
        set_cb.restype = None
        ptr = _ssl_ctx_pointer(ctx, lib)
        if not ptr:
            return False
        _hello_lib = lib
        set_cb(ptr, _hello_callback, None)
        return True
    except (OSError, AttributeError, ValueError, ImportError):
        return False


# --- connection details ------------------------------------------------------------------------

def _suite_ids(ctx: ssl.SSLContext) -> dict[str, int]:
    ids = getattr(ctx, "_nsq_suite_ids", None)
    if ids is None:
        ids = dict(_LEGACY_SUITES)  # set per connection, not in the context's list
        ids.update((c["name"], c["id"] & 0xFFFF) for c in ctx.get_ciphers())
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
