"""Exceptions raised by the client.

Callers mostly need to tell three situations apart, so each has its own class:

* nsqd answered with an error frame (:class:`NSQErrorResponse`, carrying the ``E_*`` code);
* the connection died before an answer came (:class:`ConnectionClosedError`) — the command may
  or may not have taken effect, except when ``unprocessed`` is true: nsqd handles commands in
  order and stops at the first fatal error, so everything queued behind it was never executed;
* the client itself refuses (:class:`NotConnectedError`, :class:`ClosedError`).
"""

from __future__ import annotations

from nsqpy.protocol.errors import E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED

#: The only error codes after which nsqd keeps the connection open (upstream ``ClientErr``).
NON_FATAL_CODES = frozenset((E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED))


class NSQError(Exception):
    """Base of every exception this package raises on purpose."""


class NSQErrorResponse(NSQError):
    """nsqd sent an error frame ``"<E_CODE> <description>"``.

    ``code`` is what programs should branch on (``E_BAD_TOPIC``, ``E_PUB_FAILED``...); ``fatal``
    tells whether nsqd closed the connection after it.
    """

    def __init__(self, code: str, description: str) -> None:
        super().__init__(f"{code} {description}" if description else code)
        self.code = code
        self.description = description

    @property
    def fatal(self) -> bool:
        return self.code not in NON_FATAL_CODES

    @classmethod
    def from_frame(cls, data: bytes) -> NSQErrorResponse:
        text = data.decode("utf-8", "replace")
        code, _, description = text.partition(" ")
        return cls(code, description)


class ConnectionClosedError(NSQError):
    """The connection closed while a command waited for its answer.

    ``unprocessed`` is true when nsqd certainly did not execute the command (it was pipelined
    behind a command that failed fatally), so re-sending it cannot duplicate anything.
    """

    def __init__(self, message: str = "connection closed", *, unprocessed: bool = False) -> None:
        super().__init__(message)
        self.unprocessed = unprocessed


class NotConnectedError(NSQError):
    """No usable connection to any nsqd (yet, or any more)."""


class ClosedError(NSQError):
    """The producer or consumer was closed by its owner."""


class IdentifyError(NSQError):
    """The IDENTIFY / feature negotiation handshake failed (bad answer or unsupported upgrade)."""


class HTTPPublishError(NSQError):
    """nsqd's HTTP API refused a publish; ``status`` and nsqd's ``message`` (e.g. ``INVALID_TOPIC``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
