"""NSQ error codes and the exceptions that carry them.

A :class:`FatalError` makes nsqd send an error frame and close the connection; a
:class:`ClientError` (``E_FIN_FAILED``, ``E_REQ_FAILED``, ``E_TOUCH_FAILED``) leaves it open.
"""

from __future__ import annotations

E_BAD_PROTOCOL = "E_BAD_PROTOCOL"
E_INVALID = "E_INVALID"
E_BAD_BODY = "E_BAD_BODY"
E_BAD_TOPIC = "E_BAD_TOPIC"
E_BAD_CHANNEL = "E_BAD_CHANNEL"
E_BAD_MESSAGE = "E_BAD_MESSAGE"
E_IDENTIFY_FAILED = "E_IDENTIFY_FAILED"
E_AUTH_DISABLED = "E_AUTH_DISABLED"
E_AUTH_FAILED = "E_AUTH_FAILED"
E_AUTH_FIRST = "E_AUTH_FIRST"
E_UNAUTHORIZED = "E_UNAUTHORIZED"
E_AUTH_ERROR = "E_AUTH_ERROR"
E_SUB_FAILED = "E_SUB_FAILED"
E_PUB_FAILED = "E_PUB_FAILED"
E_MPUB_FAILED = "E_MPUB_FAILED"
E_DPUB_FAILED = "E_DPUB_FAILED"
E_FIN_FAILED = "E_FIN_FAILED"
E_REQ_FAILED = "E_REQ_FAILED"
E_TOUCH_FAILED = "E_TOUCH_FAILED"
# nsqpy consumption leases (docs/leases.md), sent only to a client that named a lease
E_BAD_LEASE = "E_BAD_LEASE"
E_LEASE_ENDED = "E_LEASE_ENDED"


class ProtocolError(Exception):
    """An NSQ protocol error: ``code`` plus a human description, rendered as ``"CODE desc"``."""

    fatal = True

    def __init__(self, code: str, description: str, cause: str = "") -> None:
        super().__init__(f"{code} {description}")
        self.code = code
        self.description = description
        self.cause = cause  # the underlying error upstream logs after the error (" - cause")

    @property
    def payload(self) -> bytes:
        """The bytes of the error frame's data."""
        return f"{self.code} {self.description}".encode("utf-8", "surrogateescape")


class FatalError(ProtocolError):
    """Error after which nsqd closes the connection."""


class ClientError(ProtocolError):
    """Non-fatal error: the connection stays open."""

    fatal = False
