"""nsqadmin side by side with upstream's: one cluster, two nsqadmin answering the same requests.

The cluster holds nsqlookupd (ours), one upstream v1.3.0 nsqd and one of ours; an upstream
nsqadmin and ours run with the same flags against it (and post their notifications to one sink).
Upstream's binaries come from ``NSQ_UPSTREAM_BIN`` (``helpers.upstream``). Without them a second
nsqd of ours stands in for upstream's, and our nsqadmin's answers are compared with upstream
nsqadmin's as recorded (``tests/recordings/http/``, ``helpers.recording``): both in a canonical
form (``canonical``), ports by role, the host name masked, every list sorted, as Go's map order
and the order answers arrive make upstream's orders vary.

Answers are compared as ``(status, headers that matter, body)``, bodies as JSON where they are
JSON, with the fields that depend on the clock masked (``connect_ts``, ``connected``,
``timestamp``) and each nsqadmin's own address replaced by a placeholder.
"""

from __future__ import annotations

import difflib
import http.client
import json
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from admin.admin_util import NotificationSink, NsqAdmin
from helpers.recording import Recording, current_test, encode
from helpers.servers import Nsqd, Nsqlookupd, ServerProcess, free_port
from helpers.upstream import have, upstream_dir

UPSTREAM_BIN = upstream_dir()
HAVE_UPSTREAM = have("nsqd", "nsqadmin")

#: response headers whose presence and value must match (names compared case-insensitively)
HEADERS = ("content-type", "x-nsq-content-type", "location", "allow", "content-encoding")
#: fields that depend on when the answer was made
CLOCK_FIELDS = {"connect_ts", "connected", "timestamp"}


class UpstreamNsqd(ServerProcess):
    def __init__(self, directory: Path, *extra: str) -> None:
        self.tcp_port, self.http_port = free_port(), free_port()
        directory.mkdir(parents=True, exist_ok=True)
        argv = [str(UPSTREAM_BIN / "nsqd"), f"--tcp-address=127.0.0.1:{self.tcp_port}",
                f"--http-address=127.0.0.1:{self.http_port}", "--broadcast-address=127.0.0.1",
                f"--data-path={directory}", *extra]
        super().__init__(argv, f"http://127.0.0.1:{self.http_port}/ping",
                         directory / "nsqd.log")

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"


class UpstreamNsqAdmin(ServerProcess):
    def __init__(self, log_dir: Path, *flags: str) -> None:
        self.http_port = free_port()
        log_dir.mkdir(parents=True, exist_ok=True)
        argv = [str(UPSTREAM_BIN / "nsqadmin"), f"--http-address=127.0.0.1:{self.http_port}",
                *flags]
        super().__init__(argv, f"http://127.0.0.1:{self.http_port}/ping",
                         log_dir / f"nsqadmin_{self.http_port}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: Any


def raw_request(port: int, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def mask(value: Any) -> Any:
    """The document with clock-dependent fields replaced by ``"<clock>"``."""
    if isinstance(value, dict):
        return {k: "<clock>" if k in CLOCK_FIELDS else mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


def answer(port: int, method: str, path: str, body: bytes | None = None,
           headers: dict[str, str] | None = None) -> Answer:
    """One request, reduced to what must match; ``127.0.0.1:<port>`` of the nsqadmin itself
    becomes ``<admin>`` (it appears in notification URLs and ``/config/http_address``)."""
    status, got_headers, raw = raw_request(port, method, path, body, headers)
    text = raw.decode("utf-8", "replace").replace(f"127.0.0.1:{port}", "<admin>")
    try:
        parsed: Any = mask(json.loads(text)) if text else text
    except ValueError:
        parsed = text
    kept = tuple((k, got_headers[k]) for k in HEADERS if k in got_headers)
    return Answer(status, kept, parsed)


def same_answer(ours: Callable[[], Answer], theirs: Callable[[], Answer],
                tries: int = 30) -> tuple[Answer, Answer]:
    """Ours once, then upstream's until it matches (at most ``tries`` times).

    Upstream orders nodes with equal hostnames as their answers happen to arrive, so one
    request may list the two nsqd either way round; ours picks one of those orders (by
    address). Asking upstream again until it shows the same order compares everything else
    exactly. Returns the last pair (equal unless upstream never matched)."""
    mine = ours()
    for _ in range(tries):
        other = theirs()
        if other == mine:
            break
        time.sleep(0.02)
    return mine, other


def rename(value: Any, old: str, new: str) -> Any:
    """``value`` with the name ``old`` replaced by ``new`` in every string and key."""
    pattern = re.compile(re.escape(old))
    if isinstance(value, dict):
        return {pattern.sub(new, k): rename(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [rename(v, old, new) for v in value]
    if isinstance(value, str):
        return pattern.sub(new, value)
    return value


@dataclass
class PairCluster:
    lookupd: Nsqlookupd
    up_nsqd: UpstreamNsqd | Nsqd  # ours in its place without upstream's binaries
    py_nsqd: Nsqd
    up_admin: UpstreamNsqAdmin | None  # None without upstream's binaries: recorded answers
    py_admin: NsqAdmin
    sink: NotificationSink
    procs: list[ServerProcess]
    dead_port: int | None = None  # a registered nsqd that is not there (the tests' own)

    @property
    def nodes(self) -> list[Any]:
        return [self.up_nsqd, self.py_nsqd]

    def roles(self) -> dict[int, str]:
        """Each port of the cluster by its role (the same in every run and on both sides)."""
        out = {self.lookupd.tcp_port: "<lookupd-tcp>", self.lookupd.http_port: "<lookupd-http>",
               self.up_nsqd.tcp_port: "<nsqd-a-tcp>", self.up_nsqd.http_port: "<nsqd-a-http>",
               self.py_nsqd.tcp_port: "<nsqd-b-tcp>", self.py_nsqd.http_port: "<nsqd-b-http>"}
        for admin in (self.up_admin, self.py_admin):
            if admin is not None:
                out[admin.http_port] = "<admin-port>"
        if self.dead_port is not None:
            out[self.dead_port] = "<dead>"
        out[int(self.sink.url.rsplit(":", 1)[1].split("/")[0])] = "<sink>"
        return out

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.sink.close()


LATENCIES = {"average", "min", "max", "value"}


def canonical(value: Any, roles: dict[int, str]) -> Any:
    """``value`` as recorded: ports by role (as numbers and in ``host:port`` strings), the
    machine's host name and measured latencies masked, every list sorted."""
    if isinstance(value, Answer):
        return (value.status, canonical(value.headers, roles), canonical(value.body, roles))
    if isinstance(value, dict):
        if "quantile" in value:  # an e2e latency percentile: how long messages took this time
            value = {k: "<ns>" if k in LATENCIES and v else v for k, v in value.items()}
        return {canonical(k, roles): canonical(v, roles) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [canonical(v, roles) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True)) \
            if isinstance(value, list) else tuple(items)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in roles:
        return roles[value]
    if isinstance(value, str):  # ports of the cluster by role, a client's as <port>
        value = re.sub(r"(?<=:)(\d+)\b(?!\.)", lambda m: roles.get(int(m.group(1)), "<port>"), value)
        return value.replace(socket.gethostname(), "<hostname>")
    return value


def _lines(value: Any) -> list[str]:
    return json.dumps(encode(value), indent=1, sort_keys=True).splitlines()


class RecordedAnswers:
    """Upstream nsqadmin's answers in one test module, case by case: the test, a running count
    (the same request may come twice in a test) and the request, ports by role."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._count: dict[str, int] = {}

    def case(self, cl: PairCluster, what: str) -> str:
        test = current_test()
        self._count[test] = n = self._count.get(test, 0) + 1
        return f"{test} #{n} {canonical(what, cl.roles())}"

    def compare(self, cl: PairCluster, what: str, ours: Any, theirs: Callable[[], Any]) -> Any:
        """Upstream's answer (``theirs()`` live, else recorded) == ``ours``; live, the whole
        answers are compared, recorded their canonical forms. Returns upstream's."""
        roles = cl.roles()
        up = self.recording.answer(self.case(cl, what), theirs, kept=lambda a: canonical(a, roles))
        if cl.up_admin is None:
            mine = canonical(ours, roles)
            assert mine == up, f"{what}\n" + "\n".join(difflib.unified_diff(
                _lines(up), _lines(mine), "upstream (recorded)", "ours", lineterm=""))
        else:
            assert ours == up, f"{what}\nours:     {ours}\nupstream: {up}"
        return up


def start_pair_cluster(tmp: Path, *admin_flags: str, nsqd_flags: tuple[str, ...] = (),
                       direct: bool = False) -> PairCluster:
    """The cluster and both nsqadmin with ``admin_flags``; ``direct``: the nsqadmin are given
    the two nsqd (``--nsqd-http-address``) instead of the nsqlookupd."""
    procs: list[ServerProcess] = []
    sink = NotificationSink()
    try:
        lookupd = Nsqlookupd(tmp / "lookupd")
        procs.append(lookupd)
        reg = f"--lookupd-tcp-address={lookupd.tcp_address}"
        live = HAVE_UPSTREAM
        up = (UpstreamNsqd if live else Nsqd)(tmp / "nsqd_up", reg, *nsqd_flags)
        procs.append(up)
        py = Nsqd(tmp / "nsqd_py", reg, *nsqd_flags)
        procs.append(py)
        if direct:
            where = [f"--nsqd-http-address={n.http_address}" for n in (up, py)]
        else:
            where = [f"--lookupd-http-address={lookupd.http_address}"]
        flags = [*where, f"--notification-http-endpoint={sink.url}", *admin_flags]
        up_admin = UpstreamNsqAdmin(tmp / "admin_up", *flags) if live else None
        if up_admin is not None:
            procs.append(up_admin)
        py_admin = NsqAdmin(tmp / "admin_py", *flags)
        procs.append(py_admin)
    except BaseException:
        for proc in reversed(procs):
            proc.stop()
        sink.close()
        raise
    return PairCluster(lookupd, up, py, up_admin, py_admin, sink, procs)
