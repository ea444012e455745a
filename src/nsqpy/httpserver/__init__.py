"""A lean HTTP/1.1 server for the daemons' APIs, answering byte for byte as Go's ``net/http``.

nsqd and nsqlookupd serve their HTTP APIs with it on their own event loop (uvloop). A daemon
describes its API as an :class:`App` whose ``resolve(request)`` returns an :class:`Endpoint` (a
handler plus how much of the body it wants), and hands the app to an :class:`HTTPServer` with
the sockets it bound::

    server = HTTPServer(app, ssl_context=None, logger=logger)
    await server.serve(sock)          # a bound TCP or unix socket; TLS when ssl_context is set
    ...
    await server.close()

Handlers return ``(Head, body)``: a :class:`Head` is a status line and header block encoded once.
See :mod:`.request` for the body policies and :mod:`.wire` for what Go's server adds.
This package imports no daemon.
"""

from .request import DRAIN, IGNORE, STREAM, App, BodyReader, Endpoint, Request
from .server import HTTPServer
from .wire import TEXT_PLAIN, Head, Response

__all__ = ["App", "BodyReader", "DRAIN", "Endpoint", "HTTPServer", "Head", "IGNORE", "Request",
           "Response", "STREAM", "TEXT_PLAIN"]
