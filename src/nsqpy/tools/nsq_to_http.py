"""``nsq_to_http``: deliver each message of a topic/channel as an HTTP request.

``--post URL`` sends the body as the request body (``--content-type``), ``--get URL`` replaces
the one ``%s`` in the URL with the url-escaped body (Go's ``url.QueryEscape``: spaces become
``+``). Success is a 2xx answer for POST and exactly 200 for GET; anything else (or a network
error or timeout) REQueues the message with go-nsq's default delay and backs the consumer off.
Up to ``--n`` requests run at once. ``--sample`` FINishes a share of messages without sending.

``--mode`` with several URLs: ``round-robin``; ``hostpool`` (a URL that fails is skipped for a
while, see :class:`~nsqpy.tools.common.HostPool`); ``epsilon-greedy`` is approximated by the same
host pool (no response-time weighting); any other value sends every message to **all** URLs, in
order, stopping at the first failure (so a retry repeats the ones that succeeded, as upstream).

Only the ``%s`` is substituted in a GET URL: other ``%`` sequences (``%20``) are left alone,
where upstream's ``Sprintf`` would mangle them. SIGINT/SIGTERM stop cleanly: no new deliveries,
requests in flight finish and are answered, exit 0.

Start-up and failures are upstream's (go-nsq's): argument errors are ``log.Fatal`` lines, an
nsqd that cannot be reached at start is fatal, one lost later is retried every
``lookupd_poll_interval``; a failed request is go-nsq's ``Handler returned error (...)`` line.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any
from urllib.parse import quote_plus

import aiohttp
from yarl import URL

from .. import NSQ_COMPAT_VERSION
from ..client import Message
from ..common.flags import Flag, FlagSet
from ..common.gotls import shared_context
from . import common, goerrors, gonsq
from .common import fatal, repeated
from .goconfig import GoNsqConfig, go_nsq_flag

PROGRAM = "nsq_to_http"
DEFAULT_CONTENT_TYPE = "application/octet-stream"


def build_flagset() -> FlagSet:
    fs = FlagSet(PROGRAM)
    F = Flag
    fs.add(
        F("version", False, "print version string", kind="bool"),
        F("topic", "", "nsq topic"),
        F("channel", "nsq_to_http", "nsq channel"),
        F("max-in-flight", 200, "max number of messages to allow in flight", kind="int"),
        F("n", 100, "number of concurrent publishers", kind="int"),
        F("mode", "hostpool", "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy"),
        F("sample", 1.0, "% of messages to publish (float b/w 0 -> 1)", kind="float"),
        F("http-client-connect-timeout", 2.0, "timeout for HTTP connect", kind="duration"),
        F("http-client-request-timeout", 20.0, "timeout for HTTP request", kind="duration"),
        F("status-every", 250, "the # of requests between logging status (per handler), 0 disables", kind="int"),
        F("content-type", DEFAULT_CONTENT_TYPE, "the Content-Type used for POST requests"),
        repeated("post", "HTTP address to make a POST request to.  data will be in the body (may be given multiple times)"),
        repeated("header", "Custom header for HTTP requests (may be given multiple times)"),
        repeated("get", "HTTP address to make a GET request to. '%s' will be printf replaced with data (may be given multiple times)"),
        repeated("nsqd-tcp-address", "nsqd TCP address (may be given multiple times)"),
        repeated("lookupd-http-address", "lookupd HTTP address (may be given multiple times)"),
        go_nsq_flag("consumer-opt", "option to passthrough to nsq.Consumer (may be given "
                    "multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)"),
    )
    return fs


def parse_custom_headers(values: list[str]) -> dict[str, str]:
    """``["X-Key: value"]`` → ``{"X-Key": "value"}``; ValueError for a malformed one."""
    headers: dict[str, str] = {}
    for text in values:
        key, sep, value = text.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ValueError(f"invalid header: {text!r}")
        headers[key] = value
    return headers


def get_url(template: str, body: bytes) -> URL:
    """The GET URL, sent exactly as built (yarl would otherwise re-normalise ``%2F`` to ``/``)."""
    return URL(template.replace("%s", quote_plus(body), 1), encoded=True)


class RequestFailed(Exception):
    pass


class HTTPPublisher:
    """Turns one message into the request(s) ``--mode`` asks for."""

    def __init__(self, o: Any, session: aiohttp.ClientSession, headers: dict[str, str]) -> None:
        self.session = session
        self.sample = o.sample
        self.use_get = bool(o.get)
        self.addresses: list[str] = list(o.get or o.post)
        self.headers = headers
        self.log: gonsq.ConsumerLog | None = None
        if o.mode == "round-robin":
            self.selector: common.HostPool | common.RoundRobin | None = common.RoundRobin(self.addresses)
        elif o.mode in ("hostpool", "epsilon-greedy"):
            self.selector = common.HostPool(self.addresses)
        else:
            self.selector = None  # upstream's ModeAll: every address
        every = o.status_every if len(self.addresses) > 1 else 0
        self.per_address = {a: common.TimerMetrics(every, f"[{a}]:") for a in self.addresses}
        self.aggregate = common.TimerMetrics(o.status_every, "[aggregate]:")

    async def request(self, address: str, body: bytes) -> None:
        url: URL | str = get_url(address, body) if self.use_get else address
        try:
            if self.use_get:
                async with self.session.get(url, headers=self.headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RequestFailed(f"got status code {resp.status}")
            else:
                async with self.session.post(url, data=body, headers=self.headers) as resp:
                    await resp.read()
                    if not 200 <= resp.status < 300:
                        raise RequestFailed(f"got status code {resp.status}")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as err:
            method = "GET" if self.use_get else "POST"
            raise RequestFailed(goerrors.http_error_text(method, str(url), err)) from None

    async def handle(self, msg: Message) -> None:
        if self.sample < 1.0 and random.random() > self.sample:
            return  # sampled out: FIN
        started = time.monotonic()
        try:
            if self.selector is None:
                for address in self.addresses:
                    t0 = time.monotonic()
                    await self.request(address, msg.body)
                    self.per_address[address].status(t0)
            else:
                address = self.selector.get()
                try:
                    await self.request(address, msg.body)
                except RequestFailed:
                    self.selector.mark(address, True)
                    raise
                self.selector.mark(address, False)
                self.per_address[address].status(started)
        except RequestFailed as err:
            if self.log is not None:
                self.log.handler_error(msg, str(err))
            msg.requeue()  # go-nsq's default delay, with backoff
            return
        self.aggregate.status(started)


async def _main(o: Any, cfg: GoNsqConfig, headers: dict[str, str]) -> int:
    stop = asyncio.Event()
    common.on_signals(lambda _s: stop.set(), *common.TERM_SIGNALS)
    headers = {"User-Agent": f"nsq_to_http v{NSQ_COMPAT_VERSION}", **headers}
    if o.post:
        headers.setdefault("Content-Type", o.content_type)
    timeout = aiohttp.ClientTimeout(total=o.http_client_request_timeout,
                                    sock_connect=o.http_client_connect_timeout)
    connector = aiohttp.TCPConnector(limit=max(1, o.n), ssl=shared_context())  # as Go verifies
    async with aiohttp.ClientSession(timeout=timeout, connector=connector,
                                     skip_auto_headers=("Content-Type",)) as session:
        try:
            consumer = common.GoConsumer(o.topic, o.channel, lambda m: None, cfg, PROGRAM,
                                         o.max_in_flight, concurrency=max(1, o.n))
        except common.StartError as err:
            fatal(str(err))
        publisher = HTTPPublisher(o, session, headers)
        publisher.log = consumer.log
        consumer.handler = publisher.handle
        if o.n < 1:
            fatal("no handlers")  # go-nsq refuses to connect a consumer without handlers
        try:
            await consumer.connect(o.nsqd_tcp_address, o.lookupd_http_address)
        except common.StartError as err:
            fatal(str(err))
        await stop.wait()
        await consumer.close()
    return 0


def main(argv: list[str] | None = None) -> None:
    gonsq.disable_client_logging()
    o = common.parse_options(build_flagset(), argv)
    if o.version:
        print(common.version_string(PROGRAM))
        return
    headers: dict[str, str] = {}
    if o.header:
        try:
            headers = parse_custom_headers(o.header)
        except ValueError:
            fatal("--header value format should be 'key=value'")  # sic: upstream's words
    if o.topic == "" or o.channel == "":
        fatal("--topic and --channel are required")
    if o.content_type != DEFAULT_CONTENT_TYPE:
        if not o.post:
            fatal("--content-type only used with --post")
        if not o.content_type:
            fatal("--content-type requires a value when used")
    common.check_sources(o.nsqd_tcp_address, o.lookupd_http_address)
    if not o.get and not o.post:
        fatal("--get or --post required")
    if o.get and o.post:
        fatal("use --get or --post not both")
    for url in o.get:
        if url.count("%s") != 1:
            fatal("invalid GET address - must be a printf string")
    if not 0.0 <= o.sample <= 1.0:
        fatal("ERROR: --sample must be between 0.0 and 1.0")
    cfg = common.go_config(o.consumer_opt, "consumer-opt")
    common.run(lambda: _main(o, cfg, headers))


if __name__ == "__main__":
    main()
