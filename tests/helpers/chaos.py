"""Publishers and drains for the replication freeze and chaos tests (tests/nsqd/replication).

A publisher records a body as acknowledged only when nsqd answered ``OK``; an error frame or a
dead connection means "not acknowledged" (it may still be delivered: at-least-once). After a run,
:func:`drain` reads a channel to its end on each surviving node, so a test can check that every
acknowledged body arrived somewhere.
"""

from __future__ import annotations

import socket
import threading
import time

from helpers.wire import Wire
from nsqpy.protocol.commands import encode_mpub
from nsqpy.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from nsqpy.protocol.message import decode_message


class _Publisher(threading.Thread):
    """What both publishers keep: the acknowledged bodies, and the refusals by kind."""

    def __init__(self, address: str, topic: str, tag: str, batch: int, pause: float,
                 timeout: float) -> None:
        super().__init__(daemon=True)
        self.address, self.topic, self.tag = address, topic, tag
        self.batch, self.pause, self.timeout = batch, pause, timeout
        self.acked: list[bytes] = []
        #: refusals (error frames such as E_PUB_FAILED, HTTP statuses) and broken connections
        self.errors: dict[str, int] = {}
        #: the bodies nsqd answered with a refusal (an error frame, an HTTP status other than
        #: 200): not taken, unlike those of a broken connection, whose fate is unknown
        self.refused: list[bytes] = []
        self.stop = threading.Event()
        self.n = 0
        self.pad = 0  # dots after each body's number (larger writes)

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    def body(self, i: int) -> bytes:
        """The ``i``-th body this publisher sends: ``<tag>-<7 digits>``, then ``pad`` dots."""
        return b"%s-%07d%s" % (self.tag.encode(), i, b"." * self.pad)

    def _bodies(self) -> list[bytes]:
        out = [self.body(self.n + i) for i in range(self.batch)]
        self.n += self.batch
        return out

    def _refused(self, kind: str, bodies: list[bytes] = ()) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.refused.extend(bodies)


class TcpPublisher(_Publisher):
    """PUB (or MPUB of ``batch`` bodies, or DPUB with ``defer_ms``) in a loop, one at a time."""

    def __init__(self, address: str, topic: str, tag: str, batch: int = 1, defer_ms: int = 0,
                 pause: float = 0.003, timeout: float = 15.0) -> None:
        super().__init__(address, topic, tag, batch, pause, timeout)
        self.defer_ms = defer_ms

    def run(self) -> None:
        wire: Wire | None = None
        while not self.stop.is_set():
            try:
                if wire is None:
                    wire = Wire(self.address, timeout=self.timeout)
                bodies = self._bodies()
                if self.batch > 1:
                    wire.send(encode_mpub(self.topic, bodies))
                elif self.defer_ms:
                    wire.cmd(b"DPUB", self.topic, str(self.defer_ms).encode(), body=bodies[0])
                else:
                    wire.cmd(b"PUB", self.topic, body=bodies[0])
                frame = wire.read_frame()
            except (OSError, ConnectionError):
                self._refused("conn")
                if wire is not None:
                    wire.close()
                wire = None
                time.sleep(0.1)
                continue
            if frame.frame_type == FRAME_TYPE_RESPONSE and frame.data == b"OK":
                self.acked.extend(bodies)
            else:
                self._refused(frame.data.split(b" ", 1)[0].decode(errors="replace"), bodies)
                if frame.frame_type != FRAME_TYPE_ERROR:
                    raise AssertionError(f"unexpected frame {frame}")
            time.sleep(self.pause)
        if wire is not None:
            wire.close()


class HttpPublisher(_Publisher):
    """POST /pub or /mpub (``batch`` > 1) in a loop; 200 means acknowledged."""

    def __init__(self, http_address: str, topic: str, tag: str, batch: int = 1,
                 pause: float = 0.005, timeout: float = 15.0) -> None:
        super().__init__(http_address, topic, tag, batch, pause, timeout)

    def run(self) -> None:
        import http.client

        conn: http.client.HTTPConnection | None = None
        host, port = self.address.rsplit(":", 1)
        while not self.stop.is_set():
            bodies = self._bodies()
            path = f"/mpub?topic={self.topic}" if self.batch > 1 else f"/pub?topic={self.topic}"
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
                conn.request("POST", path, body=b"\n".join(bodies))
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                self._refused("conn")
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.1)
                continue
            if resp.status == 200:
                self.acked.extend(bodies)
            else:
                self._refused(f"{resp.status} {data[:60].decode(errors='replace')}", bodies)
            time.sleep(self.pause)
        if conn is not None:
            conn.close()


def stop_publishers(publishers: list[_Publisher]) -> None:
    """Tell every publisher to stop, then wait for each (what one had in flight is unknown)."""
    for p in publishers:
        p.stop.set()
    for p in publishers:
        p.join(30)


def drain(address: str, topic: str, channel: str, idle: float = 3.0,
          limit: float = 60.0) -> list[bytes]:
    """Every message the channel hands out until none came for ``idle`` seconds (FINished)."""
    got: list[bytes] = []
    try:
        w = Wire(address, timeout=1.0)
        w.sub(topic, channel, rdy=500)
    except (OSError, ConnectionError):
        return got
    last = time.monotonic()
    deadline = last + limit
    sent_rdy = 0
    while time.monotonic() - last < idle and time.monotonic() < deadline:
        try:
            frame = w.read_frame()
        except socket.timeout:
            continue
        except (OSError, ConnectionError):
            break
        if frame.frame_type != FRAME_TYPE_MESSAGE:
            continue
        m = decode_message(frame.data)
        got.append(m.body)
        w.cmd(b"FIN", m.id)
        sent_rdy += 1
        if sent_rdy >= 250:
            w.cmd(b"RDY", b"500")
            sent_rdy = 0
        last = time.monotonic()
    w.close()
    return got


class TcpConsumer(threading.Thread):
    """SUB with a small RDY, FIN everything, reconnect when the node goes away."""

    def __init__(self, address: str, topic: str, channel: str, rdy: int = 20) -> None:
        super().__init__(daemon=True)
        self.address, self.topic, self.channel, self.rdy = address, topic, channel, rdy
        self.got: list[bytes] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                w = Wire(self.address, timeout=1.0)
                w.sub(self.topic, self.channel, rdy=self.rdy)
            except (OSError, ConnectionError, AssertionError):
                time.sleep(0.2)
                continue
            try:
                while not self.stop.is_set():
                    self._take(w)
                # stopping: no new messages, finish what is already on its way (a message left
                # in flight would stay there until --msg-timeout, out of the final drain's reach)
                w.cmd(b"RDY", b"0")
                end = time.monotonic() + 1.5
                while time.monotonic() < end:
                    self._take(w)
            except (OSError, ConnectionError):
                time.sleep(0.2)
            finally:
                w.close()

    def _take(self, w: Wire) -> None:
        try:
            frame = w.read_frame()
        except socket.timeout:
            return
        if frame.frame_type == FRAME_TYPE_MESSAGE:
            m = decode_message(frame.data)
            self.got.append(m.body)
            w.cmd(b"FIN", m.id)


def publishers(tcp_address: str, http_address: str, topic: str) -> list:
    """The chaos tests' publishers: TCP PUB, MPUB and DPUB (deferred 300 ms), HTTP /pub, /mpub."""
    return [TcpPublisher(tcp_address, topic, "pub"),
            TcpPublisher(tcp_address, topic, "mpub", batch=5, pause=0.01),
            TcpPublisher(tcp_address, topic, "dpub", defer_ms=300, pause=0.01),
            HttpPublisher(http_address, topic, "hpub", pause=0.01),
            HttpPublisher(http_address, topic, "hmpub", batch=4, pause=0.02)]
