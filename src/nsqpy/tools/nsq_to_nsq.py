"""``nsq_to_nsq``: consume topics and republish every message to other nsqd.

Each consumed message is PUBlished to one ``--destination-nsqd-tcp-address`` (``--mode``
``round-robin``, or ``hostpool``/``epsilon-greedy`` — the latter approximated by the host pool;
an unknown mode is round-robin, upstream's zero value) on ``--destination-topic`` (default: the
consumed topic's name). It is FINished once that nsqd answered OK and REQueued (go-nsq's default
delay, with backoff) when the publish failed, so nothing is acknowledged that did not arrive.

JSON filters (only when given): a body that is not a JSON object is dropped (FIN, logged);
``--require-json-field`` drops messages without the field, and with ``--require-json-value`` also
those whose value differs (a string compares as text, a number numerically when the flag's value
parses as one). A message missing the field while a value is required is an error (REQ with
backoff), as upstream. ``--whitelist-json-field`` republishes only those keys (re-encoded the way
Go's ``encoding/json`` does: sorted keys, integral numbers without a fraction, ``<>&`` escaped).

SIGINT/SIGTERM stop cleanly: no new deliveries, publishes in flight are answered and their
messages FINished or REQueued, then the producers close; exit 0.

Start-up and failures are upstream's (go-nsq's): argument errors are ``log.Fatal`` lines; the
producers connect on their first publish, so a destination that cannot be reached shows as
``Handler returned error (dial tcp ...) for msg ...`` and the message is requeued with backoff;
a source nsqd that cannot be reached at start is fatal, one lost later is retried every
``lookupd_poll_interval``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..client import Message, NSQError
from ..common.flags import Flag, FlagSet
from ..protocol.gojson import GoJSONError, dumps, loads
from ..protocol.names import is_valid_name
from . import common, golog, gonsq
from .common import fatal, repeated
from .goconfig import GoNsqConfig, go_nsq_flag
from .goerrors import GoError

PROGRAM = "nsq_to_nsq"


def build_flagset() -> FlagSet:
    fs = FlagSet(PROGRAM)
    F = Flag
    fs.add(
        F("version", False, "print version string", kind="bool"),
        F("channel", "nsq_to_nsq", "nsq channel"),
        F("destination-topic", "", "use this destination topic for all consumed topics (default is consumed topic name)"),
        F("max-in-flight", 200, "max number of messages to allow in flight", kind="int"),
        F("status-every", 250, "the # of requests between logging status (per destination), 0 disables", kind="int"),
        F("mode", "hostpool", "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy"),
        repeated("nsqd-tcp-address", "nsqd TCP address (may be given multiple times)"),
        repeated("destination-nsqd-tcp-address", "destination nsqd TCP address (may be given multiple times)"),
        repeated("lookupd-http-address", "lookupd HTTP address (may be given multiple times)"),
        repeated("topic", "nsq topic (may be given multiple times)"),
        repeated("whitelist-json-field", "for JSON messages: pass this field (may be given multiple times)"),
        F("require-json-field", "", "for JSON messages: only pass messages that contain this field"),
        F("require-json-value", "", "for JSON messages: only pass messages in which the required field has this value"),
        go_nsq_flag("consumer-opt", "option to passthrough to nsq.Consumer (may be given "
                    "multiple times, see http://godoc.org/github.com/nsqio/go-nsq#Config)"),
        go_nsq_flag("producer-opt", "option to passthrough to nsq.Producer (may be given "
                    "multiple times, see http://godoc.org/github.com/nsqio/go-nsq#Config)"),
    )
    return fs


# --- JSON filtering ---------------------------------------------------------------------------


class Backoff(Exception):
    """The message cannot be judged (required field missing): REQ it and slow down."""


class InvalidJSON(Exception):
    """The body is not a JSON object: dropped (FIN), as upstream does, with a log line."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class JSONFilter:
    def __init__(self, require_field: str, require_value: str, whitelist: list[str]) -> None:
        self.require_field = require_field
        self.require_value = require_value
        self.whitelist = whitelist
        self.required_number: float | None = None
        if require_value:
            try:
                self.required_number = float(require_value)
            except ValueError:
                pass

    @property
    def active(self) -> bool:
        return bool(self.require_field or self.whitelist)

    def passes(self, doc: dict[str, Any]) -> bool:
        """True to pass the message on, False to drop it; Backoff to requeue it."""
        if not self.require_field:
            return True
        if self.require_field not in doc:
            if self.require_value:
                raise Backoff("missing field to check required value")
            return False
        if not self.require_value:
            return True
        value = doc[self.require_field]
        if isinstance(value, str):
            return value == self.require_value
        if self.required_number is not None:
            return _is_number(value) and float(value) == self.required_number
        return False  # neither a string nor a comparable number

    def apply(self, body: bytes) -> bytes | None:
        """The body to republish, or None to drop the message; InvalidJSON for a body that is
        not a JSON object (Go's ``json.Unmarshal`` into a map refuses it), Backoff to REQ."""
        try:
            doc = loads(body)
        except GoJSONError:
            raise InvalidJSON() from None
        if doc is None:
            doc = {}  # Go decodes null into a nil map: no fields
        if not isinstance(doc, dict):
            raise InvalidJSON()
        if not self.passes(doc):
            return None
        if not self.whitelist:
            return body
        kept = {key: doc[key] for key in self.whitelist if key in doc}
        return go_json(kept)


def _float64(value: Any) -> Any:
    """Go decodes every JSON number into ``interface{}`` as a float64 (and writes an integral
    one without a fraction)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        return {k: _float64(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_float64(v) for v in value]
    return value


def go_json(value: Any) -> bytes:
    """``encoding/json.Marshal`` of a decoded ``map[string]interface{}``: keys sorted."""
    return dumps(_float64(value), sort_keys=True)


# --- republishing -----------------------------------------------------------------------------


class Republisher:
    def __init__(self, o: Any, producers: dict[str, gonsq.GoProducer]) -> None:
        self.producers = producers
        addresses = list(producers)
        if o.mode in ("hostpool", "epsilon-greedy"):
            self.selector: common.HostPool | common.RoundRobin = common.HostPool(addresses)
        else:
            self.selector = common.RoundRobin(addresses)  # upstream's zero value
        self.filter = JSONFilter(o.require_json_field, o.require_json_value, o.whitelist_json_field)
        every = o.status_every if len(addresses) > 1 else 0
        self.per_address = {a: common.TimerMetrics(every, f"[{a}]:") for a in addresses}
        self.aggregate = common.TimerMetrics(o.status_every, "[aggregate]:")

    def handler_for(self, destination: str, log: gonsq.ConsumerLog) -> Any:
        async def handle(msg: Message) -> None:
            await self.handle(msg, destination, log)

        return handle

    async def handle(self, msg: Message, destination: str, log: gonsq.ConsumerLog) -> None:
        body = msg.body
        if self.filter.active:
            try:
                filtered = self.filter.apply(body)
            except Backoff as err:
                golog.log(f"ERROR: {err}")
                log.handler_error(msg, "backoff")
                msg.requeue()
                return
            except InvalidJSON:
                golog.log(f"ERROR: Unable to decode json: {body.decode('utf-8', 'replace')}")
                return  # dropped: FIN
            if filtered is None:
                return  # dropped: FIN
            body = filtered
        started = time.monotonic()
        address = self.selector.get()
        try:
            answer = await self.producers[address].publish_async(destination, body)
        except (GoError, NSQError, OSError) as err:
            # go-nsq's PublishAsync failed at once (could not connect): the handler's error
            self.selector.mark(address, True)
            log.handler_error(msg, str(err))
            msg.requeue()
            return
        try:
            await answer
        except (GoError, NSQError, OSError):
            self.selector.mark(address, True)
            msg.requeue()
            return
        finally:
            self.per_address[address].status(started)
            self.aggregate.status(started)
        self.selector.mark(address, False)


async def _main(o: Any, consumer_cfg: GoNsqConfig, producer_cfg: GoNsqConfig) -> int:
    stop = asyncio.Event()
    common.on_signals(lambda _s: stop.set(), *common.TERM_SIGNALS)
    try:
        producer_options, refusal = common.connection_options(producer_cfg, PROGRAM)
    except common.StartError as err:
        fatal(f"failed creating producer {err}")
    producers = {addr: gonsq.GoProducer(addr, producer_options, refusal)
                 for addr in dict.fromkeys(o.destination_nsqd_tcp_address)}
    republisher = Republisher(o, producers)
    consumers: list[common.GoConsumer] = []
    for topic in o.topic:
        destination = o.destination_topic or topic
        try:
            consumer = common.GoConsumer(topic, o.channel, lambda m: None, consumer_cfg, PROGRAM,
                                         o.max_in_flight, concurrency=max(1, o.max_in_flight))
        except common.StartError as err:
            fatal(str(err))
        consumer.handler = republisher.handler_for(destination, consumer.log)
        consumers.append(consumer)
    try:
        for consumer in consumers:
            try:
                await consumer.connect(o.nsqd_tcp_address, [])
            except common.StartError as err:
                fatal(str(err))
        for consumer in consumers:
            try:
                await consumer.connect([], o.lookupd_http_address)
            except common.StartError as err:
                fatal(str(err))
        await stop.wait()
    finally:
        for consumer in consumers:
            await consumer.close()
        await asyncio.gather(*(p.close() for p in producers.values()), return_exceptions=True)
    return 0


def main(argv: list[str] | None = None) -> None:
    gonsq.disable_client_logging()
    o = common.parse_options(build_flagset(), argv)
    if o.version:
        print(common.version_string(PROGRAM))
        return
    if not o.topic or o.channel == "":
        fatal("--topic and --channel are required")
    for topic in o.topic:
        if not is_valid_name(topic):
            fatal("--topic is invalid")
    if o.destination_topic and not is_valid_name(o.destination_topic):
        fatal("--destination-topic is invalid")
    if not is_valid_name(o.channel):
        fatal("--channel is invalid")
    common.check_sources(o.nsqd_tcp_address, o.lookupd_http_address)
    if not o.destination_nsqd_tcp_address:
        fatal("--destination-nsqd-tcp-address required")
    consumer_cfg = common.go_config(o.consumer_opt, "consumer-opt")
    producer_cfg = common.go_config(o.producer_opt, "producer-opt")
    problem = producer_cfg.validate()
    if problem is not None:
        fatal(f"failed creating producer {problem}")
    common.run(lambda: _main(o, consumer_cfg, producer_cfg))


if __name__ == "__main__":
    main()
