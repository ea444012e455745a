"""What the utilities share: flags, go-nsq options, logging, signals, lookupd/nsqd HTTP queries.

The utilities take go-nsq ``Config`` options on the command line (``--consumer-opt=name,value``,
``--producer-opt``) because upstream's tools are built on go-nsq; :func:`parse_go_nsq_options`
maps them onto :class:`nsqpy.client.ConnectionOptions` and the :class:`nsqpy.client.Consumer`
keywords, with go-nsq's value syntax and ranges, so existing command lines keep working.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import ssl
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Iterable, NoReturn

import aiohttp
import orjson

from .. import NSQ_COMPAT_VERSION, __version__
from ..client import ConnectionOptions
from ..common.daemon import run as run_on_loop
from ..common.flags import Flag, FlagError, FlagSet, parse_duration
from ..common.log import make_logger

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


def parse_flags(fs: FlagSet, argv: list[str]) -> dict[str, Any]:
    """Parse like Go's ``flag.ExitOnError``: ``-h`` prints usage and exits 0, a bad flag prints
    the error and the usage and exits 2, stray positional arguments are refused."""
    if fs.usage_name is None:
        fs.usage_name = sys.argv[0]  # Go's flag.CommandLine says "Usage of <os.Args[0]>:"
    try:
        values, _explicit, positional = fs.parse(argv)
    except FlagError as err:
        print(str(err), file=sys.stderr)
        raise SystemExit(err.exit_code) from None
    if positional:
        print(f"unknown arguments: {positional}", file=sys.stderr)
        raise SystemExit(2)
    return values


def fatal(program: str, message: str) -> NoReturn:
    """A start-up error: one line on stderr, exit status 1 (Go's ``log.Fatal``)."""
    print(f"[{program}] FATAL: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def check_sources(program: str, nsqd: list[str], lookupd: list[str]) -> None:
    """Consumers need nsqd addresses or lookupd addresses, never both (upstream's rule)."""
    if not nsqd and not lookupd:
        fatal(program, "--nsqd-tcp-address or --lookupd-http-address required")
    if nsqd and lookupd:
        fatal(program, "use --nsqd-tcp-address or --lookupd-http-address not both")


# --- logging --------------------------------------------------------------------------------


def setup_logging(program: str, prefix: str | None = None, level: str = "info") -> logging.Logger:
    """The tool's logger and the client library's, both writing NSQ-shaped lines to stderr."""
    prefix = f"[{program}] " if prefix is None else prefix
    make_logger("client", prefix, level)
    return make_logger(program, prefix, level)


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


# --- go-nsq options (--consumer-opt / --producer-opt) ---------------------------------------


@dataclass(frozen=True)
class _GoOpt:
    kind: str  # duration float int bool str strategy addr tls-file tls-version
    target: str  # "conn.<field>", "consumer.<kwarg>", "tls.<key>", "" (accepted, no effect)
    low: float | None = None
    high: float | None = None


_D = "duration"
_GO_OPTIONS: dict[str, _GoOpt] = {
    "dial_timeout": _GoOpt(_D, "conn.connect_timeout"),
    "read_timeout": _GoOpt(_D, "conn.read_timeout", 0.1, 300),
    "write_timeout": _GoOpt(_D, "", 0.1, 300),
    "local_addr": _GoOpt("addr", ""),
    "lookupd_poll_interval": _GoOpt(_D, "consumer.lookupd_poll_interval", 0.01, 300),
    "lookupd_poll_jitter": _GoOpt("float", "consumer.lookupd_poll_jitter", 0, 1),
    "lookupd_poll_timeout": _GoOpt(_D, "consumer.lookupd_poll_timeout"),
    "max_requeue_delay": _GoOpt(_D, "conn.max_requeue_delay", 0, 3600),
    "default_requeue_delay": _GoOpt(_D, "conn.default_requeue_delay", 0, 3600),
    "backoff_strategy": _GoOpt("strategy", "consumer.backoff_strategy"),
    "max_backoff_duration": _GoOpt(_D, "consumer.max_backoff_duration", 0, 3600),
    "backoff_multiplier": _GoOpt(_D, "consumer.backoff_multiplier", 0, 3600),
    "max_attempts": _GoOpt("int", "consumer.max_attempts", 0, 65535),
    "low_rdy_idle_timeout": _GoOpt(_D, "consumer.low_rdy_idle_timeout", 1, 300),
    "low_rdy_timeout": _GoOpt(_D, "consumer.low_rdy_timeout", 1, 300),
    "rdy_redistribute_interval": _GoOpt(_D, "consumer.rdy_redistribute_interval", 0.001, 5),
    "client_id": _GoOpt("str", "conn.client_id"),
    "hostname": _GoOpt("str", "conn.hostname"),
    "user_agent": _GoOpt("str", "conn.user_agent"),
    "topology_region": _GoOpt("str", ""),
    "topology_zone": _GoOpt("str", ""),
    "heartbeat_interval": _GoOpt(_D, "conn.heartbeat_interval"),
    "sample_rate": _GoOpt("int", "conn.sample_rate", 0, 99),
    "tls_v1": _GoOpt("bool", "tls.enabled"),
    "tls_root_ca_file": _GoOpt("str", "tls.cafile"),
    "tls_insecure_skip_verify": _GoOpt("bool", "tls.insecure"),
    "tls_cert": _GoOpt("str", "tls.cert"),
    "tls_key": _GoOpt("str", "tls.key"),
    "tls_min_version": _GoOpt("tls-version", "tls.min_version"),
    "deflate": _GoOpt("bool", "conn.deflate"),
    "deflate_level": _GoOpt("int", "conn.deflate_level", 1, 9),
    "snappy": _GoOpt("bool", "conn.snappy"),
    "output_buffer_size": _GoOpt("int", "conn.output_buffer_size"),
    "output_buffer_timeout": _GoOpt(_D, "conn.output_buffer_timeout"),
    "max_in_flight": _GoOpt("int", "consumer.max_in_flight", 0, None),
    "msg_timeout": _GoOpt(_D, "conn.msg_timeout", 0, None),
    "max_msg_size": _GoOpt("int", "conn.max_frame_size", 0, 2**31 - 1),
    "auth_secret": _GoOpt("str", "conn.auth_secret"),
    "skip_lookupd_authorization": _GoOpt("bool", ""),
}

_TLS_VERSIONS = {
    "ssl3.0": ssl.TLSVersion.SSLv3, "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1, "tls1.2": ssl.TLSVersion.TLSv1_2,
}


def _go_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def _go_number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _coerce(name: str, opt: _GoOpt, raw: str | bool) -> Any:
    if opt.kind == "bool":
        return raw if isinstance(raw, bool) else _go_bool(raw)
    if isinstance(raw, bool):  # a bare option is "true": only booleans take it
        raise ValueError(f"failed to coerce option {name} (true) - invalid value type")
    try:
        if opt.kind == _D:
            value: Any = parse_duration(raw)
        elif opt.kind == "float":
            value = float(raw)
        elif opt.kind == "int":
            value = int(raw, 10)
        elif opt.kind == "strategy":
            if raw not in ("", "exponential", "full_jitter"):
                raise ValueError("invalid value type")
            value = raw or "exponential"
        elif opt.kind == "tls-version":
            if raw not in _TLS_VERSIONS:
                raise ValueError(f"ERROR: {raw} is not a tls version")
            value = raw
        else:
            value = raw
    except ValueError as err:
        raise ValueError(f"failed to coerce option {name} ({raw}) - {err}") from None
    if isinstance(value, (int, float)):
        if opt.low is not None and value < opt.low:
            raise ValueError(f"invalid {name} ! {_go_number_text(value)} < {_go_number_text(opt.low)}")
        if opt.high is not None and value > opt.high:
            raise ValueError(f"invalid {name} ! {_go_number_text(value)} > {_go_number_text(opt.high)}")
    return value


@dataclass
class GoNsqConfig:
    """go-nsq options resolved for nsqpy: connection settings, consumer keywords, TLS."""

    conn: dict[str, Any] = field(default_factory=dict)
    consumer: dict[str, Any] = field(default_factory=dict)
    tls: dict[str, Any] = field(default_factory=dict)
    #: options accepted for compatibility that change nothing here (logged at start)
    no_effect: list[str] = field(default_factory=list)

    def connection_options(self, default_user_agent: str) -> ConnectionOptions:
        kwargs = dict(self.conn)
        kwargs.setdefault("user_agent", default_user_agent)
        context = self.ssl_context()
        if context is not None:
            kwargs["tls"] = context
        return ConnectionOptions(**kwargs)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls.get("enabled"):
            return None
        context = ssl.create_default_context(cafile=self.tls.get("cafile") or None)
        if self.tls.get("insecure"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.tls.get("cert") and self.tls.get("key"):
            context.load_cert_chain(self.tls["cert"], self.tls["key"])
        version = self.tls.get("min_version")
        if version:
            context.minimum_version = _TLS_VERSIONS[version]
        return context


def parse_go_nsq_options(values: Iterable[str], flag_name: str,
                         base: GoNsqConfig | None = None) -> GoNsqConfig:
    """``["max_attempts,10", "snappy"]`` → a :class:`GoNsqConfig` (go-nsq's ``ConfigFlag``).

    Each value is ``name,value`` (split at the first comma) or a bare ``name`` meaning true;
    ``-`` in names reads as ``_``. Errors are FlagErrors worded like Go's flag package.
    """
    cfg = base or GoNsqConfig()
    for text in values:
        name, comma, raw_value = text.partition(",")
        raw: str | bool = raw_value if comma else True
        key = name.replace("-", "_")
        try:
            opt = _GO_OPTIONS.get(key)
            if opt is None:
                if key == "tls_config":
                    raise ValueError("tls_config cannot be set from the command line")
                raise ValueError(f"invalid option {key}")
            value = _coerce(key, opt, raw)
        except ValueError as err:
            raise FlagError(f'invalid value "{text}" for flag -{flag_name}: {err}') from None
        where, _, attr = opt.target.partition(".")
        if not where:
            cfg.no_effect.append(key)
            continue
        if where == "tls":
            cfg.tls[attr] = value
            continue
        if attr in ("heartbeat_interval", "output_buffer_timeout") and value < 0:
            value = None  # go-nsq: -1 disables
        elif attr == "output_buffer_size" and value < 0:
            value = None
        elif attr == "msg_timeout" and value == 0:
            value = None  # 0 = nsqd's --msg-timeout
        elif attr == "max_frame_size" and value:
            value += 30  # frame size field = 4 (type) + 26 (message header) + body
        (cfg.conn if where == "conn" else cfg.consumer)[attr] = value
    heartbeat = cfg.conn.get("heartbeat_interval", 30.0)
    read_timeout = cfg.conn.get("read_timeout")
    if heartbeat is not None and read_timeout is not None and heartbeat > read_timeout:
        raise FlagError(f"invalid -{flag_name}: HeartbeatInterval {heartbeat}s must be less "
                        f"than ReadTimeout {read_timeout}s")
    return cfg


def build_go_config(program: str, flag_name: str, values: list[str],
                    logger: logging.Logger | None = None) -> tuple[GoNsqConfig, ConnectionOptions]:
    """Parse ``--consumer-opt``/``--producer-opt`` values; a bad one is fatal (exit 2)."""
    try:
        cfg = parse_go_nsq_options(values, flag_name)
        options = cfg.connection_options(user_agent(program))
    except FlagError as err:
        print(str(err), file=sys.stderr)
        raise SystemExit(2) from None
    except (ValueError, OSError, ssl.SSLError) as err:
        print(f"invalid -{flag_name}: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if logger is not None and cfg.no_effect:
        logger.warning("-%s %s accepted but has no effect in nsqpy", flag_name,
                       ", ".join(sorted(set(cfg.no_effect))))
    return cfg, options


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

    def __init__(self, status_every: int, prefix: str, logger: logging.Logger) -> None:
        self.status_every = status_every
        self.prefix = prefix
        self.logger = logger
        self._timings: list[float] = []
        if 0 < status_every < 100:
            logger.warning("use more than 100 status values for accurate percentiles "
                           "(configured with %d)", status_every)

    def status(self, started: float) -> None:
        if self.status_every <= 0:
            return
        self._timings.append(time.monotonic() - started)
        if len(self._timings) >= self.status_every:
            timings, self._timings = sorted(self._timings), []
            self.logger.info("%s", self.format(timings))

    def format(self, timings: list[float]) -> str:
        def pct(p: float) -> float:
            idx = min(int(math.ceil(p / 100.0 * len(timings) + 0.5)), len(timings) - 1)
            return timings[idx] if timings else 0.0

        avg = sum(timings) / len(timings) if timings else 0.0
        return (f"{self.prefix} finished {len(timings)} - 99th: {pct(99) * 1000:.2f}ms - "
                f"95th: {pct(95) * 1000:.2f}ms - avg: {avg * 1000:.2f}ms")


# --- HTTP queries to nsqlookupd / nsqd --------------------------------------------------------


class HTTPQueryError(Exception):
    pass


def http_base(address: str) -> str:
    """``127.0.0.1:4161`` → ``http://127.0.0.1:4161``; an address with a scheme is kept."""
    address = address.rstrip("/")
    return address if "://" in address else "http://" + address


def http_session(connect_timeout: float, request_timeout: float) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout),
        headers={"Accept": GO_NSQ_ACCEPT},
    )


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    """GET a v1 API endpoint; anything but 200 with JSON is an HTTPQueryError."""
    try:
        async with session.get(url) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise HTTPQueryError(f"GET {url} got response {resp.status} {body[:200]!r}")
            return orjson.loads(body)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, orjson.JSONDecodeError) as err:
        raise HTTPQueryError(f"GET {url} failed: {err or type(err).__name__}") from None


async def query_all(session: aiohttp.ClientSession, urls: list[str],
                    logger: logging.Logger | None = None) -> list[Any]:
    """GET every URL concurrently; the answers that came. All failing raises HTTPQueryError."""
    results = await asyncio.gather(*(get_json(session, u) for u in urls), return_exceptions=True)
    answers = [r for r in results if not isinstance(r, BaseException)]
    errors = [r for r in results if isinstance(r, BaseException)]
    for err in errors:
        if not isinstance(err, HTTPQueryError):
            raise err
    if urls and not answers:
        raise HTTPQueryError("; ".join(str(e) for e in errors))
    if errors and logger is not None:
        for err in errors:
            logger.warning("%s", err)
    return answers


async def lookupd_topics(session: aiohttp.ClientSession, lookupd_addresses: list[str],
                         logger: logging.Logger | None = None) -> list[str]:
    """The sorted union of ``/topics`` from every nsqlookupd."""
    answers = await query_all(session, [http_base(a) + "/topics" for a in lookupd_addresses], logger)
    topics: set[str] = set()
    for data in answers:
        if isinstance(data, dict) and "status_code" in data and isinstance(data.get("data"), dict):
            data = data["data"]  # pre-1.0 envelope
        topics.update(t for t in (data or {}).get("topics") or () if isinstance(t, str))
    return sorted(topics)
