"""``nsq_tail``: print the messages of one or more topics to stdout, ``body\\n`` each.

The default channel is a random ephemeral one (``tail123456#ephemeral``), so tailing never
leaves a backlog behind. ``--n N`` (N > 0) exits after N messages: N counts lines printed over all
topics (upstream counts per topic, so with several topics it may print up to N per topic
before one of them reaches N); the Nth is FINished before exiting and anything delivered after
it is handed back (REQ) unprinted, where upstream exits leaving them in flight until their
timeout. ``--max-in-flight`` is lowered to N so nsqd does not send much more than needed.
SIGINT/SIGTERM stop cleanly (exit 0). When stdout goes away (``nsq_tail ... | head``) the
messages in flight are handed back, then the process ends by SIGPIPE as Go's does.

Start-up and failures are upstream's: ``--topic required``-style lines and exit 1, each
consumer connected in turn (an nsqd that cannot be reached at start is fatal), go-nsq's lines
on stderr (:mod:`nsqpy.tools.gonsq`).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from typing import Any, Callable

from ..client import Message
from ..common.flags import Flag, FlagSet
from . import common, golog, gonsq, history
from .common import fatal, repeated
from .goconfig import GoNsqConfig, go_nsq_flag

PROGRAM = "nsq_tail"
#: --from then live: a live message may have been published this long before we subscribed
OVERLAP_NS = 60 * 1_000_000_000
#: live messages held during a long replay are TOUCHed this often (nsqd's msg-timeout is >= 1 s,
#: 60 s by default)
TOUCH_HELD_S = 10.0


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
        go_nsq_flag("consumer-opt", "option to passthrough to nsq.Consumer (may be given "
                    "multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)"),
        *history.flags("print the topic's retained messages from this point first, then the live ones",
                       "with --from: stop at this point instead of going on with the live "
                       "messages (default: go on)",
                       "; alone, it also gives the live messages, from the TCP port nsqd's /info names"),
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
        self.reached = False  # --n messages shown
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()
        #: with --from, live messages delivered while the history is printed (None otherwise)
        self.held: list[tuple[str, bytes, Message]] | None = None
        #: with --from, per topic, the timestamps the history printed on every nsqd read: a live
        #: message inside them was printed already (each nsqd logs what it accepts before any
        #: channel gets it, in time order), however old it is: a topic that had no channel hands
        #: its whole backlog to ours, as live messages
        self.printed: dict[str, tuple[int, int]] = {}

    def handler(self, topic: str) -> Callable[[Message], None]:
        prefix = topic.encode() + b" | " if self.print_topic else b""

        def handle(msg: Message) -> None:
            if self.held is not None:  # --from: history first; live messages wait (unanswered)
                msg.disable_auto_response()
                self.held.append((topic, prefix, msg))
                return
            if not self.was_printed(topic, msg) and not self.show(prefix, msg.body):
                msg.requeue(0, backoff=False)  # not ours to show: give it back untouched
            # returning FINishes the message

        return handle

    def was_printed(self, topic: str, msg: Message) -> bool:
        span = self.printed.get(topic)
        return span is not None and span[0] <= msg.timestamp <= span[1]

    def show(self, prefix: bytes, body: bytes) -> bool:
        """Print one message; False when it is not to be shown (--n reached, stdout gone)."""
        if self.broken or (self.total and self.shown >= self.total):
            return False
        try:
            self.out.write(prefix + body + b"\n")
        except (BrokenPipeError, ValueError, OSError):
            self._broken()
            return False
        self.shown += 1
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        if self.total and self.shown >= self.total:
            self.reached = True
            self.done.set()
        return True

    async def replay(self, sources: dict[str, list[str]], start: Any, end: Any, live: bool,
                     secret: str | None) -> None:
        """--from: print each topic's history (from the nsqd ``sources`` names for it), then
        (``live``) the live messages held meanwhile, without those the history already showed
        (same id)."""
        recent: set[bytes] = set()
        since = time.time_ns() - OVERLAP_NS  # published while we subscribed: deduped by id
        touched = time.monotonic()
        async with common.http_session(5.0, 3600.0) as session:
            for topic, bases in sources.items():
                prefix = topic.encode() + b" | " if self.print_topic else b""
                spans = []  # (oldest, newest) printed, per nsqd
                for base in bases:
                    if self.done.is_set():
                        break
                    oldest, newest = 1 << 63, -1
                    async for batch in history.read(session, [base], topic, start, end, secret):
                        for msg in batch:
                            if not self.show(prefix, msg.body):
                                break
                            if live:  # what the live messages are checked against
                                ts = msg.timestamp
                                if ts < oldest:
                                    oldest = ts
                                if ts > newest:
                                    newest = ts
                                if ts >= since:
                                    recent.add(msg.id)
                        if self.done.is_set():
                            break
                        if self.held and time.monotonic() - touched > TOUCH_HELD_S:
                            touched = time.monotonic()  # keep what waits ours past its msg_timeout
                            for _topic, _prefix, held_msg in self.held:
                                held_msg.touch()
                        await asyncio.sleep(0)  # let heartbeats and the flush run
                    spans.append((oldest, newest))
                # a live message can come from any of them: the span all of them printed
                lo, hi = max((s[0] for s in spans), default=1), min((s[1] for s in spans), default=0)
                if lo <= hi:
                    self.printed[topic] = (lo, hi)
        held, self.held = self.held or [], None
        for topic, prefix, msg in held:
            if msg.id in recent or self.was_printed(topic, msg) or self.show(prefix, msg.body):
                msg.finish()
            else:
                msg.requeue(0, backoff=False)
        if not live:
            self.done.set()

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


async def _main(o: Any, cfg: GoNsqConfig) -> int:
    done = asyncio.Event()
    tail = Tail(max(o.n, 0), o.print_topic, sys.stdout.buffer, done)
    common.on_signals(lambda _s: done.set(), *common.TERM_SIGNALS)
    consumers: list[common.GoConsumer] = []
    replay = o.replay
    live = replay is None or not getattr(o, "to", "")
    secret = cfg.conn.get("auth_secret")
    sources: dict[str, list[str]] = {}
    if replay is not None or o.follow_http:
        async with common.http_session(5.0, 60.0) as session:
            if replay is not None:  # before any SUB, which would make a mistyped topic
                for topic in o.topic:
                    sources[topic] = await history.holders(session, o, topic, *replay, secret)
            if o.follow_http and live:
                o.nsqd_tcp_address = await history.follow_addresses(session, o)
    if replay is not None and live:
        tail.held = []  # subscribe first, so nothing published during the replay is missed
    for topic in o.topic if live else ():
        golog.log(f"Adding consumer for topic: {topic}")
        try:
            consumer = common.GoConsumer(topic, o.channel, tail.handler(topic), cfg, PROGRAM,
                                         o.max_in_flight)
            consumers.append(consumer)
            await consumer.connect(o.nsqd_tcp_address, o.lookupd_http_address)
        except common.StartError as err:
            fatal(str(err))
    if replay is not None:
        await tail.replay(sources, replay[0], replay[1], live, secret)
    await done.wait()
    if tail.broken or tail.reached:
        # upstream exits on the spot here, saying nothing more: hand back what is in flight
        # quietly, then go the same way
        await asyncio.gather(*(c.abandon() for c in consumers))
    else:
        for consumer in consumers:
            await consumer.close()
    tail._flush()
    if tail.broken:
        golog.die_of_sigpipe()
    return 0


def main(argv: list[str] | None = None) -> None:
    gonsq.disable_client_logging()
    o = common.parse_options(build_flagset(), argv)
    if o.version:
        print(common.version_string(PROGRAM))
        return
    if o.channel == "":
        o.channel = random_channel()
    o.replay = history.points(o)  # --from/--to checked first: they decide which sources are needed
    # given only --nsqd-http-address, the live messages come from the TCP port its /info names
    o.follow_http = bool(o.nsqd_http_address and not o.nsqd_tcp_address and not o.lookupd_http_address)
    if not (o.replay is not None and getattr(o, "to", "")) and not o.follow_http:
        common.check_sources(o.nsqd_tcp_address, o.lookupd_http_address)
    if not o.topic:
        fatal("--topic required")
    if 0 < o.n < o.max_in_flight:
        o.max_in_flight = o.n  # don't ask for more messages than we want
    cfg = common.go_config(o.consumer_opt, "consumer-opt")
    common.run(lambda: _main(o, cfg))


if __name__ == "__main__":
    main()
