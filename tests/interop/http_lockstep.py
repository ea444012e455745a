"""Side by side over HTTP: the same raw requests to upstream's daemons and ours, answers compared.

Used by ``test_http_lockstep.py``. Requests go out as raw bytes on a fresh connection each (so a
request line or header that a client library would refuse to send reaches the servers as written);
answers are parsed by hand and normalised before they are compared: the ``Date`` header's value,
each side's own port numbers, ephemeral client ports, times and memory figures are masked, and
JSON bodies are compared with their key order kept (upstream's order is part of its answer).

``HEADERS`` says how headers are compared: ``"names"`` (the set of header names and their values,
case-insensitively, ``Server`` ignored) or ``"exact"`` (the header block byte for byte but the
date, in order, framing included). When masking changed a body (memory figures, a data path),
its length is not comparable: its framing header (``Content-Length`` or ``Transfer-Encoding``,
which one depends on the length) is then compared as "some framing".
"""

from __future__ import annotations

import json
import random
import re
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import quote

HEADERS = "exact"
#: values that change between runs or between the two sides even when both answer alike
_MASKED_KEYS = {"start_time", "connect_ts", "last_update", "memory", "remote_address", "id",
                "heap_objects", "gc_pause_usec_100", "e2e_processing_latency"}


@dataclass
class Answer:
    status_line: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    raw: bytes

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None


@dataclass
class Request:
    daemon: str  # "nsqd" or "nsqlookupd"
    method: str
    target: str
    body: bytes | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)

    def encode(self, port: int) -> bytes:
        lines = [f"{self.method} {self.target} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
        lines += [f"{k}: {v}" for k, v in self.headers]
        if self.body is not None and not any(k.lower() == "transfer-encoding"
                                             for k, _ in self.headers):
            lines.append(f"Content-Length: {len(self.body)}")
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (self.body or b"")

    def __str__(self) -> str:
        body = "" if self.body is None else f" body={self.body[:60]!r}{'...' if len(self.body) > 60 else ''}"
        return f"{self.daemon} {self.method} {self.target}{body}"


def send(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError:
                chunks.append(b"<reset>")
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def parse(raw: bytes) -> Answer:
    head, sep, rest = raw.partition(b"\r\n\r\n")
    interim = b""
    while sep and head.startswith(b"HTTP/1.1 1") and b"\r\n" not in head:
        # an interim answer (100 Continue): kept in the status line, the real one parsed
        interim += head + b" + "
        head, sep, rest = rest.partition(b"\r\n\r\n")
    if not sep:
        return Answer(interim + raw[:80], [], b"", raw)
    lines = head.split(b"\r\n")
    lines[0] = interim + lines[0]
    headers = []
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers.append((k, v.strip()))
    answer = Answer(lines[0], headers, rest, raw)
    if (answer.header(b"transfer-encoding") or b"").lower() == b"chunked":
        answer.body = _unchunk(rest)
    return answer


def _unchunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2:]
    return bytes(out)


# --- normalising -----------------------------------------------------------------------------

#: lists whose order upstream takes from a Go map (random per call): compared sorted
_UNORDERED_KEYS = {"topics", "channels", "producers", "tombstones"}


#: Go's zero time.Time in Unix nanoseconds (not a moment: kept)
_GO_ZERO_TIME = -6795364578871345152


def _mask_json(value, ports: dict[int, str], masked: list[bool]):
    """``value`` with each side's own values masked (``masked[0]`` set when one was) and the
    lists upstream fills from Go maps sorted."""
    if isinstance(value, list) and value and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        out = []
        for k, v in value:
            if k in _MASKED_KEYS or (k == "tombstoned_at" and v != _GO_ZERO_TIME):
                v = "<masked>"
                masked[0] = True
            else:
                v = _mask_json(v, ports, masked)
                if k in _UNORDERED_KEYS and isinstance(v, list):
                    v = sorted(v, key=repr)
            out.append((k, v))
        return out
    if isinstance(value, list):
        return [_mask_json(v, ports, masked) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value in ports:
        masked[0] = True
        return ports[value]
    if isinstance(value, str):
        text = _mask_text(value, ports)
        masked[0] = masked[0] or text != value
        return text
    return value


def _mask_text(text: str, masks: dict) -> str:
    """Each side's own values (its ports, its data directory) by their role's name."""
    for value, name in masks.items():
        if isinstance(value, int):
            text = re.sub(rf"(?<!\d){value}(?!\d)", name, text)
        else:
            text = text.replace(value, name)
    return text


def normalise(answer: Answer, ports: dict[int, str]) -> tuple:
    body = answer.body
    if body.endswith(b"<reset>") and answer.status_line.startswith(b"HTTP/1.1 413"):
        # Go answers a refused body it did not read and closes with that body unread, so the
        # kernel resets the connection after the answer; we read it and close cleanly (the
        # answer is the same; docs/fidelity.md)
        body = body[:-len(b"<reset>")]
    ctype = (answer.header(b"content-type") or b"").decode()
    shown: object
    if "json" in ctype and body:
        try:
            found = [False]
            shown = _mask_json(json.loads(body, object_pairs_hook=list), ports, found)
            masked = found[0]
        except ValueError:
            shown = _mask_text(body.decode("latin-1"), ports)
            masked = shown != body.decode("latin-1")
    else:
        text = body.decode("latin-1")
        shown = _mask_text(text, ports)
        # /stats as text: the build line, the clock and Go's memory figures differ by nature
        shown = re.sub(r"\(built w/[^)]*\)", "(built w/<masked>)", shown)
        shown = re.sub(r"(?m)^(start_time|uptime) .*$", r"\1 <masked>", shown)
        shown = re.sub(r"(?m)^(   (heap|gc|next)_\w+ +\t).*$", r"\1<masked>", shown)
        # a TCP client's line: its ephemeral port and how long it has been connected
        shown = re.sub(r"(\[V2 [^:\]]+):\d+ ", r"\1:<port> ", shown)
        shown = re.sub(r"connected: \S+", "connected: <masked>", shown)
        masked = shown != text
    if HEADERS == "exact":
        headers = tuple((k, b"<date>" if k.lower() == b"date" else
                         _mask_text(v.decode("latin-1"), ports).encode("latin-1"))
                        for k, v in answer.headers)
        if masked:
            headers = tuple(h for h in headers
                            if h[0].lower() not in (b"content-length", b"transfer-encoding"))
            headers += ((b"<framing>", b""),)
    else:
        headers = tuple(sorted(
            (k.lower(), b"<date>" if k.lower() == b"date" else
             _mask_text(v.decode("latin-1"), ports).encode("latin-1"))
            for k, v in answer.headers if k.lower() != b"server"))
        # framing (a length, or chunks for bodies past Go's 2 KiB buffer) is checked only in
        # "exact" mode: the bodies are compared below (and masking changes their length)
        headers = tuple(h for h in headers if h[0] not in (b"content-length", b"transfer-encoding"))
    return (answer.status_line, headers, shown)


def explain(upstream: tuple, ours: tuple) -> str:
    """Where two normalised answers part: the first differing part, shortly."""
    for name, a, b in zip(("status", "headers", "body"), upstream, ours):
        if a != b:
            if isinstance(a, str) and isinstance(b, str):
                import difflib

                lines = [line for line in difflib.unified_diff(
                    a.splitlines(), b.splitlines(), "upstream", "ours", n=0, lineterm="")][2:8]
                return f"{name}: " + " | ".join(lines)
            if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
                only_a = [x for x in a if x not in b]
                only_b = [x for x in b if x not in a]
                return (f"{name}: only upstream's {str(only_a)[:600]} / only ours {str(only_b)[:600]}"
                        if only_a or only_b else f"{name}: the same parts in another order")
            return f"{name}: upstream {str(a)[:300]} / ours {str(b)[:300]}"
    return ""


# --- the requests ------------------------------------------------------------------------------

NAMES = ["t1", "t2", "c1", "x#ephemeral", "t1#ephemeral", "bad!", "", "a" * 64, "a" * 65, "dots.and-dash_",
         "%23", "sp ace", "t%231", "x#y", "über"]
NSQD_POST_ROUTES = ["/topic/create", "/topic/delete", "/topic/empty", "/topic/pause", "/topic/unpause",
                    "/channel/create", "/channel/delete", "/channel/empty", "/channel/pause",
                    "/channel/unpause"]
LOOKUPD_POST_ROUTES = ["/topic/create", "/topic/delete", "/channel/create", "/channel/delete",
                       "/topic/tombstone"]
LOOKUPD_GET_ROUTES = ["/lookup", "/topics", "/channels", "/nodes", "/debug", "/info", "/ping"]
METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]


def _q(rng: random.Random, keys: list[str]) -> str:
    """A query string: some of ``keys`` with names from NAMES, sometimes raw, sometimes encoded,
    sometimes repeated, empty or malformed."""
    parts = []
    for key in keys:
        roll = rng.random()
        if roll < 0.12:
            continue
        name = rng.choice(NAMES)
        if roll < 0.5:
            value = quote(name, safe="")
        else:
            value = name.replace(" ", "+")
        parts.append(f"{key}={value}")
        if rng.random() < 0.05:
            parts.append(f"{key}={rng.choice(NAMES[:4])}")
    extra = rng.random()
    if extra < 0.05:
        parts.append("%zz=1")
    elif extra < 0.1:
        parts.append("novalue")
    query = "&".join(parts)
    if not query:
        return rng.choice(["", "?"])
    return "?" + query


def _path_variant(rng: random.Random, path: str) -> str:
    roll = rng.random()
    if roll < 0.8:
        return path
    if roll < 0.85:
        return path + "/"
    if roll < 0.9:
        return path.upper()
    if roll < 0.95:
        return "/" + path
    return path.replace("/", "/./", 1)


def chunked(body: bytes, size: int = 7) -> bytes:
    """``body`` in chunked transfer coding, ``size`` bytes a chunk."""
    pieces = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def _framed(rng: random.Random, req: Request) -> Request:
    """A publish's body sometimes chunked (no length to refuse early) or after ``Expect:
    100-continue``."""
    roll = rng.random()
    if req.body is not None and req.method == "POST" and roll < 0.3:
        if roll < 0.15:
            req.headers = [("Transfer-Encoding", "chunked")]
            req.body = chunked(req.body, rng.choice([1, 100, 1000, 5000]))
        else:
            req.headers = [("Expect", "100-continue")]
    return req


def nsqd_request(rng: random.Random) -> Request:
    kind = rng.random()
    if kind < 0.25:
        query = _q(rng, ["topic", "defer"])
        query = re.sub(r"defer=[^&]*", lambda _: "defer=" + rng.choice(
            # (a valid delay is long: a message that turns ready during the run would make
            # /stats depend on when each side's queue scan ran)
            ["0", "3600000", "-1", "abc", "99999999999", "18446744073709551615",
             "9223372036854775807", "3600001", ""]), query)
        body = rng.choice([b"", b"hello", b"x" * 2048, b"x" * 2049, b"\x00\xff"])
        return _framed(rng, Request("nsqd", rng.choice(["POST"] * 9 + ["GET", "PUT"]),
                                    _path_variant(rng, "/pub") + query, body))
    if kind < 0.4:
        query = _q(rng, ["topic", "binary"])
        query = re.sub(r"binary=[^&]*", lambda _: "binary=" + rng.choice(
            ["true", "false", "1", "0", "yes", ""]), query)
        body = rng.choice([b"a\nb\n", b"\n\n", b"", b"one", b"x" * 2049 + b"\n",
                           _binary_mpub([b"a", b"bb"]), _binary_mpub([]),
                           _binary_mpub([b"x" * 3000]), _binary_mpub([b"a"])[:-1],
                           b"\x00\x00\x00\x02\x00\x00\x00\x01a"])
        return _framed(rng, Request("nsqd", "POST", _path_variant(rng, "/mpub") + query, body))
    if kind < 0.65:
        path = rng.choice(NSQD_POST_ROUTES)
        keys = ["topic", "channel"] if path.startswith("/channel") else ["topic"]
        method = rng.choice(["POST"] * 8 + ["GET", "DELETE"])
        return Request("nsqd", method, _path_variant(rng, path) + _q(rng, keys),
                       b"" if method != "GET" else None)
    if kind < 0.75:
        query = _q(rng, ["topic", "channel"])
        extra = rng.choice(["", "format=json", "format=text", "include_clients=false",
                            "include_mem=false", "format=json&include_clients=true", "format=xml"])
        if extra:
            query = (query + "&" if query not in ("", "?") else "?") + extra
        return Request("nsqd", "GET", _path_variant(rng, "/stats") + query)
    if kind < 0.88:
        opt = rng.choice(CONFIG_KEYS + ["nope", "LOG_LEVEL", ""])
        if rng.random() < 0.7:
            return Request("nsqd", "GET", _path_variant(rng, f"/config/{opt}"))
        body = rng.choice([b'["127.0.0.1:1"]', b"null", b"[]", b"{}", b"[1]", b"nope", b"", b"debug",
                           b"WARN", b"fatal", b'"127.0.0.1:1"'])
        return Request("nsqd", "PUT", f"/config/{rng.choice(['nsqlookupd_tcp_addresses', 'log_level', opt])}",
                       body)
    if kind < 0.93:
        return Request("nsqd", rng.choice(METHODS), _path_variant(rng, rng.choice(
            ["/ping", "/info", "/", "/nope", "/topic", "/config", "/debug/setblockrate",
             "/debug/freememory"])) + rng.choice(["", "?", "?rate=5", "?rate=x"]))
    method = rng.choice(METHODS)
    return Request("nsqd", method, rng.choice(["/pub", "/mpub", "/stats", "/ping", "/info",
                                               *NSQD_POST_ROUTES]) + _q(rng, ["topic"]),
                   b"x" if method in ("POST", "PUT") else None)


def lookupd_request(rng: random.Random) -> Request:
    kind = rng.random()
    if kind < 0.45:
        path = rng.choice(LOOKUPD_GET_ROUTES)
        keys = {"/lookup": ["topic"], "/channels": ["topic"]}.get(path, [])
        return Request("nsqlookupd", rng.choice(["GET"] * 8 + ["POST", "HEAD"]),
                       _path_variant(rng, path) + _q(rng, keys))
    if kind < 0.85:
        path = rng.choice(LOOKUPD_POST_ROUTES)
        keys = {"/channel/create": ["topic", "channel"], "/channel/delete": ["topic", "channel"],
                "/topic/tombstone": ["topic", "node"]}.get(path, ["topic"])
        query = _q(rng, keys)
        query = re.sub(r"node=[^&]*", lambda _: "node=" + rng.choice(
            ["127.0.0.1:1", "<node>", "nope", ""]), query)
        return Request("nsqlookupd", rng.choice(["POST"] * 8 + ["GET", "PUT"]),
                       _path_variant(rng, path) + query, b"")
    return Request("nsqlookupd", rng.choice(METHODS), _path_variant(rng, rng.choice(
        ["/", "/nope", "/topic", "/lookup", "/ping"])) + rng.choice(["", "?", "?topic=t1"]),
        b"" if rng.random() < 0.3 else None)


def _binary_mpub(bodies: list[bytes]) -> bytes:
    out = len(bodies).to_bytes(4, "big")
    for b in bodies:
        out += len(b).to_bytes(4, "big") + b
    return out


CONFIG_KEYS: list[str] = []


def settle(fetch, sides, tries: int = 40) -> None:
    """Wait until each side's answers to ``fetch`` stop changing (background registration)."""
    last = None
    for _ in range(tries):
        now = [fetch(side) for side in sides]
        if now == last:
            return
        last = now
        time.sleep(0.05)
