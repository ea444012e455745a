"""An in-process :class:`nsqpy.httpserver.HTTPServer` on loopback (its own uvloop loop in a
thread) with a small app that records what its handlers were given, and a raw-socket client
that reads answers byte for byte."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time
from typing import Any

import pytest

from nsqpy.httpserver import DRAIN, IGNORE, STREAM, Endpoint, Head, HTTPServer, Request

OK = Head(200)
TOO_BIG = Head(413)
BAD = Head(400)
LIMIT = 100  # the /buffer endpoint's maximum body


class Recorder:
    """What the handlers saw, read by the tests from their own thread."""

    def __init__(self) -> None:
        self.bodies: list[bytes | None] = []
        self.chunks: list[list[bytes]] = []
        self.calls: list[str] = []
        self.peers: list[Any] = []


class Reader:
    """``/stream``'s body reader: keeps each piece; a piece with ``!`` ends the request early."""

    def __init__(self, rec: Recorder) -> None:
        self.pieces: list[bytes] = []
        rec.chunks.append(self.pieces)

    def feed(self, chunk: bytes):
        self.pieces.append(chunk)
        if b"!" in chunk:
            return BAD, b"refused mid-body"
        return None

    def end(self):
        return OK, b"%d" % sum(map(len, self.pieces))

    def fail(self) -> None:
        self.pieces.append(b"<failed>")


class RecordingApp:
    def __init__(self) -> None:
        self.rec = Recorder()
        rec = self.rec

        def ping(request: Request):
            rec.calls.append(f"{request.method} {request.target}")
            return OK, b"OK"

        def buffer(request: Request):
            rec.calls.append("buffer")
            rec.bodies.append(request.body)
            if request.body is None:
                return BAD, b"unreadable body"
            if len(request.body) > LIMIT:
                return TOO_BIG, b"too big"
            return OK, b"got %d" % len(request.body)

        def refuse(request: Request):
            if (request.content_length or 0) > LIMIT:
                rec.calls.append("refused")
                return TOO_BIG, b"too big"
            return None

        def drain(request: Request):
            rec.calls.append("drain")
            rec.bodies.append(request.body)
            return (OK, b"drained") if request.body is not None else (BAD, b"bad body")

        async def slow(request: Request):
            rec.calls.append("slow start")
            await asyncio.sleep(0.2)
            rec.calls.append("slow end")
            return OK, b"slow"

        def echo(request: Request):
            return OK, (request.header("x-echo") or "-").encode()

        def peer(request: Request):
            cert = request.ssl_object.getpeercert() if request.ssl_object else None
            rec.peers.append(cert)
            subject = dict(x[0] for x in cert["subject"]) if cert else {}
            return OK, subject.get("commonName", "-").encode()

        self.routes = {
            "/ping": Endpoint(ping, IGNORE),
            "/buffer": Endpoint(buffer, LIMIT + 1, refuse),
            "/drain": Endpoint(drain, DRAIN),
            "/stream": Endpoint(lambda request: Reader(rec), STREAM),
            "/slow": Endpoint(slow, IGNORE),
            "/big": Endpoint(lambda request: (OK, b"x" * 5000)),
            "/peer": Endpoint(peer),
            "/echo": Endpoint(echo),
        }
        self.missing = Endpoint(lambda request: (Head(404), b"404 page not found\n"))

    def resolve(self, request: Request) -> Endpoint:
        return self.routes.get(request.path, self.missing)


class _ListHandler(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__()
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


class LayerServer:
    """The server in a thread; ``port`` (or ``path`` for a unix socket) to connect to."""

    def __init__(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None,
                 **timeouts: float) -> None:
        self.app = RecordingApp()
        self.sock = sock
        self.port = sock.getsockname()[1] if sock.family != socket.AF_UNIX else 0
        #: what the server logged (only its own failures ever are)
        self.errors: list[str] = []
        logger = logging.getLogger(f"http_layer.{id(self)}")
        logger.propagate = False
        logger.addHandler(_ListHandler(self.errors))
        self.server = HTTPServer(self.app, ssl_context=ssl_context, logger=logger, **timeouts)
        self.loop: asyncio.AbstractEventLoop | None = None
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10), "server thread did not start"

    def _run(self, ready: threading.Event) -> None:
        import uvloop

        loop = self.loop = uvloop.new_event_loop()
        loop.run_until_complete(self.server.serve(self.sock))
        ready.set()
        loop.run_forever()
        loop.run_until_complete(self.server.close())
        loop.close()

    def call(self, fn, *args):
        """Run ``fn`` on the server's loop and return its result."""
        done = threading.Event()
        box: list[Any] = []

        def run() -> None:
            box.append(fn(*args))
            done.set()

        assert self.loop is not None
        self.loop.call_soon_threadsafe(run)
        assert done.wait(10)
        return box[0]

    def connections(self) -> int:
        return self.call(lambda: len(self.server.connections))

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(15)
        self.sock.close()


@pytest.fixture
def layer():
    """``layer(**kwargs)`` starts a server on a free loopback port; all stop at teardown."""
    started: list[LayerServer] = []

    def start(ssl_context: ssl.SSLContext | None = None, sock: socket.socket | None = None,
              **timeouts: float) -> LayerServer:
        if sock is None:
            sock = socket.create_server(("127.0.0.1", 0), backlog=4096)
        server = LayerServer(sock, ssl_context, **timeouts)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# --- a raw client -------------------------------------------------------------------------------

class RawClient:
    """Bytes in, answers out: ``read_answer`` parses one response as the wire carries it."""

    def __init__(self, sock: socket.socket, timeout: float = 5.0) -> None:
        self.sock = sock
        self.sock.settimeout(timeout)
        self.buf = b""

    @classmethod
    def tcp(cls, port: int, timeout: float = 5.0) -> "RawClient":
        return cls(socket.create_connection(("127.0.0.1", port), timeout=timeout), timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buf += chunk
        return bool(chunk)

    def read_until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            if not self._fill():
                raise EOFError(f"closed before {marker!r}; had {self.buf!r}")
        head, _, self.buf = self.buf.partition(marker)
        return head + marker

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise EOFError(f"closed with {len(self.buf)} of {n} bytes")
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_answer(self) -> tuple[int, dict[str, str], bytes, bytes]:
        """(status, headers, body, the raw head) of the next response."""
        head = self.read_until(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(": ")
                headers[k.lower()] = v
        if "content-length" in headers:
            body = self.read_exact(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self.read_until(b"\r\n")[:-2], 16)
                chunk = self.read_exact(size + 2)[:-2]
                if size == 0:
                    break
                body += chunk
        else:
            body = b""
        return status, headers, body, head

    def closed_within(self, seconds: float) -> bool:
        """True when the server closes the connection (EOF or reset) within ``seconds``."""
        self.sock.settimeout(seconds)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client():
    """``client(port)`` opens a raw client; all are closed at teardown."""
    opened: list[RawClient] = []

    def connect(port: int, timeout: float = 5.0) -> RawClient:
        c = RawClient.tcp(port, timeout)
        opened.append(c)
        return c

    yield connect
    for c in opened:
        c.close()


def wait_until(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def wait():
    return wait_until
