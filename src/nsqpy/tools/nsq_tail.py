"""``nsq_tail``: print the messages of one or more topics to stdout, ``body\\n`` each.

The default channel is a random ephemeral one (``tail123456#ephemeral``), so tailing never
leaves a backlog behind. ``--n N`` exits after N messages: N counts lines printed over all
topics (upstream counts per topic, so with several topics it may print up to N per topic
before one of them reaches N); the Nth is FINished before exiting and anything delivered after
it is handed back (REQ) unprinted. ``--max-in-flight`` is lowered to N so nsqd does not send
much more than needed. SIGINT/SIGTERM stop cleanly (exit 0).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from typing import Any, Callable

from ..client import Consumer, Message
from ..common.flags import Flag, FlagSet
from ..protocol.names import is_valid_name
from . import common
from .common import fatal, repeated

PROGRAM = "nsq_tail"


def build_flagset() -> FlagSet:
    fs = FlagSet(PROGRAM)
    fs.add(
        Flag("version", False, "print version string", kind="bool"),
        Flag("channel", "", "NSQ channel"),
        Flag("max-in-flight", 200, "max number of messages to allow in flight", kind="int"),
        Flag("n", 0, "total messages to show (will wait if starved)", kind="int"),
        Flag("print-topic", False, "print topic name where message was received", kind="bool"),
        repeated("nsqd-tcp-address", "nsqd TCP address (may be given multiple times)"),
        repeated("lookupd-http-address", "lookupd HTTP address (may be given multiple times)"),
        repeated("topic", "NSQ topic (may be given multiple times)"),
        repeated("consumer-opt", "option to passthrough to nsq.Consumer (may be given multiple "
                 "times, http://godoc.org/github.com/nsqio/go-nsq#Config)"),
    )
    return fs


def random_channel() -> str:
    return "tail%06d#ephemeral" % (random.randrange(1 << 62) % 999999)


class Tail:
    """Writes bodies to stdout (one flush per loop turn) and counts them against ``--n``."""

    def __init__(self, total: int, print_topic: bool, out: Any, done: asyncio.Event) -> None:
        self.total = total
        self.print_topic = print_topic
        self.out = out
        self.done = done
        self.shown = 0
        self.broken = False
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()

    def handler(self, topic: str) -> Callable[[Message], None]:
        prefix = topic.encode() + b" | " if self.print_topic else b""

        def handle(msg: Message) -> None:
            if self.broken or (self.total and self.shown >= self.total):
                msg.requeue(0, backoff=False)  # not ours to show: give it back untouched
                return
            try:
                self.out.write(prefix + msg.body + b"\n")
            except (BrokenPipeError, ValueError, OSError):
                self._broken()
                msg.requeue(0, backoff=False)
                return
            self.shown += 1
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)
            if self.total and self.shown >= self.total:
                self.done.set()
            # returning FINishes the message

        return handle

    def _flush(self) -> None:
        self._flush_scheduled = False
        try:
            self.out.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._broken()

    def _broken(self) -> None:
        if not self.broken:
            self.broken = True
            self.done.set()


async def _main(o: Any, options: Any, go_cfg: common.GoNsqConfig, logger: Any) -> int:
    done = asyncio.Event()
    tail = Tail(o.n, o.print_topic, sys.stdout.buffer, done)
    common.on_signals(lambda _s: done.set(), *common.TERM_SIGNALS)
    consumer_kwargs = dict(go_cfg.consumer)
    consumer_kwargs["max_in_flight"] = o.max_in_flight
    consumers = []
    for topic in o.topic:
        logger.info("Adding consumer for topic: %s", topic)
        consumer = Consumer(topic, o.channel, tail.handler(topic),
                            nsqd_tcp_addresses=o.nsqd_tcp_address,
                            lookupd_http_addresses=o.lookupd_http_address,
                            options=options, **consumer_kwargs)
        consumers.append(consumer)
    for consumer in consumers:
        await consumer.start()
    await done.wait()
    await asyncio.gather(*(c.close() for c in consumers))
    tail._flush()
    if tail.broken:
        # stdout went away (e.g. `| head`): nothing left to say, and no flush error at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    o = common.Options(common.parse_flags(build_flagset(), sys.argv[1:] if argv is None else argv))
    if o.version:
        print(common.version_string(PROGRAM))
        return
    if o.channel == "":
        o.channel = random_channel()
    common.check_sources(PROGRAM, o.nsqd_tcp_address, o.lookupd_http_address)
    if not o.topic:
        fatal(PROGRAM, "--topic required")
    if o.n < 0:
        fatal(PROGRAM, "--n must not be negative")
    if 0 < o.n < o.max_in_flight:
        o.max_in_flight = o.n  # don't ask for more messages than we want
    logger = common.setup_logging(PROGRAM)
    go_cfg, options = common.build_go_config(PROGRAM, "consumer-opt", o.consumer_opt, logger)
    for name in [*o.topic, o.channel]:
        if not is_valid_name(name):
            fatal(PROGRAM, f"invalid topic/channel name {name!r}")
    common.run(lambda: _main(o, options, go_cfg, logger))


if __name__ == "__main__":
    main()
