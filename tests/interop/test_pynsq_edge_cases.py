"""pynsq 0.9.1 against our nsqd: error paths, sampling, disconnects and the max-msg-timeout cap.

Every expectation here is upstream nsqd 1.3.0 behaviour (reference §1.3, nsqd/protocol_v2.go,
nsqd/channel.go); a failure means our nsqd differs from what NSQ clients see on a real nsqd.
"""

from __future__ import annotations

import asyncio

import pytest

from helpers.servers import unique_name
from interop.support import assert_server_healthy, wait_until

pytest.importorskip("nsq")

import nsq  # noqa: E402

from interop.pynsq_support import Delivery, Reader, connected_writer, publish  # noqa: E402


@pytest.mark.timeout(30)
def test_fatal_error_reaches_writer_which_reconnects(nsqd_factory, tornado_run):
    """PUB over --max-msg-size: pynsq's callback gets the error frame text, nsqd closes the
    connection (fatal), and the Writer's reconnect gets a working connection again."""
    node = nsqd_factory("--max-msg-size=1000")
    topic = unique_name("pyfatal")

    async def main():
        writer = await connected_writer(node.tcp_address, reconnect_interval=0.3)
        try:
            first = next(iter(writer.conns.values()))
            result = await publish(writer, "pub", topic, b"x" * 2000)
            assert isinstance(result, nsq.Error), result
            assert b"E_BAD_MESSAGE PUB message too big 2000 > 1000" in result.args[0], result.args
            await wait_until(lambda: first.closed(), 5, "nsqd to close the connection")
            await wait_until(lambda: any(c.connected() for c in writer.conns.values()), 5, "reconnect")
            assert await publish(writer, "pub", topic, b"y" * 1000) == b"OK"
        finally:
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert_server_healthy(node)


@pytest.mark.timeout(30)
def test_duplicate_fin_is_nonfatal(nsqd, tornado_run):
    """A second FIN for a finished message gets E_FIN_FAILED, which is non-fatal: the same
    connection keeps receiving messages."""
    topic = unique_name("pydupfin")
    deliveries: list[Delivery] = []
    holder: dict = {}

    def handler(message):
        deliveries.append(Delivery(message))
        if message.body == b"first":
            message.finish()
            conn = next(iter(holder["reader"].conns.values()))
            conn.send(nsq.protocol.finish(message.id))  # the duplicate
            return None
        return True

    async def main():
        writer = await connected_writer(nsqd.tcp_address)
        reader = holder["reader"] = Reader(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address])
        try:
            assert await publish(writer, "pub", topic, b"first") == b"OK"
            await wait_until(lambda: reader.errors, 5, "the E_FIN_FAILED error frame")
            conn = next(iter(reader.conns.values()))
            [err] = reader.errors
            msg_id = deliveries[0].id
            msg_id = msg_id.decode() if isinstance(msg_id, bytes) else msg_id
            assert err.args[0] == f"E_FIN_FAILED FIN {msg_id} failed ID not in flight".encode(), err.args
            assert await publish(writer, "pub", topic, b"second") == b"OK"
            await wait_until(lambda: len(deliveries) == 2, 5, "a message after E_FIN_FAILED")
            assert conn.connected() and next(iter(reader.conns.values())) is conn
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert_server_healthy(nsqd)


@pytest.mark.timeout(30)
def test_touch_cannot_extend_past_max_msg_timeout(nsqd_factory, tornado_run):
    """TOUCH moves the deadline to now + msg_timeout but never past delivery + --max-msg-timeout:
    a message touched every 0.3s with msg timeout 1s still times out at ~2s."""
    node = nsqd_factory("--msg-timeout=1s", "--max-msg-timeout=2s")
    topic = unique_name("pymaxmsg")
    deliveries: list[Delivery] = []
    loop_holder: list = []

    def keep_touching(message):
        if message.has_responded() or len(deliveries) > 1:
            return  # redelivered: stop touching the first attempt
        message.touch()
        loop_holder[0].call_later(0.3, keep_touching, message)

    def handler(message):
        deliveries.append(Delivery(message))
        if message.attempts > 1:
            return True
        message.enable_async()
        keep_touching(message)
        return None

    async def main():
        loop_holder.append(asyncio.get_running_loop())
        writer = await connected_writer(node.tcp_address)
        reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address])
        try:
            assert await publish(writer, "pub", topic, b"long job") == b"OK"
            await wait_until(lambda: len(deliveries) >= 2, 6, "the timeout despite touches")
            first, second = deliveries[:2]
            assert (first.attempts, second.attempts) == (1, 2)
            assert 1.9 <= second.at - first.at <= 3.0, second.at - first.at
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert_server_healthy(node)


@pytest.mark.timeout(30)
def test_sample_rate_keeps_delivering_a_backlog(nsqd, tornado_run):
    """IDENTIFY sample_rate=50: upstream's messagePump drops each message with p=0.49 and goes on
    to the next one, so about half of a 200-message backlog is delivered (Binomial(200, .51)).

    BUG (our nsqd): Channel.dispatch() takes exactly ``RDY - in_flight`` messages and Channel._send
    silently drops the sampled-out ones without refilling; with nothing in flight no FIN ever
    re-triggers dispatch, so the consumer stalls with RDY 1, 0 in flight and a full queue."""
    topic = unique_name("pysample")
    deliveries: list[Delivery] = []

    def handler(message):
        deliveries.append(Delivery(message))
        return True

    async def main():
        writer = await connected_writer(nsqd.tcp_address)
        reader = Reader(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], sample_rate=50)
        try:
            await wait_until(lambda: reader.conns and next(iter(reader.conns.values())).last_rdy, 5,
                             "the reader's RDY")
            await asyncio.sleep(0.3)  # let nsqd process SUB + RDY before the burst
            assert await publish(writer, "mpub", topic, [b"m%d" % i for i in range(200)]) == b"OK"
            try:
                await wait_until(lambda: len(deliveries) >= 60, 8, "about half of 200 sampled messages")
            except AssertionError:
                raise AssertionError(f"sample_rate=50 consumer stalled after {len(deliveries)} of 200 "
                                     "messages (upstream delivers ~102)") from None
            await asyncio.sleep(1.0)
            assert 60 <= len(deliveries) <= 150, len(deliveries)
            assert len({d.body for d in deliveries}) == len(deliveries)  # dropped, not redelivered
        finally:
            reader.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert_server_healthy(nsqd)


@pytest.mark.timeout(30)
def test_disconnect_leaves_in_flight_messages_to_time_out(nsqd_factory, tornado_run):
    """A consumer that disconnects without answering: upstream nsqd does NOT requeue its in-flight
    messages (Channel.RemoveClient only forgets the client); they come back when the msg timeout
    expires (queueScanLoop), attempts 2 (reference §1.3.7; nsqio/nsq#137).

    BUG (our nsqd): Channel.remove_client() requeues the departed client's in-flight messages at
    once, so another consumer gets the message immediately instead of after --msg-timeout."""
    node = nsqd_factory("--msg-timeout=3s")
    topic = unique_name("pydisc")
    first: list[Delivery] = []
    second: list[Delivery] = []

    def abandon(message):
        first.append(Delivery(message))
        message.enable_async()  # never answered
        return None

    def finish(message):
        second.append(Delivery(message))
        return True

    async def main():
        writer = await connected_writer(node.tcp_address)
        reader_a = Reader(topic, "ch", abandon, nsqd_tcp_addresses=[node.tcp_address])
        reader_b = None
        try:
            assert await publish(writer, "pub", topic, b"abandoned") == b"OK"
            await wait_until(lambda: first, 5, "the first delivery")
            reader_a.close()
            await wait_until(lambda: not reader_a.conns, 5, "reader A to disconnect")
            reader_b = Reader(topic, "ch", finish, nsqd_tcp_addresses=[node.tcp_address])
            await wait_until(lambda: second, 6, "the redelivery after the msg timeout")
            gap = second[0].at - first[0].at
            assert second[0].body == b"abandoned" and second[0].attempts == 2
            assert gap >= 2.8, (f"redelivered {gap:.2f}s after the first delivery: nsqd requeued the "
                                "disconnected client's in-flight message instead of waiting for "
                                "--msg-timeout=3s")
        finally:
            reader_a.close()
            if reader_b is not None:
                reader_b.close()
            writer.close()
            await asyncio.sleep(0.1)

    tornado_run(main, 25)
    assert_server_healthy(node)
