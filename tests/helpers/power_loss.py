"""An nsqd whose data path is on a disk that loses power (helpers.powercut), and the checks of
what a power cut may take: used by the power-loss tests of the disk queue, the history and the
replication peer.

A round: publishers (helpers.chaos: TCP PUB, MPUB, DPUB, HTTP /pub, /mpub, several of each kind
at once) run until a seeded number of publishes was acknowledged; then the power goes: nsqd is
killed with SIGKILL, the disk drops what was not fsynced (a seeded half of the cuts also tear a
page), the machine comes back on what survived and nsqd starts again on the same data path, ports
and flags. An *armed* round (:func:`armed_round`) lets the disk cut itself instead, at a seeded
write or fsync: inside a group commit's ``pwritev`` or ``fdatasync``. The tests then read what
nsqd kept and hold it against what was acknowledged, and what was refused.

The committed tests use fixed seeds; ``NSQPY_POWER_SEED=<n>`` runs each with seed ``n`` instead
(:func:`seeds`), to explore: ``for n in $(seq 1 50); do NSQPY_POWER_SEED=$n pytest ...; done``.
"""

from __future__ import annotations

import os
import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from helpers.chaos import HttpPublisher, TcpPublisher, stop_publishers
from helpers.polling import wait_for
from helpers.powercut import PowerCutFS
from helpers.servers import Nsqd

#: a published body: ``<tag>-<7-digit sequence number>``, the tag naming round and publisher
BODY = re.compile(rb"(r\d+[a-z]+\d+)-(\d{7})\.*")


class PowerCutNsqd:
    """nsqd with ``--data-path`` on a power-cut disk; its log stays off that disk (``where``)."""

    def __init__(self, fs: PowerCutFS, where: Path, *flags: str, server: type = Nsqd) -> None:
        """``server``: the nsqd to run (a subclass of :class:`Nsqd` runs upstream's binary)."""
        self.fs = fs
        self.where = where
        self.flags = flags
        root = fs.mount()
        self.data = root / "data"
        self.data.mkdir()
        fs.sync()  # the empty data path is on the disk before nsqd starts
        self.node: Nsqd | None = server(where, f"--data-path={self.data}", *flags)
        self.log_seen = 0

    @property
    def tcp_address(self) -> str:
        return self.node.tcp_address

    @property
    def http_address(self) -> str:
        return self.node.http_address

    def power_cut(self, tear: bool, seed: int) -> dict:
        """The power goes: nsqd dies on the spot, the disk keeps only what was made durable."""
        self.node.kill9()
        return self.fs.cut(tear=tear, seed=seed)

    def power_cut_armed(self, timeout: float) -> dict:
        """The disk cut itself (:meth:`PowerCutFS.arm`): nsqd dies on the spot, as it would
        have with the power, and the dead mount goes away."""
        report = self.fs.wait_tripped(timeout)
        self.node.kill9()
        self.fs.unplug()
        return report

    def power_on(self) -> None:
        """The machine comes back: the disk is mounted as it survived and nsqd starts on it."""
        self.log_seen = len(self.node.log())
        self.fs.mount()
        self.node = self.node.restart(f"--data-path={self.data}", *self.flags)

    def log_since_power_on(self) -> str:
        return self.node.log()[self.log_seen:]

    def close(self) -> None:
        """Stop nsqd (by PID), then the disk, cleanly."""
        if self.node is not None:
            self.node.stop_all()
        self.fs.stop()


KINDS = ("pub", "mpub", "dpub", "hpub", "hmpub")


def seeds(*fixed: int) -> list[int]:
    """A test's seeds: ``fixed``, or the one ``NSQPY_POWER_SEED`` names (exploration)."""
    chosen = os.environ.get("NSQPY_POWER_SEED")
    return [int(chosen)] if chosen else list(fixed)


def publishers(node: PowerCutNsqd, topic: str, round_no: int, per_kind: int,
               kinds: tuple[str, ...] = KINDS) -> list:
    """``per_kind`` publishers of each kind, as fast as nsqd answers: TCP ``pub``, ``mpub`` (of
    5), ``dpub`` (100 ms), HTTP ``hpub`` (/pub) and ``hmpub`` (/mpub of 3); and, when asked
    for, ``bigmpub`` (TCP MPUB of 25 bodies of ~420 bytes)."""
    tcp, http = node.tcp_address, node.http_address
    make = {"pub": lambda tag: TcpPublisher(tcp, topic, tag, pause=0),
            "mpub": lambda tag: TcpPublisher(tcp, topic, tag, batch=5, pause=0),
            "dpub": lambda tag: TcpPublisher(tcp, topic, tag, defer_ms=100, pause=0),
            "hpub": lambda tag: HttpPublisher(http, topic, tag, pause=0),
            "hmpub": lambda tag: HttpPublisher(http, topic, tag, batch=3, pause=0),
            "bigmpub": lambda tag: _padded(TcpPublisher(tcp, topic, tag, batch=25, pause=0))}
    return [make[kind](f"r{round_no}{kind}{k}") for k in range(per_kind) for kind in kinds]


def _padded(publisher: TcpPublisher) -> TcpPublisher:
    publisher.pad = 400  # an MPUB of ~10 KB: its pwritev spans pages, a cut can fall inside
    return publisher


def run_until_cut(node: PowerCutNsqd, pubs: list, rng: random.Random, low: int, high: int,
                  tear: bool, meanwhile: Callable[[], None] | None = None) -> dict:
    """Start the publishers, cut the power (``tear``: tearing pages) once a seeded number in
    ``[low, high]`` of their publishes was acknowledged (then ``meanwhile``), stop them.
    Returns the cut's report."""
    target = rng.randint(low, high)
    seed = rng.randrange(1 << 32)
    for p in pubs:
        p.start()
    wait_for(lambda: sum(len(p.acked) for p in pubs) >= target, 120,
             f"{target} acknowledged publishes")
    report = node.power_cut(tear, seed)
    if meanwhile is not None:
        meanwhile()
    stop_publishers(pubs)
    return {**report, "tear": tear, "seed": seed, "target": target}


def armed_round(node: PowerCutNsqd, pubs: list, rng: random.Random, match: str = "",
                tear: bool | None = None, meanwhile: Callable[[], None] | None = None,
                rolls: bool = False) -> dict:
    """Arm the disk to cut itself at a seeded ``write`` or ``fsync`` (of a path containing
    ``match``: ``.seg``, ``.diskqueue.0`` for the data files), start the publishers, and when
    the cut went off kill nsqd, stop them and power on again. ``tear`` None: seeded too.
    ``meanwhile`` runs as soon as nsqd is dead (another process dying with it). ``rolls``: the
    files roll every few batches, so the cut may also come at a directory's fsync (the one
    that makes a new file's name durable: ``match`` does not apply to it)."""
    on = rng.choices(("write", "fsync", "fsyncdir"), (2, 2, 1 if rolls else 0))[0]
    if on == "fsyncdir":
        match = ""
    after = {"write": rng.randint(20, 400), "fsync": rng.randint(20, 250),
             "fsyncdir": rng.randint(1, 6)}[on]
    tear = rng.random() < 0.5 if tear is None else tear
    node.fs.arm(on, after, match=match, tear=tear, seed=rng.randrange(1 << 32))
    for p in pubs:
        p.start()
    try:
        report = node.power_cut_armed(120)
        if meanwhile is not None:
            meanwhile()
    finally:
        stop_publishers(pubs)
    node.power_on()
    no_tracebacks(node.log_since_power_on())
    return {**report, "after": after, "tear": tear}


def cut_round(node: PowerCutNsqd, pubs: list, rng: random.Random, low: int, high: int,
              tear: bool, meanwhile: Callable[[], None] | None = None) -> dict:
    """:func:`run_until_cut`, then the power back on; nsqd must start without a traceback."""
    report = run_until_cut(node, pubs, rng, low, high, tear, meanwhile)
    node.power_on()
    no_tracebacks(node.log_since_power_on())
    return report


def publish_then_idle(node: PowerCutNsqd, topic: str, round_no: int,
                      kinds: tuple[str, ...] = KINDS) -> list:
    """One publisher of each kind until 100 publishes were acknowledged, then nothing until
    the disk holds no unsynced data: what ``--sync-timeout`` promises to make durable."""
    pubs = publishers(node, topic, round_no, per_kind=1, kinds=kinds)
    for p in pubs:
        p.start()
    wait_for(lambda: sum(len(p.acked) for p in pubs) >= 100, 60, "100 early publishes")
    for p in pubs:
        p.stop.set()
        p.join(30)
    wait_for(lambda: node.fs.stats()["unsynced_files"] == 0, 15,
             "nsqd's --sync-timeout fsync of what was published")
    return pubs


def acked(pubs: list) -> list[bytes]:
    return [body for p in pubs for body in p.acked]


def lost(pubs: list, kept: list[bytes]) -> list[bytes]:
    """The acknowledged bodies not in ``kept``."""
    have = set(kept)
    return [b for b in acked(pubs) if b not in have]


def check_kept(pubs: list, kept: list[bytes], *, complete: bool = True,
               exactly_once: bool = True, torn: int = 0, torn_acked: bool = False,
               deferred_kept: bool = True) -> None:
    """What nsqd kept against what ``pubs`` (all the round's publishers) sent: with
    ``complete`` every acknowledged body (``deferred_kept`` False: but for DPUBs, which wait in
    a channel's memory until due); with ``exactly_once`` none twice; no body that was never
    sent, but for at most ``torn`` torn copies (the body's first bytes, then zeros: a record
    whose page was torn by the cut and read as a message) of bodies never acknowledged
    (``torn_acked``: or acknowledged, when the cut may take acknowledged ones)."""
    if complete:
        missing = lost([p for p in pubs if deferred_kept or "dpub" not in p.tag], kept)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    counts = Counter(kept)
    sent = {p.tag: p.n for p in pubs}
    strange = [b for b in counts if not _was_sent(b, sent)]
    if strange:
        yes = set(acked(pubs))
        originals = [p.body(i) for p in pubs for i in range(p.n)]
        originals = [b for b in originals if torn_acked or b not in yes]
        copies = [b for b in strange if _torn_copy(b, originals)]
        assert copies == strange and len(copies) <= torn, \
            f"{len(strange)} messages nobody sent ({torn} torn copies allowed), e.g. {strange[:5]}"
    if exactly_once:
        twice = [b for b, n in counts.items() if n > 1]
        assert not twice, f"{len(twice)} messages kept twice, e.g. {twice[:5]}"


def _was_sent(body: bytes, sent: dict[str, int]) -> bool:
    m = BODY.fullmatch(body)
    return m is not None and int(m.group(2)) < sent.get(m.group(1).decode(), 0)


def _torn_copy(body: bytes, originals: list[bytes]) -> bool:
    head = body.rstrip(b"\0")
    return any(len(o) == len(body) and o.startswith(head) for o in originals)


def check_prefixes(pubs: list, kept: list[bytes]) -> None:
    """What survives of each publisher is a prefix of what it sent (``--sync-every=N``: a log
    synced from its start up to some point, no holes): an acknowledged body is missing only if
    every later body of the same publisher is missing too. Only after a cut that tore nothing:
    a torn writeback may keep the first pages of a new file and not the last of the one before,
    which nothing fsynced, as a real disk may."""
    have = set(kept)
    for p in pubs:
        bodies = [p.body(i) for i in range(p.n)]
        present = [b in have for b in bodies]
        first_gap = present.index(False) if False in present else len(present)
        after = [b for b, ok in zip(bodies[first_gap:], present[first_gap:]) if ok]
        assert not after, (f"{p.tag}: a hole: {bodies[first_gap]!r} lost but {len(after)} "
                           f"later ones kept, e.g. {after[:3]}")


def refused(pubs: list) -> list[bytes]:
    """The bodies nsqd refused (an error frame, an HTTP error status)."""
    return [body for p in pubs for body in p.refused]


def check_refused_not_kept(pubs: list, kept: list[bytes]) -> None:
    """A publish nsqd refused left nothing behind: a client retries it, so a copy kept would be
    a duplicate nobody can tell from a second publish."""
    have = set(kept)
    back = [b for b in refused(pubs) if b in have]
    assert not back, f"{len(back)} refused messages kept, e.g. {back[:5]}"


def bad_files(data: Path) -> set[str]:
    """Files moved aside as ``.bad`` anywhere in the data path."""
    return {str(p.relative_to(data)) for p in data.rglob("*.bad")}


def no_bad_files(node: PowerCutNsqd) -> None:
    """A torn tail is cut in place, and a power cut leaves nothing else to set aside: no
    ``.bad`` file after any cut (docs/operations.md, "Power loss")."""
    bad = bad_files(node.data)
    assert not bad, f"{sorted(bad)} set aside after a power cut"


def no_tracebacks(log: str) -> None:
    assert "Traceback" not in log, log[-3000:]


def wait_persisted(node: PowerCutNsqd, *names: str) -> None:
    """Topics and channels made before the rounds are in nsqd.dat (written off the event loop,
    after the create was answered: docs/operations.md)."""
    path = node.data / "nsqd.dat"
    wait_for(lambda: path.exists() and all(n in path.read_text() for n in names), 20,
             f"nsqd.dat to list {names}")


__all__ = ["PowerCutNsqd", "acked", "armed_round", "bad_files", "check_kept", "check_prefixes",
           "check_refused_not_kept", "cut_round", "lost", "no_bad_files", "no_tracebacks",
           "publish_then_idle", "publishers", "refused", "run_until_cut", "seeds",
           "wait_persisted"]
