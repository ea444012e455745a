"""Points in a :class:`~nsqpy.client.Consumer`'s life that its owner may want to report.

A consumer logs in nsqpy's own words; a program that must speak differently (the utilities
print go-nsq's lines, byte for byte with upstream's) passes a :class:`ConsumerHooks` subclass
and overrides what it needs. Every method here does nothing, and each is called on the event
loop, synchronously, at the moment the event happens, so their order is the events' order.
"""

from __future__ import annotations

from .message import Message


class ConsumerHooks:
    """No-op callbacks; override the ones you need."""

    def connecting(self, address: str) -> None:
        """About to dial an nsqd (given directly, discovered, or reconnecting)."""

    def connect_failed(self, address: str, error: BaseException) -> None:
        """Dialling, the handshake or SUB failed; the consumer will try again later."""

    def connection_closed(self, address: str, reason: BaseException | None, graceful: bool,
                          remaining: int) -> None:
        """A subscribed connection ended: ``reason`` is None for a plain EOF; ``graceful`` when
        the consumer itself was closing it (CLS answered); ``remaining`` connections are left."""

    def reconnecting(self, address: str, delay: float) -> None:
        """The next attempt at a lost nsqd (given directly) starts in ``delay`` seconds."""

    def backing_off(self, duration: float, level: int) -> None:
        """A handler failure slowed the consumer down: RDY 0 everywhere for ``duration``."""

    def backoff_probe(self, address: str | None) -> None:
        """Backoff time is over: RDY 1 to ``address`` to test the waters; None when there is no
        connection to probe with (looked at again in a second)."""

    def backoff_exited(self, rdy_per_connection: int) -> None:
        """Enough successes: back to full speed."""

    def giving_up(self, msg: Message) -> None:
        """``msg`` came more than ``max_attempts`` times: FINished without the handler."""

    def stopping(self) -> None:
        """:meth:`Consumer.close` began (CLS to every connection)."""

    def stopped(self) -> None:
        """:meth:`Consumer.close` is done: connections closed, workers stopped."""
