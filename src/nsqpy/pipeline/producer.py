"""Publish the synthetic click stream to ``clicks`` (MPUB chunks, round-robin over nsqd nodes).

    python -m nsqpy.pipeline.producer --events 100000 --lookupd-http-addresses 127.0.0.1:4161
"""

from __future__ import annotations

import argparse
import itertools
import time
import urllib.request
from typing import Any, Iterable

import orjson

from nsqpy.client import SyncPublisher
from nsqpy.client.addr import format_address
from nsqpy.client.lookupd import ACCEPT

from .events import ClickStream


def lookupd_nodes(lookupd_http: Iterable[str]) -> list[dict[str, str]]:
    """Every nsqd registered with any of these nsqlookupd (``/nodes``), deduplicated."""
    seen: dict[str, dict[str, str]] = {}
    for addr in lookupd_http:
        base = addr if "://" in addr else f"http://{addr}"
        req = urllib.request.Request(f"{base}/nodes", headers={"Accept": ACCEPT})
        with urllib.request.urlopen(req, timeout=5) as resp:
            data = orjson.loads(resp.read())
        for p in data.get("producers") or ():
            host = p.get("broadcast_address") or p.get("hostname")
            seen[format_address(host, p["tcp_port"])] = {
                "tcp": format_address(host, p["tcp_port"]), "http": format_address(host, p["http_port"])
            }
    return list(seen.values())


def nodes_from_lookupd(lookupd_http: Iterable[str]) -> list[str]:
    nodes = [n["tcp"] for n in lookupd_nodes(lookupd_http)]
    if not nodes:
        raise RuntimeError("no nsqd registered with nsqlookupd")
    return nodes


def publish_clicks(
    stream: ClickStream, nsqd_tcp: list[str], topic: str = "clicks", rate: float = 0.0, chunk: int = 500
) -> dict[str, Any]:
    """Publish every event; ``rate`` bounds events per second (0: as fast as nsqd takes them)."""
    pubs = [SyncPublisher(a, timeout=30) for a in nsqd_tcp]
    rr = itertools.cycle(pubs)
    sent = 0
    started = time.monotonic()
    batch: list[bytes] = []
    try:
        for body in stream.bodies():
            batch.append(body)
            if len(batch) >= chunk:
                next(rr).mpub(topic, batch)
                sent += len(batch)
                batch = []
                if rate:
                    ahead = sent / rate - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)
        if batch:
            next(rr).mpub(topic, batch)
            sent += len(batch)
    finally:
        for p in pubs:
            p.close()
    secs = time.monotonic() - started
    return {"published": sent, "clicks": stream.count, "seconds": round(secs, 3)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="nsqpy.pipeline.producer", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rate", type=float, default=0.0, help="events per second (0: unbounded)")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--nsqd-tcp-addresses")
    ap.add_argument("--lookupd-http-addresses")
    args = ap.parse_args(argv)
    if args.nsqd_tcp_addresses:
        nodes = [a.strip() for a in args.nsqd_tcp_addresses.split(",") if a.strip()]
    elif args.lookupd_http_addresses:
        nodes = nodes_from_lookupd(a.strip() for a in args.lookupd_http_addresses.split(","))
    else:
        nodes = ["127.0.0.1:4150"]
    stream = ClickStream(args.events, seed=args.seed)
    print(publish_clicks(stream, nodes, args.topic, args.rate))


if __name__ == "__main__":
    main()
