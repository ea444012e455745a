"""``to_nsq``: publish stdin to a topic, one message per ``--delimiter``-separated chunk.

Every message is PUBlished to **every** ``--nsqd-tcp-address`` (as upstream). Empty chunks are
skipped. Publishes are pipelined (a bounded window of unanswered PUBs per nsqd, in input order
on each connection) instead of upstream's one round trip at a time; ``--rate N`` throttles to N
messages per second with up to one second of burst. SIGINT/SIGTERM stop reading, wait for the
publishes already sent, and exit 0.

Failures are upstream's (go-nsq's producer): each nsqd is connected at the first message for it
(so with no input nothing is dialled), and any failure is fatal at once, exit 1, with Go's
text: ``dial tcp 127.0.0.1:4150: connect: connection refused``, nsqd's ``E_BAD_TOPIC ...``, or
``not connected`` for a publish whose connection died before the answer. An nsqd that went away
between two messages is dialled again for the next one.

The last chunk, on purpose unlike upstream: upstream strips the last byte of every chunk
assuming it is the delimiter, so at end of input without a trailing delimiter it eats a real
byte (``printf 'a\\nb' | to_nsq`` publishes only ``a``). We strip only an actual delimiter; the
final chunk is published whole, except that with a delimiter other than newline one trailing
``\\n`` is dropped, so ``echo "one,two,three" | to_nsq -delimiter=","`` still publishes ``three``
as upstream's README shows.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections import deque
from typing import Any

from ..client import NSQError
from ..common.flags import Flag, FlagSet
from . import common, golog, gonsq
from .common import fatal, repeated
from .goconfig import GoNsqConfig, go_nsq_flag
from .goerrors import GoError

PROGRAM = "to_nsq"
WINDOW = 1024  # unanswered PUBs per nsqd before reading more input
READ_SIZE = 1 << 16


def build_flagset() -> FlagSet:
    fs = FlagSet(PROGRAM)
    fs.add(
        Flag("version", False, "print version string", kind="bool", hidden=True),  # not upstream's
        Flag("topic", "", "NSQ topic to publish to"),
        Flag("delimiter", "\n", "character to split input from stdin"),
        repeated("nsqd-tcp-address", "destination nsqd TCP address (may be given multiple times)"),
        go_nsq_flag("producer-opt", "option to passthrough to nsq.Producer (may be given "
                    "multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)"),
        Flag("rate", 0, "Throttle messages to n/second. 0 to disable", kind="int"),
    )
    return fs


def split_chunks(buf: bytearray, delim: int, scan_from: int = 0) -> list[bytes]:
    """Remove and return every complete (delimiter-terminated) chunk at the front of ``buf``,
    without their delimiters; what follows the last delimiter stays in ``buf``."""
    end = buf.rfind(delim, scan_from)
    if end < 0:
        return []
    complete = bytes(buf[:end])
    del buf[: end + 1]
    return complete.split(bytes((delim,)))


def final_chunk(rest: bytes, delim: int) -> bytes:
    """The input after the last delimiter (see the module docstring)."""
    if delim != 0x0A and rest.endswith(b"\n"):
        return rest[:-1]
    return rest


class TokenBucket:
    """``rate`` tokens per second, at most ``rate`` saved up (one second of burst)."""

    def __init__(self, rate: int) -> None:
        self.rate = float(rate)
        self.tokens = 1.0
        self.last = time.monotonic()

    async def take(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return
            await asyncio.sleep((1.0 - self.tokens) / self.rate)


class Publisher:
    """Sends each message to every producer, keeping a bounded window of unanswered PUBs.

    The first failure ends the program on the spot, as upstream's ``log.Fatal(err)`` does.
    """

    def __init__(self, topic: str, producers: list[gonsq.GoProducer]) -> None:
        self.topic = topic
        self.producers = producers
        self.window: deque[asyncio.Future[None]] = deque()
        self.count = 0

    async def publish(self, body: bytes) -> None:
        for producer in self.producers:
            try:
                answer = await producer.publish_async(self.topic, body, on_failure=_fatal)
            except (GoError, NSQError, OSError) as err:
                _fatal(err)
            self.window.append(answer)
        self.count += 1
        while len(self.window) > WINDOW * len(self.producers):
            await self.window.popleft()

    async def flush(self) -> None:
        while self.window:
            await self.window.popleft()


def _fatal(err: BaseException) -> None:
    fatal(str(err))


class StdinReader:
    """Reads a file descriptor on a daemon thread, a few chunks ahead of the loop.

    Not the loop's default executor: a read blocked on a quiet pipe would keep ``asyncio.run``
    from returning after SIGTERM; a daemon thread is simply abandoned at exit.
    """

    AHEAD = 4

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[bytes | OSError] = asyncio.Queue()
        self.slots = threading.Semaphore(self.AHEAD)
        threading.Thread(target=self._run, name="stdin", daemon=True).start()

    def _run(self) -> None:
        while True:
            self.slots.acquire()
            try:
                item: bytes | OSError = os.read(self.fd, READ_SIZE)
            except OSError as err:
                item = err
            try:
                self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
            except RuntimeError:  # the loop is gone
                return
            if not item or isinstance(item, OSError):
                return

    async def read(self) -> bytes:
        item = await self.queue.get()
        self.slots.release()
        if isinstance(item, OSError):
            raise item
        return item


async def read_and_publish(fd: int, delim: int, publisher: Publisher, bucket: TokenBucket | None,
                           stop: asyncio.Event) -> None:
    reader = StdinReader(fd)
    buf = bytearray()
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while True:
            read = asyncio.ensure_future(reader.read())
            await asyncio.wait([read, stopped], return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                read.cancel()
                return  # stopped by a signal
            chunk = read.result()
            if not chunk:
                break
            scan_from = len(buf)
            buf += chunk
            for body in split_chunks(buf, delim, scan_from):
                if stop.is_set():
                    return
                if body:
                    if bucket is not None:
                        await bucket.take()
                    await publisher.publish(body)
        body = final_chunk(bytes(buf), delim)
        if body and not stop.is_set():
            if bucket is not None:
                await bucket.take()
            await publisher.publish(body)
    finally:
        stopped.cancel()


async def _main(o: Any, cfg: GoNsqConfig) -> int:
    stop = asyncio.Event()
    common.on_signals(lambda _s: stop.set(), *common.TERM_SIGNALS)
    try:
        options, refusal = common.connection_options(cfg, PROGRAM)
    except common.StartError as err:
        fatal(f"failed to create nsq.Producer - {err}")
    producers = [gonsq.GoProducer(addr, options, refusal) for addr in dict.fromkeys(o.nsqd_tcp_address)]
    publisher = Publisher(o.topic, producers)
    bucket = None
    if o.rate >= 1:
        golog.log(f"Throttling messages rate to max:{o.rate}/second")
        bucket = TokenBucket(o.rate)
    try:
        await read_and_publish(sys.stdin.fileno(), o.delimiter.encode()[0], publisher, bucket, stop)
    except OSError as err:
        fatal(str(err))
    await publisher.flush()
    for producer in producers:
        await producer.stop()
    return 0


def main(argv: list[str] | None = None) -> None:
    gonsq.disable_client_logging()
    o = common.parse_options(build_flagset(), argv)
    if o.version:
        print(common.version_string(PROGRAM))
        return
    if not o.topic:
        fatal("--topic required")
    if len(o.delimiter.encode()) != 1:
        fatal("--delimiter must be a single byte")
    cfg = common.go_config(o.producer_opt, "producer-opt")
    problem = cfg.validate()
    if problem is not None and o.nsqd_tcp_address:
        fatal(f"failed to create nsq.Producer - {problem}")
    if not o.nsqd_tcp_address:
        fatal("--nsqd-tcp-address required")
    common.run(lambda: _main(o, cfg))


if __name__ == "__main__":
    main()
