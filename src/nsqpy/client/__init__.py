"""asyncio NSQ client: :class:`Producer`, :class:`Consumer`, and the low-level :class:`NSQConnection`.

Wire behaviour only (no shortcuts into nsqpy's own nsqd), so it works against upstream nsqd too::

    from nsqpy.client import Consumer, Producer, publish

    async with Producer("127.0.0.1:4150") as p:
        await p.pub("events", b"hello")           # returns once nsqd said OK
        await p.mpub("events", [b"a", b"b"])
        await p.dpub("events", 30.0, b"later")     # delay in seconds

    async def handle(msg):                          # return -> FIN, raise -> REQ + backoff
        ...

    async with Consumer("events", "archive", handle,
                        lookupd_http_addresses=["127.0.0.1:4161"], max_in_flight=100) as c:
        await stop_event.wait()                     # leaving the block drains and closes

    publish("events", b"from a script", "127.0.0.1:4150")   # blocking, no event loop needed

Durations are seconds everywhere (converted to nsqd's milliseconds on the wire).
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
from .hooks import ConsumerHooks
from .http import http_mpub, http_pub
from .lookupd import LookupdPoller
from .message import Message, MessageBatch
from .options import USER_AGENT, ConnectionOptions
from .producer import Producer
from .rdy import RdyBudget
from .sync import SyncPublisher, http_mpublish, http_publish, publish
from .threaded import LoopThread, subscribe

__all__ = [
    "ClosedError",
    "ConnectionClosedError",
    "ConnectionOptions",
    "Consumer",
    "ConsumerBackoff",
    "ConsumerHooks",
    "HTTPPublishError",
    "IdentifyError",
    "LookupdPoller",
    "LoopThread",
    "Message",
    "MessageBatch",
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
    "subscribe",
]
