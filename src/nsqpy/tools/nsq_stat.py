"""``nsq_stat``: poll ``/stats`` of every nsqd carrying a topic and print a channel's rates.

The nsqd come from ``--nsqd-http-address`` (those that have the topic) or from nsqlookupd's
``/lookup`` (``--lookupd-http-address``). Every ``--interval`` the channel's counters are summed
over all of them and one line is printed: ingress/egress rates since the previous poll, then
depths and totals, under upstream's header (repeated every 25 lines). ``--count N`` stops after N
lines. Output columns and widths are upstream's::

    ------rate------+----------------depth----------------+--------------metadata---------------
    ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients

Failures are upstream's: any nsqlookupd or nsqd that does not answer (even while others do)
ends the program with ``ERROR: failed to get topic producers - ...`` or ``ERROR: failed to get
nsqd stats - ...`` and exit 1, as does a channel that none of them has; the error texts are Go's
(``failed to query any nsqd: Get "http://...": dial tcp ...: connect: connection refused``).
A closed stdout (``nsq_stat ... | head``) ends it by SIGPIPE, as Go's runtime does.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

from ..client.addr import format_address
from ..common.flags import Flag, FlagSet
from . import common, golog
from .common import fatal, repeated
from .goconfig import go_parse_int

PROGRAM = "nsq_stat"

HEADER = (
    "------rate------+----------------depth----------------+--------------metadata---------------\n"
    + "%7s %7s | %7s %7s %7s %5s %5s | %7s %7s %12s %7s" % (
        "ingress", "egress", "total", "mem", "disk", "inflt", "def", "req", "t-o", "msgs", "clients")
)
# extra columns when the channel uses nsqd's opt-in lifecycle controls (its /stats has the counts)
LIFECYCLE_HEADER = ("+---------lifecycle------", " %7s %7s %7s" % ("dead-l", "expired", "dropped"))


def header(cur: "ChannelStats") -> str:
    if not cur.lifecycle:
        return HEADER
    top, names = HEADER.split("\n")
    return f"{top}{LIFECYCLE_HEADER[0]}\n{names} |{LIFECYCLE_HEADER[1]}"


def _count(raw: str) -> int:
    """upstream's ``numValue``: ``strconv.ParseInt(s, 10, 32)``, with its error texts."""
    return go_parse_int(raw, bits=32)


def build_flagset() -> FlagSet:
    fs = FlagSet(PROGRAM)
    F = Flag
    fs.add(
        F("version", False, "print version", kind="bool"),
        F("topic", "", "NSQ topic"),
        F("channel", "", "NSQ channel"),
        F("interval", 2.0, "duration of time between polling/printing output", kind="duration"),
        F("http-client-connect-timeout", 2.0, "timeout for HTTP connect", kind="duration"),
        F("http-client-request-timeout", 5.0, "timeout for HTTP request", kind="duration"),
        F("count", None, "number of reports", parse=_count),
        repeated("nsqd-http-address", "nsqd HTTP address (may be given multiple times)"),
        repeated("lookupd-http-address", "lookupd HTTP address (may be given multiple times)"),
    )
    return fs


@dataclass
class ChannelStats:
    depth: int = 0
    memory_depth: int = 0
    backend_depth: int = 0
    in_flight_count: int = 0
    deferred_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    message_count: int = 0
    client_count: int = 0
    paused: bool = False
    lifecycle: bool = False
    dead_letter_count: int = 0
    expired_count: int = 0
    dropped_count: int = 0

    def add(self, ch: dict[str, Any]) -> None:
        depth = int(ch.get("depth") or 0)
        backend = int(ch.get("backend_depth") or 0)
        self.depth += depth
        self.backend_depth += backend
        self.memory_depth += depth - backend
        self.in_flight_count += int(ch.get("in_flight_count") or 0)
        self.deferred_count += int(ch.get("deferred_count") or 0)
        self.requeue_count += int(ch.get("requeue_count") or 0)
        self.timeout_count += int(ch.get("timeout_count") or 0)
        self.message_count += int(ch.get("message_count") or 0)
        self.client_count += int(ch.get("client_count") or 0)
        self.paused = self.paused or bool(ch.get("paused"))
        if "dead_letter_count" in ch:
            self.lifecycle = True
            self.dead_letter_count += int(ch.get("dead_letter_count") or 0)
            self.expired_count += int(ch.get("expired_count") or 0)
            self.dropped_count += int(ch.get("dropped_count") or 0)


def format_line(cur: ChannelStats, prev: ChannelStats, interval: float) -> str:
    ingress = int((cur.message_count - prev.message_count) / interval)
    egress = int((cur.message_count - prev.message_count - (cur.depth - prev.depth)) / interval)
    line = "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d" % (
        ingress, egress, cur.depth, cur.memory_depth, cur.backend_depth, cur.in_flight_count,
        cur.deferred_count, cur.requeue_count, cur.timeout_count, cur.message_count,
        cur.client_count)
    if cur.lifecycle:
        line += " | %7d %7d %7d" % (cur.dead_letter_count, cur.expired_count, cur.dropped_count)
    return line


class Poller:
    """upstream's clusterinfo, as nsq_stat uses it: the nsqd that have the topic, then their
    channel stats. Every failure is an HTTPQueryError (partial ones too)."""

    def __init__(self, o: Any, session: Any) -> None:
        self.o = o
        self.session = session
        self.topic_q = quote_plus(o.topic)

    async def producers(self) -> list[str]:
        """HTTP addresses of the nsqd that have the topic (``GetLookupdTopicProducers`` /
        ``GetNSQDTopicProducers``: an nsqd's own /info names the address to use)."""
        o = self.o
        found: list[str] = []
        if o.lookupd_http_address:
            urls = [f"{common.http_base(a)}/lookup?topic={self.topic_q}" for a in o.lookupd_http_address]
            for answer in await common.query_all(self.session, urls, "nsqlookupd"):
                for p in (answer or {}).get("producers") or ():
                    host = p.get("broadcast_address") or p.get("address")
                    port = p.get("http_port")
                    if host and isinstance(port, int):
                        addr = format_address(host, port)
                        if addr not in found:
                            found.append(addr)
            return found
        results = await asyncio.gather(*(self._nsqd_with_topic(a) for a in o.nsqd_http_address),
                                       return_exceptions=True)
        errors = []
        for result in results:
            if isinstance(result, common.HTTPQueryError):
                errors.append(result)
            elif isinstance(result, BaseException):
                raise result
            elif result is not None:
                found.append(result)
        if errors and len(errors) == len(results):
            joined = "\n".join(str(e) for e in errors)
            raise common.HTTPQueryError(f"failed to query any nsqd: {joined}")
        if errors:
            raise common.PartialQueryError(errors, found)
        return found

    async def _nsqd_with_topic(self, addr: str) -> str | None:
        base = common.http_base(addr)
        stats = common.unwrap_v1(await common.get_json(
            self.session, f"{base}/stats?format=json&topic={self.topic_q}&include_clients=false"))
        names = [t.get("topic_name") for t in (stats or {}).get("topics") or ()]
        if self.o.topic not in names:
            return None
        info = common.unwrap_v1(await common.get_json(self.session, f"{base}/info")) or {}
        host, port = info.get("broadcast_address"), info.get("http_port")
        if not host or not isinstance(port, int):
            return addr  # an nsqd too old to say: the address we were given
        return format_address(host, port)

    async def channel_stats(self, producers: list[str]) -> ChannelStats | None:
        """The channel summed over ``producers`` (``GetNSQDStats``); None if none has it."""
        o = self.o
        urls = [f"http://{a}/stats?format=json&topic={self.topic_q}"
                f"&channel={quote_plus(o.channel)}&include_clients=false" for a in producers]
        stats: ChannelStats | None = None
        for answer in await common.query_all(self.session, urls, "nsqd"):
            for topic in (answer or {}).get("topics") or ():
                if topic.get("topic_name") != o.topic:
                    continue
                for ch in topic.get("channels") or ():
                    if ch.get("channel_name") == o.channel:
                        stats = stats or ChannelStats()
                        stats.add(ch)
        return stats


def _write(out: Any, text: str) -> None:
    try:
        print(text, file=out, flush=True)
    except BrokenPipeError:
        golog.die_of_sigpipe()


async def stat_loop(o: Any) -> int:
    out = sys.stdout
    async with common.http_session(o.http_client_connect_timeout,
                                   o.http_client_request_timeout) as session:
        poller = Poller(o, session)
        prev: ChannelStats | None = None
        i = 0
        while o.count is None or i <= o.count:
            try:
                producers = await poller.producers()
            except common.HTTPQueryError as err:
                fatal(f"ERROR: failed to get topic producers - {err}")
            try:
                cur = await poller.channel_stats(producers)
            except common.HTTPQueryError as err:
                fatal(f"ERROR: failed to get nsqd stats - {err}")
            if cur is None:
                fatal(f"ERROR: failed to find channel({o.channel}) in stats metadata "
                      f"for topic({o.topic})")
            if i % 25 == 0:
                _write(out, header(cur))
            if prev is not None:
                _write(out, format_line(cur, prev, o.interval))
            prev = cur
            i += 1
            if o.count is not None and i > o.count:
                break
            await asyncio.sleep(o.interval)
    return 0


async def _main(o: Any) -> int:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    stopped = False

    def on_signal(_signum: int) -> None:
        nonlocal stopped
        stopped = True
        main_task.cancel()

    for sig in (signal.SIGHUP, *common.TERM_SIGNALS):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await stat_loop(o)
    except asyncio.CancelledError:
        if stopped:
            return 0
        raise


def main(argv: list[str] | None = None) -> None:
    o = common.parse_options(build_flagset(), argv)
    if o.version:
        print(common.version_string(PROGRAM))
        return
    if o.topic == "" or o.channel == "":
        fatal("--topic and --channel are required")
    if o.interval <= 0:
        fatal("--interval should be positive")
    if o.http_client_connect_timeout <= 0:
        fatal("--http-client-connect-timeout should be positive")
    if o.http_client_request_timeout <= 0:
        fatal("--http-client-request-timeout should be positive")
    if o.count is not None and o.count <= 0:
        fatal("--count should be positive")
    if not o.nsqd_http_address and not o.lookupd_http_address:
        fatal("--nsqd-http-address or --lookupd-http-address required")
    if o.nsqd_http_address and o.lookupd_http_address:
        fatal("use --nsqd-http-address or --lookupd-http-address not both")
    for flag, addrs in (("--nsqd-http-address", o.nsqd_http_address),
                        ("--lookupd-http-address", o.lookupd_http_address)):
        if any(a.startswith("http") for a in addrs):
            fatal(f"{flag} error - address should not contain scheme")
    common.run(lambda: _main(o))


if __name__ == "__main__":
    main()
