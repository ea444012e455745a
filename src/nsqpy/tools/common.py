"""What the utilities share: flags parsed as Go's, the go-nsq consumer set-up, signals,
host selection, timings, lookupd/nsqd HTTP queries.

Upstream's utilities are Go programs: their flags stop at the first argument that is not one,
their errors are ``log.Fatal`` lines (:mod:`nsqpy.tools.golog`), their consumers are go-nsq's
(:mod:`nsqpy.tools.gonsq`, :mod:`nsqpy.tools.goconfig`). This module strings those together the
way each ``main`` of upstream's does.
"""

from __future__ import annotations

import asyncio
import math
import signal
import sys
import time
from typing import Any, Callable, Coroutine, NoReturn

import aiohttp
import orjson

from .. import NSQ_COMPAT_VERSION, __version__
from ..client import ConnectionOptions, Consumer, Message
from ..common.daemon import run as run_on_loop
from ..common.flags import Flag, FlagError, FlagSet
from ..common.gotls import shared_context
from ..protocol.names import is_valid_name
from . import goerrors, golog, gonsq
from .goconfig import GoNsqConfig, parse_go_nsq_options

GO_NSQ_ACCEPT = "application/vnd.nsq; version=1.0"


# --- identity -------------------------------------------------------------------------------


def user_agent(program: str) -> str:
    """What the tools send in IDENTIFY (upstream: ``nsq_to_file/1.3.0 go-nsq/1.1.0``)."""
    return f"{program}/{NSQ_COMPAT_VERSION} nsqpy/{__version__}"


# --- flags ----------------------------------------------------------------------------------


def _one(raw: str) -> list[str]:
    return [raw]


def repeated(name: str, help: str) -> Flag:
    """A flag that may be given several times, each value kept whole.

    Upstream's ``app.StringArray`` does not split on commas (a ``--get`` URL or a
    ``--consumer-opt=name,value`` has commas of its own), unlike nsqd's list flags.
    """
    return Flag(name, [], help, kind="list", parse=_one)


class Options:
    """Flag values as attributes (``opts.rotate_size``), writable for derived defaults."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # only reached for names no flag defined
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value


def version_string(program: str) -> str:
    """``nsq_tail v1.3.0``: upstream's utilities print no build line (its daemons do)."""
    return f"{program} v{NSQ_COMPAT_VERSION}"


def split_go_args(fs: FlagSet, argv: list[str]) -> tuple[list[str], list[str]]:
    """Go's flag package stops at the first argument that is not a flag (``-`` alone is one
    such, ``--`` ends the flags and is dropped): (the flags, the rest)."""
    known = fs.by_name()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv[:i], argv[i + 1 :]
        if not arg.startswith("-") or arg == "-":
            return argv[:i], argv[i:]
        name, eq, _ = arg[2:].partition("=") if arg.startswith("--") else arg[1:].partition("=")
        flag = known.get(name)
        takes_value = flag is not None and not (flag.kind == "bool" or flag.go_type == "")
        i += 2 if takes_value and not eq else 1
    return argv, []


def parse_flags(fs: FlagSet, argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Parse like Go's ``flag.ExitOnError``: ``-h`` prints usage and exits 0, a bad flag prints
    the error and the usage and exits 2. Returns the values and the arguments after the flags
    (upstream's utilities ignore those, except nsq_to_file)."""
    if fs.usage_name is None:
        fs.usage_name = sys.argv[0]  # Go's flag.CommandLine says "Usage of <os.Args[0]>:"
    flags, rest = split_go_args(fs, argv)
    try:
        values, _explicit, _positional = fs.parse(flags)
    except FlagError as err:
        print(str(err), file=sys.stderr)
        raise SystemExit(err.exit_code) from None
    return values, rest


def parse_options(fs: FlagSet, argv: list[str] | None) -> Options:
    """The flags of ``argv`` (default: the command line) as :class:`Options`."""
    values, _rest = parse_flags(fs, sys.argv[1:] if argv is None else argv)
    return Options(values)


fatal = golog.fatal


def check_sources(nsqd: list[str], lookupd: list[str], suffix: str = "") -> None:
    """Consumers need nsqd addresses or lookupd addresses, never both (upstream's rule)."""
    if not nsqd and not lookupd:
        fatal(f"--nsqd-tcp-address or --lookupd-http-address required{suffix}")
    if nsqd and lookupd:
        fatal("use --nsqd-tcp-address or --lookupd-http-address not both")


# --- go-nsq consumers ---------------------------------------------------------------------------


def go_config(values: list[str], flag_name: str, *, ignore_errors: bool = False) -> GoNsqConfig:
    """``--consumer-opt``/``--producer-opt`` values (checked while the flags were parsed)."""
    try:
        cfg = parse_go_nsq_options(values, flag_name, ignore_errors=ignore_errors)
    except FlagError as err:  # only reached for values no flag parse has seen
        print(str(err), file=sys.stderr)
        raise SystemExit(2) from None
    if cfg.no_effect:
        golog.log(f"WARNING: -{flag_name} {', '.join(sorted(set(cfg.no_effect)))} accepted "
                  "but has no effect in nsqpy")
    return cfg


class StartError(Exception):
    """go-nsq's ``NewConsumer``/``NewProducer`` or ``ConnectTo*`` failed: the text upstream's
    tools print."""


def connection_options(cfg: GoNsqConfig, program: str) -> tuple[ConnectionOptions, str | None]:
    """The client's options for go-nsq's config, and the text of nsqd's refusal when go-nsq
    would send an IDENTIFY that every nsqd refuses (``snappy`` and ``deflate`` both: the
    client will not build that, so the tools report nsqd's answer without dialling)."""
    try:
        return cfg.connection_options(user_agent(program)), None
    except OSError as err:  # TLS files that became unreadable since the flags were checked
        raise StartError(str(err)) from None
    except ValueError:
        if not (cfg.conn.get("snappy") and cfg.conn.get("deflate")):
            raise
    plain = GoNsqConfig(dict(cfg.conn, deflate=False), cfg.consumer, cfg.tls)
    return plain.connection_options(user_agent(program)), (
        "failed to IDENTIFY - E_IDENTIFY_FAILED cannot enable both deflate and snappy compression")


class GoConsumer:
    """A :class:`Consumer` made, connected and reporting the way go-nsq's is in upstream's tools.

    Making it is go-nsq's ``NewConsumer`` (config and names checked, StartError with
    go-nsq's text); :meth:`connect` is ``ConnectToNSQDs`` then ``ConnectToNSQLookupds``: the nsqd
    one at a time, the first that cannot be reached ends it, while a failing nsqlookupd is only
    logged. After that start a lost nsqd (given directly) is retried every
    ``lookupd_poll_interval`` exactly, one found through nsqlookupd when nsqlookupd lists it
    again, as go-nsq does.
    """

    def __init__(self, topic: str, channel: str, handler: Callable[[Message], Any],
                 cfg: GoNsqConfig, program: str, max_in_flight: int, **kwargs: Any) -> None:
        problem = cfg.validate(max_in_flight)
        if problem is None and not is_valid_name(topic):
            problem = "invalid topic name"
        if problem is None and not is_valid_name(channel):
            problem = "invalid channel name"
        if problem is not None:
            raise StartError(problem)
        self.topic = topic
        self.channel = channel
        self.handler = handler
        self.cfg = cfg
        self.options, self.refusal = connection_options(cfg, program)
        self.kwargs = {**cfg.consumer, "max_in_flight": max_in_flight, **kwargs}
        self.log = gonsq.ConsumerLog(topic, channel)
        self.consumer: Consumer | None = None

    async def connect(self, nsqd: list[str], lookupd: list[str]) -> None:
        reachable: list[str] = []
        refused: tuple[str | None, goerrors.GoError] | None = None
        for address in nsqd:
            if address in reachable:  # go-nsq refuses it before dialling
                refused = (None, goerrors.GoError("already connected"))
                break
            try:
                goerrors.check_dial_address(address)
            except goerrors.GoError as err:
                refused = (address, err)
                break
            if self.refusal is not None:  # what nsqd answers such an IDENTIFY
                refused = (address, goerrors.GoError(self.refusal))
                break
            reachable.append(address)
        if self.refusal is not None and lookupd:
            raise StartError(self.refusal)
        if reachable or lookupd:
            self.log.lookupd = bool(lookupd)
            poll = self.cfg.lookupd_poll_interval
            poller = None
            if lookupd:
                poller = gonsq.GoLookupdPoller(
                    lookupd, self.topic, self.log, auth_secret=self.options.auth_secret,
                    timeout=self.kwargs.get("lookupd_poll_timeout", 60.0))
            self.consumer = Consumer(
                self.topic, self.channel, self.handler, nsqd_tcp_addresses=reachable,
                lookupd_http_addresses=lookupd, hooks=self.log, lookupd_poller=poller,
                options=self.options, reconnect_interval=poll, max_reconnect_interval=poll,
                reconnect_jitter=0.0, **self.kwargs)
            try:
                await self.consumer.start(fail_fast=True)
            except Exception as err:
                raise StartError(goerrors.dial_error_text(err, self.log.last_address)) from None
        if refused is not None:
            if refused[0] is not None:
                self.log.connecting(refused[0])
            raise StartError(str(refused[1]))

    def is_starved(self) -> bool:
        return self.consumer is not None and self.consumer.is_starved()

    async def close(self) -> None:
        """go-nsq's ``Stop`` and wait for ``StopChan``."""
        if self.consumer is not None:
            await self.consumer.close()
        else:
            self.log.stopping()
            self.log.stopped()

    async def abandon(self) -> None:
        """Close without a word (a consumer whose start failed half-way)."""
        if self.consumer is not None:
            self.consumer.hooks = gonsq.ConsumerHooks()
            await self.consumer.close()


# --- running --------------------------------------------------------------------------------


def run(coro_factory: Callable[[], Coroutine[Any, Any, int]]) -> NoReturn:
    """Run the tool's main coroutine on a fresh loop and exit with the status it returns."""
    try:
        code = run_on_loop(coro_factory())
    except KeyboardInterrupt:
        code = 130
    raise SystemExit(code)


def on_signals(handler: Callable[[int], None], *signals: int) -> None:
    """Call ``handler(signum)`` on the running loop when one of ``signals`` arrives."""
    loop = asyncio.get_running_loop()
    for sig in signals:
        loop.add_signal_handler(sig, handler, sig)


TERM_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# --- choosing among destinations (--mode) ----------------------------------------------------


class HostPool:
    """go-hostpool's standard pool: round-robin over hosts not marked dead.

    A failed host is skipped for 30 s, then tried again; failing again doubles the wait (up to
    15 min). When every host is dead all are revived at once, so requests never stall.
    ``epsilon-greedy`` (which also weighs response times) is approximated by this pool.
    """

    INITIAL_RETRY = 30.0
    MAX_RETRY = 900.0

    def __init__(self, hosts: list[str], clock: Callable[[], float] = time.monotonic) -> None:
        if not hosts:
            raise ValueError("no hosts")
        self.hosts = list(hosts)
        self._clock = clock
        self._next = 0
        self._dead: dict[str, tuple[float, float, bool]] = {}  # host -> (retry_at, delay, retrying)

    def get(self) -> str:
        now = self._clock()
        n = len(self.hosts)
        for i in range(n):
            host = self.hosts[(self._next + i) % n]
            state = self._dead.get(host)
            if state is None:
                self._next = (self._next + i + 1) % n
                return host
            retry_at, delay, _ = state
            if now >= retry_at:
                self._dead[host] = (retry_at, delay, True)
                self._next = (self._next + i + 1) % n
                return host
        self._dead.clear()  # all down: give them all another chance
        return self.get()

    def mark(self, host: str, failed: bool) -> None:
        if not failed:
            self._dead.pop(host, None)
            return
        state = self._dead.get(host)
        if state is None:
            delay = self.INITIAL_RETRY
        else:
            delay = min(state[1] * 2, self.MAX_RETRY) if state[2] else state[1]
        self._dead[host] = (self._clock() + delay, delay, False)


class RoundRobin:
    def __init__(self, hosts: list[str]) -> None:
        self.hosts = list(hosts)
        self._counter = 0

    def get(self) -> str:
        self._counter += 1
        return self.hosts[self._counter % len(self.hosts)]

    def mark(self, host: str, failed: bool) -> None:
        pass


class TimerMetrics:
    """Logs request timings every ``status_every`` requests (bitly/timer_metrics' output).

    ``<prefix> finished 250 - 99th: 3.10ms - 95th: 2.05ms - avg: 1.20ms``; 0 disables.
    """

    def __init__(self, status_every: int, prefix: str,
                 log: Callable[[str], None] = golog.log) -> None:
        self.status_every = status_every
        self.prefix = prefix
        self.log = log
        self._timings: list[float] = []
        self._position = 0
        if 0 < status_every < 100:
            log("Warning: use more than 100 status values for accurate percentiles "
                f"(configured with {status_every})")

    def status(self, started: float) -> None:
        """Record one timing; the line comes at the first timing past each ``status_every``
        (a rolling window of the last ``status_every``), as timer_metrics prints it."""
        if self.status_every <= 0:
            return
        self._position += 1
        looped = self._position > self.status_every
        if looped:
            self._position = 1
        elapsed = time.monotonic() - started
        if self._position > len(self._timings):
            self._timings.append(elapsed)
        else:
            self._timings[self._position - 1] = elapsed
        if looped:
            self.log(self.format(sorted(self._timings)))

    def format(self, timings: list[float]) -> str:
        def pct(p: float) -> float:
            idx = min(int(math.ceil(p / 100.0 * len(timings) + 0.5)), len(timings) - 1)
            return timings[idx] if timings else 0.0

        avg = sum(timings) / len(timings) if timings else 0.0
        return (f"{self.prefix} finished {len(timings)} - 99th: {pct(99) * 1000:.2f}ms - "
                f"95th: {pct(95) * 1000:.2f}ms - avg: {avg * 1000:.2f}ms")


# --- HTTP queries to nsqlookupd / nsqd (upstream's clusterinfo) ------------------------------


class HTTPQueryError(Exception):
    """A failed query, worded as upstream's ``http_api``/``clusterinfo`` errors."""


class PartialQueryError(HTTPQueryError):
    """Some nodes answered, some did not (upstream's ``ErrList``, one error per line); the
    answers that came are in ``answers``."""

    def __init__(self, errors: list[HTTPQueryError], answers: list[Any]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.answers = answers


def http_base(address: str) -> str:
    """``127.0.0.1:4161`` → ``http://127.0.0.1:4161``; an address with a scheme is kept."""
    address = address.rstrip("/")
    return address if "://" in address else "http://" + address


def http_session(connect_timeout: float, request_timeout: float) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout),
        headers={"Accept": GO_NSQ_ACCEPT},
        connector=aiohttp.TCPConnector(ssl=shared_context()),  # https: verified as Go does
    )


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    """GET a v1 API endpoint (``http_api.GETV1``); anything but 200 with JSON is an
    HTTPQueryError with Go's text."""
    try:
        async with session.get(url) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise HTTPQueryError(goerrors.response_error_text(resp.status, resp.reason or "", body))
    except HTTPQueryError:
        raise
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as err:
        raise HTTPQueryError(goerrors.http_error_text("GET", url, err)) from None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise HTTPQueryError(str(err)) from None


def unwrap_v1(data: Any) -> Any:
    """An answer in nsqd/nsqlookupd's pre-1.0 envelope ``{status_code, data}`` unwrapped."""
    if isinstance(data, dict) and "status_code" in data and "data" in data:
        return data["data"]  # pre-1.0 envelope
    return data


async def query_all(session: aiohttp.ClientSession, urls: list[str], what: str) -> list[Any]:
    """GET every URL concurrently (clusterinfo's fan-out): the answers when all came;
    ``failed to query any <what>: ...`` when none did; PartialQueryError in between."""
    results = await asyncio.gather(*(get_json(session, u) for u in urls), return_exceptions=True)
    answers = [r for r in results if not isinstance(r, BaseException)]
    errors = [r for r in results if isinstance(r, BaseException)]
    for err in errors:
        if not isinstance(err, HTTPQueryError):
            raise err
    if len(errors) == len(urls):
        joined = "\n".join(str(e) for e in errors)
        raise HTTPQueryError(f"failed to query any {what}: {joined}")
    if errors:
        raise PartialQueryError(errors, [unwrap_v1(a) for a in answers])  # type: ignore[arg-type]
    return [unwrap_v1(a) for a in answers]


def topics_of(answers: list[Any]) -> list[str]:
    topics: set[str] = set()
    for data in answers:
        topics.update(t for t in (data or {}).get("topics") or () if isinstance(t, str))
    return sorted(topics)


async def lookupd_topics(session: aiohttp.ClientSession, lookupd_addresses: list[str]) -> list[str]:
    """The sorted union of ``/topics`` from every nsqlookupd (``GetLookupdTopics``)."""
    urls = [http_base(a) + "/topics" for a in lookupd_addresses]
    return topics_of(await query_all(session, urls, "nsqlookupd"))
