"""What a handler sees (:class:`Request`) and how a daemon describes a route (:class:`Endpoint`).

A daemon's :class:`App` turns each request into an :class:`Endpoint`; the endpoint says how much
of the body its handler wants, so the connection can refuse, buffer, stream or skip the body
before a byte of it is held:

* ``IGNORE`` — the handler does not read the body (``GET /ping``): it runs as soon as the headers
  are in, and what body there is gets skipped as Go's server skips it (up to 256 KiB, else the
  connection closes after the answer);
* ``DRAIN`` — the handler wants the body read to its end but not kept (upstream's nsqlookupd
  reads and ignores it; a malformed chunked body reaches the handler as ``body=None``);
* ``n > 0`` — the handler gets ``request.body``, at most ``n`` bytes (a maximum + 1 lets it tell
  "too big"); it runs once the body ended or ``n`` bytes are in, the rest is skipped as above;
  ``refuse(request)`` may answer from the headers alone (a Content-Length over the limit) so
  the body is never invited (no ``100 Continue``);
* ``STREAM`` — the handler returns a :class:`BodyReader` that is fed each piece of the body as
  it arrives (or a response, to refuse it), so a large body is parsed without being held; or an
  awaitable of either, when it must ask something first (reading pauses until it resolves).

Handlers are plain functions returning a ``(Head, body)`` response; one that must wait returns
an awaitable instead (a Future, or a coroutine, which then gets a Task). Requests of one
connection are handled one after the other, as Go's server does, and answered in order.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol, Union

from .wire import Response


class Peer(Protocol):
    """The connection a request came on, as the request shows it (``HTTPConnection`` is one)."""

    remote_addr: str
    ssl_object: Any

IGNORE = 0
DRAIN = -1
STREAM = -2


class BodyReader(Protocol):
    """A streaming endpoint's per-request consumer of the body."""

    def feed(self, chunk: bytes) -> Union[Response, Awaitable[Response], None]:
        """One piece of the body; a response (or an awaitable one) ends the request early:
        the rest is skipped."""

    def end(self) -> Union[Response, Awaitable[Response]]:
        """The body ended: the answer."""

    def fail(self) -> None:
        """The body could not be read to its end (malformed chunk, client gone)."""


HandlerResult = Union[Response, Awaitable[Response], BodyReader]
Handler = Callable[["Request"], Any]


class Endpoint:
    """A route's handler and its body policy (``IGNORE``, ``DRAIN``, ``STREAM`` or a byte
    limit to buffer), plus an optional ``refuse(request) -> Response | None`` consulted before
    a buffered body is invited."""

    __slots__ = ("handler", "body", "refuse")

    def __init__(self, handler: Handler, body: int = IGNORE,
                 refuse: Callable[["Request"], Response | None] | None = None) -> None:
        self.handler = handler
        self.body = body
        self.refuse = refuse

    def __repr__(self) -> str:
        return f"<Endpoint {getattr(self.handler, '__qualname__', self.handler)} body={self.body}>"


class App(Protocol):
    """What a daemon hands the server: the endpoint for a request (routing, refusals...).
    ``resolve`` may set ``request.params`` (a route's ``:name`` values)."""

    def resolve(self, request: "Request") -> Endpoint:
        ...


class Request:
    """One request as the connection parsed it.

    ``path`` is the decoded path routing uses (Go's ``URL.Path``), ``query`` the raw query
    string, ``target`` what Go logs as ``RequestURI()``. ``headers`` keeps the pairs as sent.
    ``content_length`` is None when absent or chunked. ``body`` is set for ``DRAIN`` and
    buffered endpoints (None when the body could not be read).
    """

    __slots__ = (
        "method", "target", "path", "query", "http11", "headers", "content_length", "chunked",
        "expect_continue", "wants_close", "keep_alive10", "params", "body", "conn",
        # the connection's bookkeeping
        "endpoint", "response", "reader", "parts", "received", "state", "phase", "close", "raw",
        "skipped", "continue_sent",
    )

    def __init__(self, conn: Peer, method: str, target: str, path: str, query: str,
                 http11: bool, headers: list[tuple[bytes, bytes]]) -> None:
        self.conn = conn
        self.method = method
        self.target = target
        self.path = path
        self.query = query
        self.http11 = http11
        self.headers = headers
        self.content_length: int | None = None
        self.chunked = False
        self.expect_continue = False
        self.wants_close = False
        self.keep_alive10 = False
        self.params: dict[str, str] = _NO_PARAMS
        self.body: bytes | None = b""
        self.endpoint: Endpoint | None = None
        self.state = 0  # the connection's body state
        self.close = False

    def begin_exchange(self) -> None:
        """The connection's bookkeeping for a request it queues (a bodiless request answered
        at once needs none of it)."""
        self.response: Response | None = None
        self.reader: BodyReader | None = None
        self.parts: list[bytes] | None = None
        self.received = 0
        self.phase = 0  # the connection's handler state
        self.raw: bytes | None = None
        self.skipped = 0
        self.continue_sent = False

    def header(self, name: str) -> str | None:
        """The first value of a header (case-insensitive), None when absent."""
        key = name.lower().encode()
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None

    @property
    def remote_addr(self) -> str:
        """Go's ``RemoteAddr``: ``127.0.0.1:5555``, ``[::1]:5555``, or ``@`` for a unix socket."""
        return self.conn.remote_addr

    @property
    def ssl_object(self) -> Any:
        """The connection's ``ssl.SSLObject`` on an HTTPS listener (``getpeercert()`` for the
        client certificate), None on plain HTTP."""
        return self.conn.ssl_object

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.target}>"


_NO_PARAMS: dict[str, str] = {}
