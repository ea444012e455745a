"""What ``nsq_tail --from`` and ``nsq_to_file --from/--to`` share: their flags, which nsqd to
read history from, and the range read (``/history/read``, see :mod:`nsqpy.client.history`).

History is read over nsqd's HTTP API: from every ``--nsqd-http-address`` and every producer of
the topic that ``--lookupd-http-address`` lists. An nsqd without history (upstream's, or ours
without ``--retention``) ends the tool with an error naming it and saying how to turn it on; an
nsqd that has never seen the topic has nothing to read, and when none has it the tool says
``TOPIC_NOT_FOUND`` and exits 1 (a typo must not look like an empty range).
"""

from __future__ import annotations

from typing import Any, AsyncIterator

import aiohttp

from ..client.addr import parse_address
from ..client.history import (
    LATEST, FramingError, HistoryError, HistoryUnavailable, Point, afetch_segments, aread_messages,
    parse_point,
)
from ..client.lookupd import lookup_url
from ..common.addr import join_host_port
from ..common.flags import Flag
from ..protocol.message import Message
from . import common
from .common import fatal


def flags(from_help: str, to_help: str, http_help: str = "") -> list[Flag]:
    """``--from``, ``--to`` and ``--nsqd-http-address``: nsqpy's, listed in --help."""
    out = [Flag("from", "", from_help + ": earliest, an RFC 3339 time or unix milliseconds (needs "
                "nsqd's --retention)", extension=True),
           Flag("to", "", to_help, extension=True)]
    http = Flag("nsqd-http-address", [], "nsqd HTTP address to read history from (may be given "
                f"multiple times; nsqlookupd's producers are read too{http_help})", kind="list",
                parse=lambda raw: [raw], extension=True)
    return out + [http]


def points(o: Any) -> tuple[Point, Point] | None:
    """(from, to) when ``--from``/``--to`` was given, else None; fatal on a bad point."""
    start_text, end_text = getattr(o, "from", ""), getattr(o, "to", "")
    if not start_text and not end_text:
        return None
    try:
        start = parse_point(start_text or "earliest", "--from")
        end = parse_point(end_text or LATEST, "--to")
    except ValueError as err:
        fatal(str(err))
    if start == LATEST:
        fatal("--from cannot be latest (without --from the tool starts at the latest message)")
    if not o.nsqd_http_address and not o.lookupd_http_address:
        fatal("--from/--to need --nsqd-http-address or --lookupd-http-address (history is read "
              "over nsqd's HTTP API)")
    return start, end


async def nodes(session: Any, o: Any, topic: str) -> list[str]:
    """The HTTP bases to read ``topic``'s history from."""
    out = [common.http_base(a) for a in o.nsqd_http_address]
    for address in o.lookupd_http_address:
        try:
            data = common.unwrap_v1(await common.get_json(session, lookup_url(address, topic)))
        except common.HTTPQueryError as err:
            if "TOPIC_NOT_FOUND" not in str(err):
                fatal(f"cannot read the producers of {topic} at {address}: {err}")
            continue
        for p in (data or {}).get("producers") or ():
            host = p.get("broadcast_address") or p.get("address")
            base = "http://" + join_host_port(str(host), int(p.get("http_port", 4151)))
            if base not in out:
                out.append(base)
    return out


async def holders(session: Any, o: Any, topic: str, start: Point, end: Point,
                  secret: str | None = None) -> list[str]:
    """The nsqd (HTTP bases) that have ``topic``, asked before anything is read or subscribed
    (a SUB would create a mistyped topic). Fatal when one keeps no history or refuses the
    range, and when none has the topic: a typo must not look like an empty range."""
    asked = await nodes(session, o, topic)
    found = []
    for base in asked:
        try:
            await afetch_segments(session, base, topic, start, end, secret=secret)
        except HistoryUnavailable as err:
            fatal(str(err))
        except HistoryError as err:
            if err.code != "TOPIC_NOT_FOUND":
                fatal(f"reading the history of {topic}: {err}")
            continue
        except (OSError, aiohttp.ClientError, ValueError) as err:
            fatal(f"reading the history of {topic} at {base}: {err}")
        found.append(base)
    if not found:
        where = (", ".join(asked) if asked else
                 f"nsqlookupd at {', '.join(o.lookupd_http_address)} lists no producer of it")
        fatal(f"TOPIC_NOT_FOUND: no nsqd has topic {topic!r} ({where}): check its name")
    return found


async def read(session: Any, bases: list[str], topic: str, start: Point, end: Point,
               secret: str | None = None) -> AsyncIterator[list[Message]]:
    """The retained messages of ``topic`` in [start, end) on each of ``bases`` (see
    :func:`holders`), one nsqd after the other (log order within each). ``secret``: the V2 one
    (``--consumer-opt=auth_secret,S``), which an nsqd with an auth server asks for here too."""
    for base in bases:
        try:
            async for batch in aread_messages(session, base, topic, start, end, secret=secret):
                yield batch
        except HistoryUnavailable as err:
            fatal(str(err))
        except HistoryError as err:
            if err.code == "TOPIC_NOT_FOUND":  # deleted since holders() asked
                continue
            fatal(f"reading the history of {topic}: {err}")
        except (OSError, aiohttp.ClientError, FramingError) as err:
            fatal(f"reading the history of {topic} at {base}: {err}")


async def follow_addresses(session: Any, o: Any) -> list[str]:
    """The TCP addresses of the ``--nsqd-http-address`` nsqd (their ``/info``'s ``tcp_port`` on
    the host given): how ``nsq_tail`` follows live when that is all it was given."""
    out = []
    for address in o.nsqd_http_address:
        base = common.http_base(address)
        try:
            info = common.unwrap_v1(await common.get_json(session, base + "/info"))
            port = int(info["tcp_port"])
        except (common.HTTPQueryError, KeyError, TypeError, ValueError) as err:
            fatal(f"cannot find the TCP port of nsqd {base} (/info): {err}; give --nsqd-tcp-address")
        host, _ = parse_address(base.split("://", 1)[1].split("/", 1)[0])
        out.append(join_host_port(host, port))
    return out
