"""One HTTP/1.1 connection: an asyncio Protocol around ``httptools`` (llhttp).

Bytes go to the parser as they arrive; its callbacks build a :class:`Request`, ask the daemon's
app for the :class:`Endpoint`, and feed the body to it as the endpoint asked (see
:mod:`.request`). Responses are written in request order (pipelining), all those one read
produced in a single ``transport.write``. The rules for what is answered when follow Go's
``net/http`` server, which upstream's daemons run on:

* a request Go cannot read gets Go's raw ``400``/``431``/``501``/``505`` and the connection
  closes; an ``Expect`` other than ``100-continue`` gets ``417``;
* ``100 Continue`` is sent only once the handler wants the body;
* a body the handler did not read is skipped after the answer is known, up to 256 KiB (a longer
  one, or one whose ``100 Continue`` was never sent, closes the connection instead, with
  ``Connection: close``); the answer goes out once the skipping is done, as in Go;
* requests are handled one at a time: while a handler awaits, reading stops.

Deadlines are coarse (the server's one-second tick reads :attr:`HTTPConnection.deadline`): a
request head must arrive within ``header_timeout``, a body must keep moving within
``body_timeout``, an idle keep-alive connection (or one whose client stopped reading our
answers) is closed after ``idle_timeout``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Protocol

from httptools import (HttpParserCallbackError, HttpParserError, HttpParserUpgrade,
                       HttpRequestParser)

from . import wire
from .head import HeadReader
from .quirks import go_readable, parse_error_answer
from .request import DRAIN, IGNORE, STREAM, Endpoint, Request


class Listener(Protocol):
    """What a connection uses of the server that accepted it (``server.HTTPServer`` is one)."""

    app: Any
    now: float
    date: wire.DateCache
    idle_timeout: float
    header_timeout: float
    body_timeout: float
    connections: set
    before_write: Any

    def connection_made(self, conn: "HTTPConnection") -> None: ...

    def write_soon(self, conn: "HTTPConnection") -> None: ...

    def internal_error(self, conn: "HTTPConnection", err: BaseException) -> None: ...

    def handler_failed(self, req: Request, err: BaseException) -> None: ...

#: Go's ``DefaultMaxHeaderBytes`` plus the 4096 bytes of slack its reader allows
MAX_HEADER_BYTES = (1 << 20) + 4096
#: Go's ``maxPostHandlerReadBytes``: how much unread body it skips to keep a connection
MAX_SKIP = 256 << 10
#: answers a connection may owe before its next requests wait (pipelined requests whose
#: answers are much larger than they are must not pile up answers in memory)
OUT_LIMIT = 256 << 10
#: a read larger than this is parsed a slice at a time, and what is left of it once answers
#: pile up (or a handler awaits, or the client stops reading) waits unparsed, with reading
#: paused: pipelined requests read ahead are bounded by this many bytes, not by a read
SLICE = 16 << 10

# request phases
_PENDING, _ACTIVE, _ANSWERED = 0, 1, 2
# body states (a request without a body is complete at once)
_RECEIVING, _COMPLETE, _BROKEN = 0, 1, 2
# why reading is paused (bits)
_PAUSE_WRITES, _PAUSE_HANDLER, _PAUSE_PENDING = 1, 2, 4

_METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")}

#: ``OPTIONS *`` is answered by Go's server itself, before any router
_GLOBAL_OPTIONS = Endpoint(lambda request: (wire.GLOBAL_OPTIONS, b""))


def _says_http09(read: bytes, url: bytes) -> bool:
    """Whether a request line in ``read`` names HTTP/0.9 after ``url``, as opposed to naming no
    version (which llhttp also reports as 0.9). Looked for as the whole tail of the line, so an
    earlier request of the same read with the same URL and another version does not count; a
    line cut between two reads counts as one without a version, the likelier case by far."""
    return b" " + url + b" HTTP/0.9" in read


class _Stop(Exception):
    """Raised from a parser callback to stop parsing what is left of this read."""


def new_parser(protocol: Any) -> HttpRequestParser:
    parser = HttpRequestParser(protocol)
    # Go accepts HTTP/1.2 (and answers 505 to 2.x itself), bare LF line ends, and a
    # Content-Length next to chunking (it ignores the length); data after a request that
    # closes the connection is simply never read
    parser.set_dangerous_leniencies(lenient_version=True, lenient_chunked_length=True,
                                    lenient_optional_cr_before_lf=True,
                                    lenient_data_after_close=True)
    return parser


class HTTPConnection(asyncio.Protocol):
    __slots__ = ("server", "app", "transport", "parser", "url", "headers", "method_override",
                 "url_override", "req", "queue", "running", "out", "closing", "close_after_write",
                 "paused", "deadline", "head_bytes", "idle", "_remote", "_ssl", "completed",
                 "ready", "heads", "out_size", "backlogged", "write_queued", "pending", "read")

    def __init__(self, server: Listener) -> None:
        self.server = server
        self.app = server.app
        self.transport: asyncio.Transport | None = None
        self.parser = new_parser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.method_override: str | None = None  # what a head llhttp could not read had
        self.url_override: bytes | None = None
        self.req: Request | None = None  # the request whose body is being parsed
        self.queue: deque[Request | bytes] = deque()  # not yet answered on the wire, in order
        self.running: Request | None = None  # the request whose handler is awaiting
        self.out: list[bytes] = []
        self.closing = False  # no further request is read
        self.close_after_write = False
        self.paused = 0
        self.deadline = 0.0  # 0: none
        self.head_bytes = -1  # bytes seen of the current request head, -1 outside a head
        self.idle = True
        self._remote: str | None = None
        self._ssl: Any = False
        self.completed = 0  # requests parsed to their end
        self.ready: Request | None = None  # a bodiless request answered at its end (fast path)
        self.heads = HeadReader(self, server.date)
        self.out_size = 0  # bytes of answers in ``out``
        self.backlogged = False  # handlers wait until those are handed to the transport
        self.write_queued = False  # the server writes our answers at the end of this iteration
        self.pending: bytes | None = None  # the unparsed rest of a read, while reading is held
        self.read = b""  # the read being parsed

    # --- asyncio callbacks ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        server = self.server
        server.connection_made(self)
        self.deadline = server.now + server.idle_timeout

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.closing = True
        self.server.connections.discard(self)
        req = self.req
        if req is not None:
            self.req = None
            self._body_broken(req)
        self.queue.clear()
        self.out.clear()
        self.pending = None

    def eof_received(self) -> bool:
        req = self.req
        if req is not None:  # the body ends early: a handler reading it sees a read error
            self.req = None
            self._body_broken(req)
        self.closing = True
        self._pump()
        self._flush()
        # keep the transport open for the answers still owed; write_out closes it after them
        return self.transport is not None and (bool(self.queue) or self.running is not None)

    def pause_writing(self) -> None:
        # a client that does not read its answers is not read either, and is closed after the
        # idle timeout unless it drains them
        self._pause(_PAUSE_WRITES)
        self.deadline = self.server.now + self.server.idle_timeout

    def resume_writing(self) -> None:
        self._resume(_PAUSE_WRITES)
        self.deadline = self.server.now + self.server.idle_timeout if self.idle else 0.0
        if self.backlogged:
            self.write_out()  # the requests held back while the client was not reading
        else:
            self._feed_pending_soon()

    def data_received(self, data: bytes) -> None:
        """Parse what came; a large read a :data:`SLICE` at a time, keeping the rest for
        later once this connection must not take more requests now (see :meth:`_held`)."""
        if self.pending is not None:  # (a read that raced our pause_reading)
            self.pending += data
            return
        size = len(data)
        if size <= SLICE:
            self._receive(data)
            if self.backlogged and self.transport is not None:
                self.pending = b""  # read nothing more until the answers owed went out
                self._pause(_PAUSE_PENDING)
            return
        view = memoryview(data)
        for start in range(0, size, SLICE):
            self._receive(bytes(view[start:start + SLICE]))
            if start + SLICE < size and self._held():
                if self.transport is not None and not (self.closing and self.req is None):
                    self.pending = bytes(view[start + SLICE:])
                    self._pause(_PAUSE_PENDING)
                return

    def _held(self) -> bool:
        """No more requests are taken now: answers owed exceed :data:`OUT_LIMIT`, a handler
        awaits, or the client is not reading what we wrote."""
        return self.backlogged or bool(self.paused & (_PAUSE_WRITES | _PAUSE_HANDLER))

    def _feed_pending_soon(self) -> None:
        if self.pending is not None and not self._held() and self.transport is not None:
            asyncio.get_running_loop().call_soon(self._feed_pending)

    def _feed_pending(self) -> None:
        """Parse the rest of a read held back; read the socket again once all of it went."""
        data = self.pending
        if data is None or self.transport is None or self._held():
            return  # (gone, or held again: the next release schedules this again)
        self.pending = None
        if data:
            self.data_received(data)
        if self.pending is None:
            self._resume(_PAUSE_PENDING)

    def _receive(self, data: bytes) -> None:
        if self.closing and (self.close_after_write or self.req is None):
            return
        head_bytes = self.head_bytes
        if head_bytes >= 0:
            head_bytes = self.head_bytes = head_bytes + len(data)
            if head_bytes > MAX_HEADER_BYTES:
                self._early(wire.HEADER_TOO_LARGE)
                self._flush()
                return
        elif (data[0] == 13 or data[0] == 10) and self.req is None and not self.heads.last_post:
            # Go skips blank lines before a request only after a POST (RFC 7230 §3.5)
            self._early(wire.BAD_REQUEST)
            self._flush()
            return
        completed = self.completed
        self.read = data  # (what a request line without a version is told apart by)
        try:
            self.parser.feed_data(data)
        except (HttpParserError, HttpParserUpgrade) as err:
            failure: Exception | None = err
        else:
            failure = None
        self.read = b""  # (an idle connection holds no read)
        if failure is not None:  # handled outside the except: see _feed_failed
            # a clean start: this read began between two requests and none ended in it
            self._feed_failed(data, failure, head_bytes < 0 and self.req is None
                              and completed == self.completed)
        if self.head_bytes == 0:
            self.head_bytes = len(data)
        if self.closing:
            self.write_out()
        elif self.out and not self.write_queued:
            self.write_queued = True
            self.server.write_soon(self)

    def _feed_failed(self, data: bytes, err: Exception, clean: bool) -> None:
        """What stopped the parser: our own stop, an ``Upgrade`` (Go reads on), or a request
        llhttp refuses: some Go reads (parsed again rewritten), the rest get Go's answer.
        Called outside the ``except`` that caught ``err``: a parse started from there would
        have its callback errors chained to ``err`` instead of to our stop."""
        if isinstance(err, HttpParserUpgrade):
            rest = data[int(err.args[0]):]
            if rest and not self.closing:
                self._feed(rest, True)
        elif isinstance(err, HttpParserCallbackError):
            if not isinstance(err.__context__, _Stop):
                self.server.internal_error(self, err.__context__ or err)
                self._early(b"")
        else:
            if clean and self.req is None:
                retry = go_readable(data, err)
                if retry is not None and retry.data != data:
                    if retry.method is not None:
                        self.method_override = retry.method
                    if retry.url is not None:
                        self.url_override = retry.url
                    self.parser = new_parser(self)
                    self._feed(retry.data, True)  # (which may meet the next quirk)
                    return
            self._parse_error(err, data if clean else None)

    def _feed(self, data: bytes, clean: bool) -> None:
        completed = self.completed
        try:
            self.parser.feed_data(data)
        except (HttpParserError, HttpParserUpgrade) as err:
            failure: Exception | None = err
        else:
            failure = None
        if failure is not None:
            self._feed_failed(data, failure, clean and completed == self.completed)

    # --- parser callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.closing:
            raise _Stop
        self.url = b""
        self.headers = []
        self.head_bytes = 0
        self.idle = False
        server = self.server
        self.deadline = server.now + server.header_timeout

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_bytes = -1
        req = self._request()
        if req is None:
            raise _Stop
        endpoint = self.app.resolve(req) if req.target != "*" or req.method != "OPTIONS" else (
            _GLOBAL_OPTIONS)
        req.endpoint = endpoint
        mode = endpoint.body
        has_body = req.chunked or req.content_length
        answer = None
        if not self.queue and mode != STREAM and not self.backlogged:
            if not has_body:
                # the common case: no body, nothing owed before it; answered at message end
                # without the queue's machinery
                req.state = _COMPLETE
                self.ready = req
                return
            length = req.content_length
            if (mode > 0 and length is not None and length < mode and not req.expect_continue
                    and self.running is None):
                refuse = endpoint.refuse
                if refuse is not None:
                    answer = refuse(req)
                if answer is None:
                    # a body the handler takes whole (a publish): gathered, then answered at
                    # message end as above; queued only if it breaks off
                    req.state = _RECEIVING
                    req.parts = []
                    self.req = req
                    self.ready = req
                    server = self.server
                    self.deadline = server.now + server.body_timeout
                    return
        req.begin_exchange()
        self.queue.append(req)
        if has_body:
            self.req = req
            server = self.server
            self.deadline = server.now + server.body_timeout
            if mode > 0 or mode == DRAIN:
                refuse = endpoint.refuse
                if refuse is not None and answer is None:
                    answer = refuse(req)
                if answer is not None:
                    req.response = answer
                    req.phase = _ANSWERED
                if mode > 0 and req.phase == _PENDING:
                    req.parts = []
                if req.expect_continue or req.phase == _ANSWERED:
                    self._pump()
                return
        else:
            req.state = _COMPLETE
        if mode == IGNORE or mode == STREAM:
            self._pump()

    def on_body(self, chunk: bytes) -> None:
        req = self.req
        if req is None:
            return
        server = self.server
        self.deadline = server.now + server.body_timeout
        if req is self.ready:  # a small body on the fast path: within its limit by its length
            req.parts.append(chunk)  # type: ignore[union-attr]
            return
        n = len(chunk)
        req.received += n
        mode = req.endpoint.body  # type: ignore[union-attr]
        if req.phase == _PENDING:
            if mode > 0:
                parts = req.parts
                if parts is not None:
                    have = req.received - n
                    if have + n < mode:
                        parts.append(chunk)
                        return
                    # the handler reads no further than its limit; the rest is skipped
                    parts.append(chunk[:mode - have])
                    req.skipped += have + n - mode
                    req.body = b"".join(parts)
                    req.parts = None
                    self._pump()
                    self._check_skip(req)
                    return
            elif mode == DRAIN:
                return
            elif mode == STREAM:
                if req.parts is None:
                    req.parts = []
                req.parts.append(chunk)
                return
        elif req.reader is not None:
            answer = req.reader.feed(chunk)
            if answer is not None:
                self._reader_answered(req, answer)
                self._pump()
                self._check_skip(req)
            return
        elif mode == STREAM and self.running is req:
            # a streaming handler awaiting before it hands its reader (an auth answer): the
            # piece waits for the reader (reading is paused meanwhile, so this is one slice)
            if req.parts is None:
                req.parts = []
            req.parts.append(chunk)
            return
        # body the handler does not read
        req.skipped += n
        self._check_skip(req)

    def on_message_complete(self) -> None:
        self.completed += 1
        req = self.ready
        if req is not None:
            self.ready = None
            if req.state == _RECEIVING:  # its body, gathered on the fast path
                parts = req.parts
                req.body = parts[0] if len(parts) == 1 else b"".join(parts)  # type: ignore
                req.parts = None
                req.state = _COMPLETE
                self.req = None
            if self.running is None:
                try:
                    result = req.endpoint.handler(req)  # type: ignore[union-attr]
                except Exception as err:
                    self.server.handler_failed(req, err)
                    result = None
                if type(result) is tuple:
                    server = self.server
                    data, close = wire.encode(result[0], result[1], server.date.value,
                                              req.http11, req.close, req.keep_alive10,
                                              req.method == "HEAD")
                    self.out.append(data)
                    if close:
                        self.closing = self.close_after_write = True
                    else:
                        self.out_size += len(data)
                        if self.out_size > OUT_LIMIT:
                            self.backlogged = True
                        self.idle = True
                        self.deadline = server.now + server.idle_timeout
                    return
                req.begin_exchange()
                self.queue.append(req)
                if result is None:
                    self._fail(req)
                else:
                    self._settle(req, result)
            else:
                req.begin_exchange()
                self.queue.append(req)
            self._pump()
            return
        req = self.req
        self.req = None
        if req is not None:
            req.state = _COMPLETE
            if req.parts is not None and req.endpoint.body > 0:  # type: ignore[union-attr]
                req.body = b"".join(req.parts)
                req.parts = None
            reader = req.reader
            if reader is not None:
                req.reader = None
                self._settle(req, reader.end())
        self._pump()
        if not self.queue and self.running is None:
            self._go_idle()

    # --- requests -------------------------------------------------------------------------------

    def _request(self) -> Request | None:
        """The parsed head as a Request, or None after queueing Go's answer to a bad one."""
        parser = self.parser
        method = self.method_override
        if method is None:
            raw_method = parser.get_method()
            method = _METHODS.get(raw_method) or raw_method.decode("latin-1")
        else:
            self.method_override = None
        url = self.url_override
        if url is None:
            url = self.url
        else:
            self.url_override = None
        version = parser.get_http_version()
        if version == "0.9" and not _says_http09(self.read, url):
            # llhttp reads a request line without a version as HTTP/0.9; Go finds no second
            # space in it and answers a plain 400 (505 only to a version it read and refuses)
            self._early(wire.BAD_REQUEST)
            return None
        req = self.heads.read(version, method, url, self.headers)
        if type(req) is bytes:
            self._early(req)
            return None
        if req.close or not (req.http11 or req.keep_alive10):
            self.closing = True  # nothing after this request is read
        return req

    def _run(self, req: Request) -> None:
        """Call the handler now that its turn has come (its body is in, if it buffers it)."""
        endpoint = req.endpoint
        assert endpoint is not None
        mode = endpoint.body
        if req.state == _BROKEN and mode != IGNORE:
            if mode == STREAM:
                self._fail(req)
                return
            req.body = None
        try:
            result = endpoint.handler(req)
        except Exception as err:  # the daemons answer their own errors: this is a bug
            self.server.handler_failed(req, err)
            self._fail(req)
            return
        if type(result) is tuple:
            req.response = result
            req.phase = _ANSWERED
        elif mode == STREAM and hasattr(result, "feed"):
            self._start_reading(req, result)
        else:
            self._settle(req, result)

    def _start_reading(self, req: Request, reader: Any) -> None:
        """A streaming handler wants the body: hand it what came in already, then the rest."""
        req.phase = _ACTIVE
        req.reader = reader
        parts = req.parts or ()
        req.parts = None
        for i, chunk in enumerate(parts):
            answer = reader.feed(chunk)
            if answer is not None:
                req.skipped += sum(len(p) for p in parts[i + 1:])
                self._reader_answered(req, answer)
                return
        if req.state == _COMPLETE:
            req.reader = None
            self._settle(req, reader.end())
        elif req.state == _BROKEN:
            self._fail(req)

    def _reader_answered(self, req: Request, answer: Any) -> None:
        """A body reader answered before the body's end (the rest is skipped): now, or once
        the awaitable it returned resolves."""
        req.reader = None
        if type(answer) is tuple:
            req.response = answer
            req.phase = _ANSWERED
        else:
            self._settle(req, answer)

    def _fail(self, req: Request) -> None:
        """No answer for this request: its body broke off, or its handler raised. Go drops the
        connection there, having written what came before."""
        reader = req.reader
        req.reader = None
        if reader is not None:
            reader.fail()
        req.phase = _ANSWERED
        req.raw = b""

    def _settle(self, req: Request, result: Any) -> None:
        """A handler's result: a response now, or an awaitable whose result answers later."""
        if type(result) is tuple:
            req.response = result
            req.phase = _ANSWERED
            return
        req.phase = _ACTIVE
        self.running = req
        self.deadline = 0.0
        self._pause(_PAUSE_HANDLER)
        future = asyncio.ensure_future(result)
        future.add_done_callback(lambda f: self._async_done(req, f))

    def _async_done(self, req: Request, future: "asyncio.Future[Any]") -> None:
        self.running = None
        reader = None
        try:
            result = future.result()
        except Exception as err:
            self.server.handler_failed(req, err)
            self._fail(req)
        else:
            if type(result) is not tuple and hasattr(result, "feed"):
                reader = result  # a streaming handler's reader, handed once it could decide
            else:
                req.response = result
                req.phase = _ANSWERED
        if self.transport is None:
            return
        self._resume(_PAUSE_HANDLER)
        if reader is not None:
            self._start_reading(req, reader)
        self._pump()
        self._flush()
        if not self.queue and self.running is None and self.req is None:
            self._go_idle()

    def _pump(self) -> None:
        """Answer the queue from its head: run the head's handler when its turn has come,
        write its answer when ready. Only the head can run: Go handles a connection's
        requests one at a time, and a later one is parsed only once the head's body is in.
        Handlers stop running while the answers owed exceed :data:`OUT_LIMIT` (see
        :meth:`write_out`), so pipelined requests cannot pile up answers in memory."""
        queue = self.queue
        out = self.out
        while queue:
            req = queue[0]
            if type(req) is bytes:
                out.append(req)
                queue.clear()
                self.closing = self.close_after_write = True
                return
            if req.phase == _PENDING and self.running is None and not self.backlogged:
                mode = req.endpoint.body  # type: ignore[union-attr]
                if not (req.state == _RECEIVING
                        and (mode == DRAIN or mode > 0 and req.parts is not None)):
                    self._run(req)  # (not while it buffers or drains a body still coming)
            if req.phase != _ANSWERED:
                if req.expect_continue and not req.continue_sent and req.state == _RECEIVING:
                    mode = req.endpoint.body  # type: ignore[union-attr]
                    wants = req.reader is not None or (
                        (mode == DRAIN or mode > 0) and req.phase == _PENDING)
                    if wants:
                        out.append(wire.CONTINUE)
                        req.continue_sent = True
                return
            if req.state == _RECEIVING and not self._skip_or_close(req):
                return  # Go skips what is left of the body before it answers
            queue.popleft()
            if req.raw is not None:
                out.append(req.raw)
                queue.clear()
                self.closing = self.close_after_write = True
                return
            head, body = req.response  # type: ignore[misc]
            data, close = wire.encode(head, body, self.server.date.value, req.http11,
                                      req.close, req.keep_alive10, req.method == "HEAD")
            out.append(data)
            if close:
                queue.clear()
                self.closing = self.close_after_write = True
                return
            self.out_size += len(data)
            if self.out_size > OUT_LIMIT:
                self.backlogged = True

    def _skip_or_close(self, req: Request) -> bool:
        """The answer is ready but not all the body is in: Go's rule for the unread rest. True
        when the answer goes now (with ``Connection: close``), False to skip the rest first."""
        if ((req.expect_continue and not req.continue_sent)
                or (req.content_length is not None
                    and req.content_length - req.received >= MAX_SKIP)
                or req.skipped > MAX_SKIP):
            req.close = True
            self.closing = True
            if self.req is req:
                self.req = None
            return True
        return False

    def _check_skip(self, req: Request) -> None:
        """Skipped more than Go would: answer (when ready) with close, read nothing more."""
        if req.skipped > MAX_SKIP and self.req is req:
            req.close = True
            self.closing = True
            self.req = None
            self._pump()
            raise _Stop

    def _body_broken(self, req: Request) -> None:
        """The body could not be read to its end (malformed chunk, client gone): a handler
        that reads it sees a read error, and nothing more is read from this connection."""
        if req is self.ready:  # from the fast path: answered in turn now, as any other
            self.ready = None
            req.begin_exchange()
            self.queue.append(req)
        req.state = _BROKEN
        req.close = True
        req.parts = None
        self.closing = True
        if req.reader is not None:
            self._fail(req)
        self._pump()

    def _early(self, raw: bytes) -> None:
        """Queue Go's answer to a request it could not read; nothing more is read."""
        self.queue.append(raw)
        self.closing = True
        self._pump()

    def _parse_error(self, err: Exception, head: bytes | None = None) -> None:
        req = self.req
        if req is not None:  # a malformed chunked body
            self.req = None
            self._body_broken(req)
        else:
            self._early(parse_error_answer(err, head))

    # --- output ---------------------------------------------------------------------------------

    def _flush(self) -> None:
        self.write_out()

    def write_out(self, logged: bool = False) -> None:
        """One write for everything this connection owes now, then the close it decided on.
        The server's ``before_write`` runs first: a request's log line precedes its answer,
        as in Go (it logs before its buffered answer leaves). Requests held back because
        their answers would have piled up run now, unless the client is not reading (the
        transport paused us; :meth:`resume_writing` goes on)."""
        transport = self.transport
        out = self.out
        while True:
            if transport is None or transport.is_closing():
                out.clear()
                return
            if out:
                before = self.server.before_write
                if before is not None and not logged:
                    before()
                logged = False  # requests run below log lines of their own
                transport.write(out[0] if len(out) == 1 else b"".join(out))
                out.clear()
            self.out_size = 0
            if not self.backlogged or self.paused & _PAUSE_WRITES:
                break
            self.backlogged = False
            self._pump()
            if not out:
                break
        if self.close_after_write or (self.closing and not self.queue and self.running is None
                                      and self.req is None):
            transport.close()
            return
        if (not self.idle and not self.queue and self.running is None and self.req is None
                and self.head_bytes < 0):
            self._go_idle()
        if self.pending is not None:
            self._feed_pending_soon()

    def _go_idle(self) -> None:
        self.idle = True
        server = self.server
        self.deadline = server.now + server.idle_timeout

    def _pause(self, why: int) -> None:
        if not self.paused and self.transport is not None:
            self.transport.pause_reading()
        self.paused |= why

    def _resume(self, why: int) -> None:
        was = self.paused
        self.paused &= ~why
        if was and not self.paused and self.transport is not None:
            self.transport.resume_reading()

    # --- the server's view ----------------------------------------------------------------------

    def timed_out(self) -> None:
        """A deadline passed: Go's read fails and the connection closes without an answer."""
        if self.transport is not None:
            self.closing = True
            self.transport.abort()

    def close(self) -> None:
        if self.transport is not None:
            self.closing = True
            self.transport.close()

    @property
    def remote_addr(self) -> str:
        remote = self._remote
        if remote is None:
            peer = self.transport.get_extra_info("peername") if self.transport else None
            if isinstance(peer, tuple):
                host, port = peer[0], peer[1]
                remote = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            else:
                remote = "@"
            self._remote = remote
        return remote

    @property
    def ssl_object(self) -> Any:
        value = self._ssl
        if value is False:
            value = self.transport.get_extra_info("ssl_object") if self.transport else None
            self._ssl = value
        return value
