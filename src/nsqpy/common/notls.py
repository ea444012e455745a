"""Load the event loop without OpenSSL, for a program that serves no TLS.

asyncio and uvloop import :mod:`ssl` when they load, for the TLS paths they offer, and OpenSSL
then stays resident: ~4.5 MiB, most of an idle daemon's budget (upstream's whole nsqlookupd is
7 MiB). nsqlookupd has no TLS at all, so its entry point loads asyncio and uvloop against a
stand-in ``ssl`` that carries only the names they bind at import, then removes the stand-in:
code that imports ``ssl`` later gets the real module (asyncio's and uvloop's own TLS paths stay
unusable in that process, which has none). If a version of them needs more than the stand-in
offers, they are loaded the ordinary way.
"""

from __future__ import annotations

import sys
import types


class _Unavailable:
    """What the stand-in's classes are: never instantiated."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("TLS is not available in this process")


def _stand_in() -> types.ModuleType:
    ssl = types.ModuleType("ssl", "stand-in: this process serves no TLS")
    for name in ("SSLContext", "MemoryBIO", "SSLObject", "SSLSocket"):
        setattr(ssl, name, type(name, (_Unavailable,), {}))
    ssl.SSLError = type("SSLError", (OSError,), {})  # type: ignore[attr-defined]
    for name in ("SSLWantReadError", "SSLWantWriteError", "SSLSyscallError",
                 "SSLZeroReturnError", "SSLEOFError", "CertificateError"):
        setattr(ssl, name, type(name, (ssl.SSLError,), {}))  # type: ignore[attr-defined]
    ssl.create_default_context = _Unavailable  # type: ignore[attr-defined]
    ssl.SSL_ERROR_WANT_READ, ssl.SSL_ERROR_WANT_WRITE = 2, 3  # type: ignore[attr-defined]
    ssl.SSL_ERROR_SYSCALL = 5  # type: ignore[attr-defined]
    return ssl


def load_event_loop_without_tls() -> bool:
    """Import asyncio (and uvloop when installed) without loading OpenSSL; True if that
    worked, False if they were loaded already or needed the real module."""
    if "ssl" in sys.modules or "asyncio" in sys.modules:
        return False
    stand_in = _stand_in()
    sys.modules["ssl"] = stand_in
    try:
        import asyncio  # noqa: F401

        try:
            import uvloop  # noqa: F401
        except ImportError:
            pass
        return True
    except Exception:
        for name in [n for n in sys.modules if n.split(".")[0] in ("asyncio", "uvloop")]:
            del sys.modules[name]
        return False
    finally:
        if sys.modules.get("ssl") is stand_in:
            del sys.modules["ssl"]
