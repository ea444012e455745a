"""A minimal blocking V2 wire client for protocol tests: raw bytes in, frames out."""

from __future__ import annotations

import socket
import struct

import orjson

from nsqpy.protocol.commands import encode_command, encode_mpub
from nsqpy.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, Frame, FrameDecoder
from nsqpy.protocol.message import decode_message


class Wire:
    def __init__(self, address: str, magic: bytes = b"  V2", timeout: float = 5.0) -> None:
        host, port = address.rsplit(":", 1)
        host = host.strip("[]")  # "[::1]:4150"
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.decoder = FrameDecoder()
        self.pending: list[Frame] = []
        if magic:
            self.sock.sendall(magic)

    def recv_exactly(self, n: int) -> bytes:
        """Raw bytes off the socket, bypassing the frame decoder (for stream upgrades)."""
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by server")
            buf += chunk
        return buf

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def cmd(self, name: bytes, *params, body: bytes | None = None) -> None:
        self.send(encode_command(name, *params, body=body))

    def read_frame(self, skip_heartbeats: bool = True) -> Frame:
        while True:
            while self.pending:
                frame = self.pending.pop(0)
                if skip_heartbeats and frame.frame_type == FRAME_TYPE_RESPONSE and frame.data == b"_heartbeat_":
                    self.send(b"NOP\n")
                    continue
                return frame
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by server")
            self.pending.extend(self.decoder.feed(data))

    def expect_ok(self) -> None:
        frame = self.read_frame()
        assert frame == Frame(FRAME_TYPE_RESPONSE, b"OK"), frame

    def expect_error(self, text: bytes) -> None:
        frame = self.read_frame()
        assert frame.frame_type == FRAME_TYPE_ERROR, frame
        assert frame.data == text, frame.data

    def read_message(self):
        frame = self.read_frame()
        assert frame.frame_type == FRAME_TYPE_MESSAGE, frame
        return decode_message(frame.data)

    def identify(self, **fields) -> dict | bytes:
        self.cmd(b"IDENTIFY", body=orjson.dumps(fields))
        frame = self.read_frame()
        assert frame.frame_type == FRAME_TYPE_RESPONSE, frame
        if fields.get("feature_negotiation"):
            return orjson.loads(frame.data)
        return frame.data

    def pub(self, topic: str, body: bytes) -> None:
        self.cmd(b"PUB", topic, body=body)
        self.expect_ok()

    def mpub(self, topic: str, bodies: list[bytes]) -> None:
        self.send(encode_mpub(topic, bodies))
        self.expect_ok()

    def sub(self, topic: str, channel: str, rdy: int | None = None) -> None:
        self.cmd(b"SUB", topic, channel)
        self.expect_ok()
        if rdy is not None:
            self.cmd(b"RDY", str(rdy))

    def is_closed(self, timeout: float = 10.0) -> bool:
        """Whether the server closes the connection within ``timeout`` (what it sends before is
        kept in ``pending``). The default suits a close that must come; a test that asserts the
        connection stays open passes a short timeout of its own."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.pending.extend(self.decoder.feed(data))
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def nothing_arrived(self) -> bool:
        """Whether no byte and no close is waiting on the socket (or in ``pending``), without
        blocking: for
        an order (another client answered before this one), which a busy machine cannot upset
        the way it upsets a latency bound."""
        if self.pending:
            return False
        previous = self.sock.gettimeout()
        self.sock.setblocking(False)
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # a byte, or b"" for the close
            return False
        except BlockingIOError:
            return True
        finally:
            self.sock.settimeout(previous)

    def close(self) -> None:
        self.sock.close()


def drain(addr: str, topic: str, channel: str, expect: int, rdy: int = 2500, quiet: float = 2.0):
    """Consume and FIN until ``expect`` messages arrived or nothing came for ``quiet`` seconds."""
    w = Wire(addr)
    w.sub(topic, channel, rdy=rdy)
    w.sock.settimeout(quiet)
    got = []
    try:
        while len(got) < expect:
            m = w.read_message()
            got.append(m)
            w.cmd(b"FIN", m.id)
    except OSError:
        pass
    w.cmd(b"NOP")
    w.close()
    return got


def read_until_quiet(sock: socket.socket, wait: float, first: float = 0.0) -> bytes:
    """What the server sent until ``wait`` seconds passed without a byte, then ``<closed>`` or
    ``<open>``: a side-by-side test compares these bytes between upstream's server and ours.

    ``first`` (when longer than ``wait``) is how long the first byte may take, for a command that
    always has an answer: a busy machine can hold a server's answer past a short quiet window,
    and the transcript would then differ by timing, not by behaviour."""
    sock.settimeout(max(wait, first))
    got = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return got + b"<closed>"
            got += chunk
            sock.settimeout(wait)
    except socket.timeout:
        return got + b"<open>"


def pack_i32(n: int) -> bytes:
    return struct.pack(">i", n)
