"""Run one gnsq 1.0.2 scenario against an nsqd and print its observations as one JSON line.

Usage: python gnsq_scenarios.py <scenario> <nsqd tcp address> <topic>

gnsq needs gevent's monkey-patching, which must never leak into the pytest process, so
tests/interop/test_gnsq.py runs this file as a subprocess and asserts on the JSON. The script only
*observes* (bodies, attempts, ids, times, responses, errors); all judging happens in the test.
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import gevent  # noqa: E402
import gnsq  # noqa: E402
from gnsq.errors import NSQRequeueMessage  # noqa: E402

DEADLINE = 40.0


def now() -> float:
    return time.monotonic()


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = now() + timeout
    while not predicate():
        if now() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        gevent.sleep(0.02)


class Observer:
    """Collects what a gnsq Consumer/Producer saw: deliveries, responses, errors."""

    def __init__(self) -> None:
        self.deliveries: list[dict] = []
        self.heartbeats: list[float] = []
        self.errors: list[str] = []

    def record(self, message) -> dict:
        d = {"body": message.body.hex(), "attempts": message.attempts,
             "id": message.id.decode("ascii", "replace"), "t": now()}
        self.deliveries.append(d)
        return d

    def on_response(self, sender, response=None, **kwargs) -> None:
        if response == b"_heartbeat_":
            self.heartbeats.append(now())

    def on_error(self, sender, error=None, **kwargs) -> None:
        self.errors.append(repr(error))

    def attach(self, client) -> None:
        client.on_response.connect(self.on_response, weak=False)
        client.on_error.connect(self.on_error, weak=False)


def make_consumer(address: str, topic: str, handler, obs: Observer, **kwargs) -> gnsq.Consumer:
    consumer = gnsq.Consumer(topic, "ch", nsqd_tcp_addresses=[address], **kwargs)
    consumer.on_message.connect(handler, weak=False)
    obs.attach(consumer)
    consumer.start(block=False)
    return consumer


def make_producer(address: str, obs: Observer, **kwargs) -> gnsq.Producer:
    producer = gnsq.Producer([address], **kwargs)
    obs.attach(producer)
    producer.start()
    return producer


def stop(*clients) -> None:
    for client in clients:
        client.close()
    for client in clients:
        client.join(timeout=2)


def responses(values) -> list:
    return [v.decode() if isinstance(v, bytes) else repr(v) for v in values]


# --- scenarios --------------------------------------------------------------------------------

def scenario_pubsub(address: str, topic: str, out: dict) -> None:
    """Producer publish / multipublish / deferred publish; Consumer finishes everything."""
    cobs, pobs = Observer(), Observer()

    def handler(consumer, message):
        cobs.record(message)  # returning normally => gnsq sends FIN

    consumer = make_consumer(address, topic, handler, cobs, max_in_flight=10)
    producer = make_producer(address, pobs)
    res: list = []
    try:
        res.append(producer.publish(topic, b"probe"))
        wait_until(lambda: len(cobs.deliveries) == 1, 5, "the probe")
        big = os.urandom(100_000)
        res.append(producer.publish(topic, b"single"))
        res.append(producer.multipublish(topic, [b"m1", b"m2 \n\x00 binary", big]))
        out["dpub_at"] = now()
        res.append(producer.publish(topic, b"deferred", defer=1200))
        out["published_at"] = now()
        wait_until(lambda: len(cobs.deliveries) >= 6, 8, "all messages")
        gevent.sleep(0.5)
        out["expected"] = [b.hex() for b in (b"probe", b"single", b"m1", b"m2 \n\x00 binary", big, b"deferred")]
    finally:
        stop(consumer, producer)
        out.update(deliveries=cobs.deliveries, errors=cobs.errors + pobs.errors, responses=responses(res))


def scenario_requeue(address: str, topic: str, out: dict) -> None:
    """message.requeue(time_ms, backoff=False), NSQRequeueMessage and a handler exception."""
    cobs, pobs = Observer(), Observer()

    def handler(consumer, message):
        cobs.record(message)
        if message.attempts > 1:
            return
        if message.body == b"explicit":
            message.requeue(time_ms=1000, backoff=False)
        elif message.body == b"requeue-exc":
            raise NSQRequeueMessage(backoff=False)  # => REQ with requeue_delay (500ms)
        elif message.body == b"crash":
            raise ValueError("handler failure")  # => REQ with requeue_delay, plus backoff

    consumer = make_consumer(address, topic, handler, cobs, max_in_flight=3, requeue_delay=500,
                             max_backoff_duration=0.5)
    producer = make_producer(address, pobs)
    try:
        out["responses"] = responses([producer.multipublish(topic, [b"explicit", b"requeue-exc", b"crash"])])
        wait_until(lambda: len(cobs.deliveries) >= 6, 10, "3 messages delivered twice")
        gevent.sleep(0.8)
    finally:
        stop(consumer, producer)
        out.update(deliveries=cobs.deliveries, errors=cobs.errors + pobs.errors,
                   consumer_heartbeats=cobs.heartbeats, producer_heartbeats=pobs.heartbeats)


def scenario_touch(address: str, topic: str, out: dict) -> None:
    """nsqd runs with --msg-timeout=1s: a touched message survives 3s, an untouched one times out."""
    cobs, pobs = Observer(), Observer()
    out["touches"] = 0

    def keep_alive(message, started):
        while now() - started < 3.0:
            gevent.sleep(0.3)
            message.touch()
            out["touches"] += 1
        message.finish()

    def handler(consumer, message):
        cobs.record(message)
        message.enable_async()
        if message.body == b"touched":
            gevent.spawn(keep_alive, message, now())
        elif message.attempts > 1:
            message.finish()
        # first delivery of "untouched": never answered, nsqd must time it out

    consumer = make_consumer(address, topic, handler, cobs, max_in_flight=2)
    producer = make_producer(address, pobs)
    try:
        out["responses"] = responses([producer.multipublish(topic, [b"touched", b"untouched"])])
        wait_until(lambda: len(cobs.deliveries) >= 3, 6, "the untouched message's redelivery")
        gevent.sleep(3.0 + 1.6)  # touched is finished at ~3s; then another msg timeout passes
    finally:
        stop(consumer, producer)
        out.update(deliveries=cobs.deliveries, errors=cobs.errors + pobs.errors,
                   consumer_heartbeats=cobs.heartbeats, producer_heartbeats=pobs.heartbeats)


def scenario_heartbeat(address: str, topic: str, out: dict) -> None:
    """heartbeat_interval=1s; both clients idle for 4.5s, then the same connections still work."""
    cobs, pobs = Observer(), Observer()

    def handler(consumer, message):
        cobs.record(message)

    consumer = make_consumer(address, topic, handler, cobs, heartbeat_interval=1)
    producer = make_producer(address, pobs, heartbeat_interval=1)
    try:
        out["responses"] = responses([producer.publish(topic, b"before")])
        wait_until(lambda: len(cobs.deliveries) == 1, 5, "the first message")
        out["idle_from"] = now()
        gevent.sleep(4.5)
        out["idle_to"] = now()
        out["responses"] += responses([producer.publish(topic, b"after")])
        wait_until(lambda: len(cobs.deliveries) == 2, 5, "the message after the idle period")
    finally:
        stop(consumer, producer)
        out.update(deliveries=cobs.deliveries, errors=cobs.errors + pobs.errors,
                   consumer_heartbeats=cobs.heartbeats, producer_heartbeats=pobs.heartbeats)


def _raw_request(conn, send) -> str:
    """Send one PUB/MPUB/DPUB on a bare NsqdTCPClient and return its response (heartbeats skipped)."""
    send()
    while True:
        frame, data = conn.read_response()
        if frame == gnsq.protocol.FRAME_TYPE_RESPONSE and data == b"_heartbeat_":
            continue  # NsqdTCPClient already answered it with NOP
        return data.decode() if isinstance(data, bytes) else repr(data)


def _compression(address: str, topic: str, out: dict, codec: str) -> None:
    """Consumer (server->client compressed) and publisher (client->server compressed).

    The publisher is gnsq's own NsqdTCPClient, not gnsq.Producer: gnsq 1.0.2's Producer cannot
    negotiate compression with any nsqd. The ``OK`` nsqd sends after the snappy/deflate upgrade
    reaches ``Producer.handle_response`` before ``Producer._response_queues[conn]`` exists, so
    ``Producer.start()`` dies with ``KeyError: <gnsq.nsqd.NsqdTCPClient ...>`` (producer.py:214).
    """
    cobs, pobs = Observer(), Observer()
    kwargs = {codec: True, "heartbeat_interval": 1}
    if codec == "deflate":
        kwargs["deflate_level"] = 9  # above --max-deflate-level (6): nsqd must clamp

    def handler(consumer, message):
        cobs.record(message)
        if message.body == b"small-3" and message.attempts == 1:
            message.requeue(time_ms=0, backoff=False)

    rnd = os.urandom(120_000)
    bodies = [f"small-{i}".encode() for i in range(100)] + [b"abc" * 40_000, rnd, b"\x00" * 500]
    consumer = make_consumer(address, topic, handler, cobs, max_in_flight=25, **kwargs)
    host, port = address.rsplit(":", 1)
    pub = gnsq.NsqdTCPClient(host, int(port), **kwargs)
    pobs.attach(pub)
    listener = None
    try:
        pub.connect()
        ident = pub.identify()
        out["identify"] = {k: ident.get(k) for k in ("snappy", "deflate", "deflate_level", "msg_timeout")}
        wait_until(lambda: consumer._connections, 5, "the consumer connection")
        res = [_raw_request(pub, lambda: pub.multipublish(topic, bodies[:60]))]
        for body in bodies[60:]:
            res.append(_raw_request(pub, lambda: pub.publish(topic, body)))
        res.append(_raw_request(pub, lambda: pub.publish(topic, b"deferred", defer=300)))
        out["responses"] = res
        listener = gevent.spawn(pub.listen)  # keep answering heartbeats while idle
        wait_until(lambda: len(cobs.deliveries) >= len(bodies) + 2, 15, "all messages")
        gevent.sleep(2.5)  # > --msg-timeout: a FIN nsqd could not decode would cause a redelivery
        conns = list(consumer._connections) + [pub]
        out["stream_sockets"] = [type(c.stream.socket).__name__ for c in conns]
        out["connected"] = [c.is_connected for c in conns]
        out["expected"] = [b.hex() for b in bodies + [b"small-3", b"deferred"]]
    finally:
        stop(consumer)
        if listener is not None:
            listener.kill()
        pub.close_stream()
        out.update(deliveries=cobs.deliveries, errors=cobs.errors + pobs.errors,
                   consumer_heartbeats=cobs.heartbeats, producer_heartbeats=pobs.heartbeats)


def scenario_snappy(address: str, topic: str, out: dict) -> None:
    _compression(address, topic, out, "snappy")


def scenario_deflate(address: str, topic: str, out: dict) -> None:
    _compression(address, topic, out, "deflate")


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")}


def main() -> None:
    scenario, address, topic = sys.argv[1:4]
    result: dict = {"ok": False}
    try:
        with gevent.Timeout(DEADLINE):
            SCENARIOS[scenario](address, topic, result)
        result["ok"] = True
    except BaseException as err:  # report, don't hang: the test shows this with what was observed
        result.update(error=repr(err), traceback=traceback.format_exc())
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
