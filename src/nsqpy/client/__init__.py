"""asyncio NSQ client: :class:`Producer`, :class:`Consumer`, and the low-level :class:`NSQConnection`.

Wire behaviour only (no shortcuts into nsqpy's own nsqd), so it works against upstream nsqd too.
Blocking helpers: :func:`publish`, :class:`SyncPublisher`, :func:`http_publish`.
"""

from .backoff import ConsumerBackoff, ReconnectBackoff
from .connection import NSQConnection
from .consumer import Consumer
from .errors import (
    ClosedError,
    ConnectionClosedError,
    HTTPPublishError,
    IdentifyError,
    NotConnectedError,
    NSQError,
    NSQErrorResponse,
)
from .http import http_mpub, http_pub
from .lookupd import LookupdPoller
from .message import Message
from .options import USER_AGENT, ConnectionOptions
from .producer import Producer
from .rdy import RdyBudget
from .sync import SyncPublisher, http_mpublish, http_publish, publish

__all__ = [
    "ClosedError",
    "ConnectionClosedError",
    "ConnectionOptions",
    "Consumer",
    "ConsumerBackoff",
    "HTTPPublishError",
    "IdentifyError",
    "LookupdPoller",
    "Message",
    "NSQConnection",
    "NSQError",
    "NSQErrorResponse",
    "NotConnectedError",
    "Producer",
    "RdyBudget",
    "ReconnectBackoff",
    "SyncPublisher",
    "USER_AGENT",
    "http_mpub",
    "http_mpublish",
    "http_pub",
    "http_publish",
    "publish",
]
