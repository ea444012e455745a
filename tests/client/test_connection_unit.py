"""NSQConnection against scripted peers: the cases a real nsqd produces only by timing luck
(an upgrade's first compressed bytes arriving in the same read as the IDENTIFY answer, frames
cut anywhere, a fatal error in the middle of a pipeline)."""

from __future__ import annotations

import asyncio
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.client import ConnectionClosedError, MessageBatch, NSQConnection, NSQErrorResponse
from nsqpy.client.compression import DeflateCodec, SnappyCodec
from nsqpy.client.options import ConnectionOptions
from nsqpy.protocol.frames import encode_error, encode_response
from nsqpy.protocol.message import encode_message_frame

pytestmark = pytest.mark.timeout(30)


class FakeNsqd:
    """Reads commands, answers with a script. ``codec`` is switched on right after IDENTIFY."""

    def __init__(self, identify: dict, codec=None, fail_pub_at: int | None = None) -> None:
        self.identify = identify
        self.codec_factory = codec
        self.fail_pub_at = fail_pub_at
        self.commands: list[bytes] = []
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readexactly(4) == b"  V2"
        assert await reader.readline() == b"IDENTIFY\n"
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        self.client_identify = orjson.loads(await reader.readexactly(size))
        answer = encode_response(orjson.dumps(self.identify))
        codec = self.codec_factory() if self.codec_factory else None
        if codec is not None:
            # JSON in clear, then the OK already compressed, in a single write
            writer.write(answer + codec.encode(encode_response(b"OK") + encode_response(b"_heartbeat_")))
        else:
            writer.write(answer)
        await writer.drain()
        pending = b""
        pubs = 0

        async def read_some() -> bytes:
            data = await reader.read(65536)
            if not data:
                raise EOFError
            return codec.decode(data) if codec else data

        try:
            while True:
                while b"\n" not in pending:
                    pending += await read_some()
                line, _, pending = pending.partition(b"\n")
                self.commands.append(line)
                if line.startswith(b"PUB "):
                    while len(pending) < 4:
                        pending += await read_some()
                    size = struct.unpack(">i", pending[:4])[0]
                    while len(pending) < 4 + size:
                        pending += await read_some()
                    pending = pending[4 + size :]
                    pubs += 1
                    if pubs == self.fail_pub_at:
                        out = encode_error(b"E_BAD_TOPIC PUB topic name \"x\" is not valid")
                        writer.write(codec.encode(out) if codec else out)
                        await writer.drain()
                        writer.close()
                        return
                    out = encode_response(b"OK")
                    writer.write(codec.encode(out) if codec else out)
                elif line.startswith(b"FIN "):
                    out = encode_error(b"E_FIN_FAILED FIN " + line[4:] + b" failed ID not in flight")
                    writer.write(codec.encode(out) if codec else out)
        except (EOFError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.mark.parametrize("kind", ["snappy", "deflate"])
async def test_upgrade_bytes_in_same_read_as_identify_answer(kind):
    identify = {"max_rdy_count": 2500, kind: True, "deflate_level": 6}
    codec = SnappyCodec if kind == "snappy" else (lambda: DeflateCodec(6))
    fake = FakeNsqd(identify, codec)
    port = await fake.start()
    try:
        conn = NSQConnection("127.0.0.1", port, ConnectionOptions(**{kind: True}))
        resp = await conn.connect()
        assert resp[kind] is True
        assert fake.client_identify[kind] is True
        assert fake.client_identify["user_agent"].startswith("nsqpy/")
        await asyncio.gather(*(conn.publish("t", b"m%d" % i) for i in range(50)))
        await asyncio.sleep(0.05)
        assert fake.commands[0] == b"NOP"  # heartbeat answered, through the compressor
        assert sum(1 for c in fake.commands if c.startswith(b"PUB")) == 50
        conn.close()
        await conn.wait_closed()
    finally:
        await fake.stop()


async def test_fatal_error_mid_pipeline_marks_the_rest_unprocessed():
    fake = FakeNsqd({"max_rdy_count": 2500}, fail_pub_at=5)
    port = await fake.start()
    try:
        conn = NSQConnection("127.0.0.1", port)
        await conn.connect()
        results = await asyncio.gather(
            *(conn.publish("t", b"x") for i in range(10)), return_exceptions=True
        )
        assert results[:4] == [None] * 4
        assert isinstance(results[4], NSQErrorResponse) and results[4].code == "E_BAD_TOPIC"
        assert results[4].fatal
        for r in results[5:]:
            assert isinstance(r, ConnectionClosedError) and r.unprocessed
        await conn.wait_closed()
        assert isinstance(conn.close_reason, NSQErrorResponse)
    finally:
        await fake.stop()


async def test_non_fatal_error_does_not_consume_a_waiter():
    fake = FakeNsqd({"max_rdy_count": 2500})
    port = await fake.start()
    errors = []
    try:
        conn = NSQConnection("127.0.0.1", port, on_error=lambda c, e: errors.append(e))
        await conn.connect()
        conn.send(b"FIN 0123456789abcdef\n")
        await conn.publish("t", b"after a failed FIN")  # still gets its own OK
        assert [e.code for e in errors] == ["E_FIN_FAILED"]
        assert not errors[0].fatal
        conn.close()
    finally:
        await fake.stop()


class _NullTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []

    def write(self, data) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


frames = st.lists(
    st.one_of(
        st.tuples(st.just("msg"), st.binary(max_size=300), st.integers(1, 65535)),
        st.tuples(st.just("hb"), st.just(b""), st.just(0)),
    ),
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(items=frames, cuts=st.lists(st.integers(0, 10**5), max_size=15))
def test_frames_split_anywhere(items, cuts):
    """Per message (``on_message``) and per read (``on_messages``) alike."""
    for columns in (False, True):
        _frames_split_anywhere(items, cuts, columns)


def _frames_split_anywhere(items, cuts, columns: bool) -> None:
    async def run() -> None:
        got = []
        batches: list[MessageBatch] = []
        if columns:
            conn = NSQConnection("127.0.0.1", 1, on_messages=batches.append)
        else:
            conn = NSQConnection("127.0.0.1", 1, on_message=got.append)
        transport = _NullTransport()
        conn.connection_made(transport)
        stream = b""
        expected = []
        for i, (kind, body, attempts) in enumerate(items):
            if kind == "msg":
                msg_id = b"%016x" % i
                stream += encode_message_frame(msg_id, body, 1700000000000000000 + i, attempts)
                expected.append((msg_id, body, attempts))
            else:
                stream += encode_response(b"_heartbeat_")
        points = sorted({c % (len(stream) + 1) for c in cuts}) + [len(stream)]
        prev = 0
        for p in points:
            conn.data_received(stream[prev:p])
            prev = p
        if columns:
            assert all(len(b) for b in batches), "a read without messages hands over no batch"
            got = [(i, body, a) for b in batches for i, body, a in zip(b.ids, b.bodies, b.attempts)]
            assert got == expected
            assert [t for b in batches for t in b.timestamps] == [
                1700000000000000000 + i for i, (kind, _, _) in enumerate(items) if kind == "msg"]
        else:
            assert [(m.id, m.body, m.attempts) for m in got] == expected
        assert conn.in_flight == len(expected)
        await asyncio.sleep(0)
        nops = b"".join(transport.written).count(b"NOP\n")
        assert nops == sum(1 for k, _, _ in items if k == "hb")

    asyncio.run(run())


async def test_batch_answers_are_one_write_each_and_keep_in_flight():
    batches: list[MessageBatch] = []
    conn = NSQConnection("127.0.0.1", 1, on_messages=batches.append)
    transport = _NullTransport()
    conn.connection_made(transport)
    conn.data_received(b"".join(encode_message_frame(b"%016x" % i, b"b", 1, 1) for i in range(5)))
    (batch,) = batches
    assert conn.in_flight == 5
    head = batch.split(2)
    assert (head.ids, batch.ids) == ([b"%016x" % i for i in range(2)], [b"%016x" % i for i in range(2, 5)])
    conn.finish_ids(head.ids)
    batch.touch()
    conn.requeue_ids(batch.ids, 250)
    await asyncio.sleep(0)
    assert b"".join(transport.written) == (
        b"FIN 0000000000000000\nFIN 0000000000000001\n"
        b"TOUCH 0000000000000002\nTOUCH 0000000000000003\nTOUCH 0000000000000004\n"
        b"REQ 0000000000000002 250\nREQ 0000000000000003 250\nREQ 0000000000000004 250\n")
    assert conn.in_flight == 0


async def test_silent_peer_is_dropped_after_read_timeout():
    async def silent(reader, writer):
        await reader.readexactly(4)
        await reader.readline()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)
        writer.write(encode_response(orjson.dumps({"max_rdy_count": 10})))
        await asyncio.sleep(5)  # then nothing, not even heartbeats
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        conn = NSQConnection("127.0.0.1", port, ConnectionOptions(read_timeout=0.3))
        await conn.connect()
        assert conn.max_rdy_count == 10
        await asyncio.wait_for(conn.wait_closed(), 3)
        assert "nothing read" in str(conn.close_reason)
    finally:
        server.close()


async def test_connect_refused_and_timeout():
    from helpers.servers import free_port

    with pytest.raises(OSError):
        await NSQConnection("127.0.0.1", free_port()).connect()

    async def mute(reader, writer):
        try:
            await asyncio.sleep(3)
        except asyncio.CancelledError:
            pass

    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        conn = NSQConnection("127.0.0.1", port, ConnectionOptions(connect_timeout=0.3))
        with pytest.raises(ConnectionError):
            await conn.connect()
        await asyncio.wait_for(conn.wait_closed(), 1)
    finally:
        server.close()


def test_addresses():
    from nsqpy.client.addr import format_address, normalize, parse_address

    assert parse_address("127.0.0.1:4150") == ("127.0.0.1", 4150)
    assert parse_address("[::1]:4150") == ("::1", 4150)
    assert parse_address("host", 4150) == ("host", 4150)
    assert parse_address("::1", 4150) == ("::1", 4150)
    assert format_address("::1", 1) == "[::1]:1"
    assert normalize("localhost:4150") == "localhost:4150"
    for bad in ("host", "h:0", "h:x", "[::1"):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_option_validation_and_identify_body():
    body = ConnectionOptions(heartbeat_interval=None, output_buffer_size=None,
                             output_buffer_timeout=None, msg_timeout=2.5).identify_body()
    assert body["heartbeat_interval"] == -1
    assert body["output_buffer_size"] == -1 and body["output_buffer_timeout"] == -1
    assert body["msg_timeout"] == 2500 and body["feature_negotiation"] is True
    assert ConnectionOptions().identify_body()["msg_timeout"] == 0  # nsqd's default
    assert ConnectionOptions().requeue_delay(3) == 270.0
    assert ConnectionOptions().requeue_delay(100) == 900.0
    for bad in ({"snappy": True, "deflate": True}, {"sample_rate": 100}, {"deflate_level": 0}):
        with pytest.raises(ValueError):
            ConnectionOptions(**bad)
