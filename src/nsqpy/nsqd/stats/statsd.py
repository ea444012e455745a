"""nsqd's statsd client: upstream's keys, metric types, datagram packing and pacing (reference §2.9).

Dashboards built for upstream NSQ (nsqadmin's graphite graphs, Grafana boards over statsd keys)
read these keys by name, so the output is upstream's byte for byte:

* every key is ``<prefix><stat>:<value>|c`` (a counter, sent as the delta since the previous
  push) or ``|g`` (a gauge), one ``\\n``-terminated line each;
* ``%s`` in ``--statsd-prefix`` becomes ``<broadcast_address>_<broadcast_http_port>`` with ``.``
  and ``:`` turned into ``_``, and a trailing ``.`` is added (once, at start-up, and visible in
  ``/config/statsd_prefix`` as upstream's mutated option is);
* lines are packed greedily into datagrams of at most ``--statsd-udp-packet-size`` bytes (Go's
  ``bufio.Writer`` behind a boundary check: a line never straddles two datagrams, a line longer
  than the size goes out alone), and the datagrams are spread evenly over ``interval - 1s`` so a
  big node does not burst thousands of packets at the daemon at once;
* a fresh UDP socket is made for every push, so a statsd daemon that moved (DNS) is followed.

The formatting is sans-I/O (:func:`stat_lines`, :func:`pack_datagrams`), tested on bytes; the
:class:`StatsdPusher` task only gathers ``/stats``-shaped snapshots and writes datagrams.
"""

from __future__ import annotations

import asyncio
import math
import socket
from typing import TYPE_CHECKING, Any, Iterable

from ...common.addr import join_host_port, split_host_port
from . import snapshot as nsq_stats

if TYPE_CHECKING:
    from ..nsqd import NSQD

EPHEMERAL_SUFFIX = "#ephemeral"
GO_BUFIO_DEFAULT_SIZE = 4096  # bufio.NewWriterSize falls back to this for a size <= 0
MEM_GAUGES = ("heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
              "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes")


# --- prefix ------------------------------------------------------------------------------------

def host_key(host_port: str) -> str:
    """Upstream's ``statsd.HostKey``: a ``host:port`` usable as one graphite path segment."""
    return host_port.replace(".", "_").replace(":", "_")


def resolve_prefix(template: str, broadcast_address: str, http_port: int) -> str:
    """``--statsd-prefix`` with ``%s`` replaced and a trailing ``.`` ensured; ``""`` stays ``""``."""
    if not template:
        return template
    prefix = template.replace("%s", host_key(join_host_port(broadcast_address, http_port)))
    return prefix if prefix.endswith(".") else prefix + "."


# --- lines -------------------------------------------------------------------------------------

def counter(prefix: str, stat: str, value: int) -> bytes:
    return f"{prefix}{stat}:{int(value)}|c\n".encode()


def gauge(prefix: str, stat: str, value: int | float) -> bytes:
    return f"{prefix}{stat}:{int(value)}|g\n".encode()


def _latency_lines(prefix: str, base: str, e2e: dict) -> Iterable[bytes]:
    for item in e2e.get("percentiles") or ():
        # Go's %.0f of quantile*100: 0.99 -> "99", 1.0 -> "100" (round half to even, as Python)
        yield gauge(prefix, f"{base}.e2e_processing_latency_{item['quantile'] * 100.0:.0f}",
                    item["value"])


def stat_lines(prefix: str, topics: list[dict], last: dict[str, dict],
               exclude_ephemeral: bool) -> list[bytes]:
    """One push's topic and channel lines, in upstream's order.

    ``topics`` is a ``/stats`` snapshot without clients; ``last`` maps topic name to the previous
    snapshot's topic (see :func:`index_topics`), so counters are deltas. A topic or channel not
    seen before counts from zero; one that was recreated (its counter went down) yields a
    negative delta, as upstream's unsigned subtraction cast to int64 does.
    """
    out: list[bytes] = []
    add = out.append
    for topic in topics:
        name = topic["topic_name"]
        if exclude_ephemeral and name.endswith(EPHEMERAL_SUFFIX):
            continue
        prev = last.get(name)
        base = f"topic.{name}"
        add(counter(prefix, f"{base}.message_count",
                    topic["message_count"] - (prev["message_count"] if prev else 0)))
        add(counter(prefix, f"{base}.message_bytes",
                    topic["message_bytes"] - (prev["message_bytes"] if prev else 0)))
        add(gauge(prefix, f"{base}.depth", topic["depth"]))
        add(gauge(prefix, f"{base}.backend_depth", topic["backend_depth"]))
        out.extend(_latency_lines(prefix, base, topic["e2e_processing_latency"]))
        prev_channels = ({c["channel_name"]: c for c in prev["channels"]} if prev else {})
        for channel in topic["channels"]:
            cname = channel["channel_name"]
            if exclude_ephemeral and cname.endswith(EPHEMERAL_SUFFIX):
                continue
            pc = prev_channels.get(cname)
            cbase = f"{base}.channel.{cname}"
            add(counter(prefix, f"{cbase}.message_count",
                        channel["message_count"] - (pc["message_count"] if pc else 0)))
            add(gauge(prefix, f"{cbase}.depth", channel["depth"]))
            add(gauge(prefix, f"{cbase}.backend_depth", channel["backend_depth"]))
            add(gauge(prefix, f"{cbase}.in_flight_count", channel["in_flight_count"]))
            add(gauge(prefix, f"{cbase}.deferred_count", channel["deferred_count"]))
            add(counter(prefix, f"{cbase}.requeue_count",
                        channel["requeue_count"] - (pc["requeue_count"] if pc else 0)))
            add(counter(prefix, f"{cbase}.timeout_count",
                        channel["timeout_count"] - (pc["timeout_count"] if pc else 0)))
            add(gauge(prefix, f"{cbase}.clients", channel["client_count"]))
            out.extend(_latency_lines(prefix, cbase, channel["e2e_processing_latency"]))
    return out


def index_topics(topics: list[dict]) -> dict[str, dict]:
    return {t["topic_name"]: t for t in topics}


def mem_lines(prefix: str, mem: dict[str, int], last_gc_runs: int) -> list[bytes]:
    """``mem.*`` gauges plus ``mem.gc_runs`` as the count of collections since the last push."""
    out = [gauge(prefix, f"mem.{key}", mem[key]) for key in MEM_GAUGES]
    out.append(counter(prefix, "mem.gc_runs", mem["gc_total_runs"] - last_gc_runs))
    return out


def pack_datagrams(lines: Iterable[bytes], size: int) -> list[bytes]:
    """Upstream's ``BoundaryBufferedWriter`` over ``bufio.Writer``: whole lines, greedily."""
    if size <= 0:
        size = GO_BUFIO_DEFAULT_SIZE
    out: list[bytes] = []
    buf = bytearray()
    for line in lines:
        if len(line) > size - len(buf):
            if buf:
                out.append(bytes(buf))
                buf.clear()
            if len(line) > size:  # bufio writes an oversized chunk straight through
                out.append(line)
                continue
        buf += line
    if buf:
        out.append(bytes(buf))
    return out


# --- the push loop -----------------------------------------------------------------------------

class StatsdPusher:
    """Every ``--statsd-interval``: snapshot, format, and write the datagrams spread out."""

    def __init__(self, nsqd: "NSQD") -> None:
        self.nsqd = nsqd
        self.last_topics: dict[str, dict] = {}
        self.last_gc_runs = 0

    def collect(self) -> list[bytes]:
        """One push's datagrams; advances the counters' baselines."""
        opts = self.nsqd.options
        prefix = opts.statsd_prefix
        topics, _ = nsq_stats.collect(self.nsqd, include_clients=False)
        topics = topics or []
        lines = stat_lines(prefix, topics, self.last_topics, opts.statsd_exclude_ephemeral)
        self.last_topics = index_topics(topics)
        if opts.statsd_mem_stats:
            mem = nsq_stats.memory_stats()
            lines.extend(mem_lines(prefix, mem, self.last_gc_runs))
            self.last_gc_runs = mem["gc_total_runs"]
        return pack_datagrams(lines, opts.statsd_udp_packet_size)

    async def run(self) -> None:
        interval = self.nsqd.options.statsd_interval
        ticker = GoTicker(interval)
        while True:
            await ticker.tick()
            await self.push(interval)

    async def push(self, interval: float) -> None:
        addr = self.nsqd.options.statsd_address
        sock = await self._dial(addr)
        if sock is None:
            return
        try:
            self.nsqd.logger.info("STATSD: pushing stats to %s", addr)
            await send_spread(sock, self.collect(), interval - 1.0)
        finally:
            sock.close()

    async def _dial(self, addr: str) -> socket.socket | None:
        try:
            host, port = split_host_port(addr)
            infos = await asyncio.get_running_loop().getaddrinfo(host, port,
                                                                 type=socket.SOCK_DGRAM)
            family, kind, proto, _, sockaddr = infos[0]
            sock = socket.socket(family, kind, proto)
        except (OSError, ValueError, IndexError):
            self.nsqd.logger.error("failed to create UDP socket to statsd(%s)", addr)
            return None
        try:
            sock.setblocking(False)
            sock.connect(sockaddr)
        except OSError:
            sock.close()
            self.nsqd.logger.error("failed to create UDP socket to statsd(%s)", addr)
            return None
        return sock


class GoTicker:
    """Go's ``time.Ticker`` as upstream's loops use it: ticks every ``period`` from creation; a
    tick that fired while the caller was busy is delivered at once, the ones after it are
    dropped. So a stall (a slow push, a blocked loop) postpones work instead of turning into a
    burst of catch-up pushes or datagrams, and late wake-ups do not add up to drift."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.loop = asyncio.get_running_loop()
        self.next = self.loop.time() + period

    async def tick(self) -> None:
        now = self.loop.time()
        if self.next > now:
            await asyncio.sleep(self.next - now)
            self.next += self.period
        else:
            self.next += self.period * (math.floor((now - self.next) / self.period) + 1)


async def send_spread(sock: socket.socket, datagrams: list[bytes], spread: float) -> None:
    """Upstream's ``SpreadWriter``: a datagram, then ``spread/n`` of sleep, n times.

    Write errors are ignored (a statsd daemon that is down must not stop nsqd, and Go ignores
    them too). Cancelled (nsqd exiting), the remaining datagrams go out without the sleeps.
    """
    if not datagrams:
        if spread > 0:
            await asyncio.sleep(spread)
        return
    gap = max(0.0, spread) / len(datagrams)
    ticker = GoTicker(gap) if gap > 0 else None
    sent = 0
    try:
        for datagram in datagrams:
            _send(sock, datagram)
            sent += 1
            if ticker is not None:
                await ticker.tick()
    except asyncio.CancelledError:
        for datagram in datagrams[sent:]:
            _send(sock, datagram)
        raise


def _send(sock: socket.socket, datagram: bytes) -> None:
    try:
        sock.send(datagram)
    except OSError:  # refused (ICMP from an earlier datagram), buffer full: dropped, like UDP
        pass


def start_statsd(nsqd: "NSQD") -> "asyncio.Task[Any] | None":
    """Resolve ``--statsd-prefix`` (always, as upstream does) and, with ``--statsd-address``,
    start the push task. ValueError for an interval a ticker cannot have."""
    opts = nsqd.options
    port = opts.broadcast_http_port or nsqd.http_port
    opts.values["statsd_prefix"] = resolve_prefix(opts.statsd_prefix, opts.broadcast_address, port)
    if not opts.statsd_address:
        return None
    if opts.statsd_interval <= 0:
        raise ValueError(f"--statsd-interval must be positive, got {opts.statsd_interval}")
    return nsqd.loop.create_task(StatsdPusher(nsqd).run())
