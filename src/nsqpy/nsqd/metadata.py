"""``nsqd.dat``: the topics, channels and pause states an nsqd restores at start (upstream's JSON),
plus our sidecar that keeps deferred messages' due times across a restart.

nsqd.dat is read as upstream's ``json.Unmarshal`` reads it (a damaged file is named with Go's own
error text), rebuilt from the disk queues' names when damaged, and written by
:class:`MetadataWriter` on a thread of its own. Both files are written atomically (temp file,
fsync, rename). The sidecar is additive: the deferred
messages themselves go into the channel's disk queue exactly as upstream writes them, so either
implementation can read the data directory; only nsqpy also restores their remaining delay.
"""

from __future__ import annotations

import asyncio
import fcntl

import logging
import os
import re
import threading
import time
from typing import Any, Callable, Iterable, Iterator

from .. import NSQ_COMPAT_VERSION
from ..common.goerrno import path_error
from ..protocol.gojson import GoJSONError, fold_key, loads
from ..protocol.goscan import unmarshal_syntax_error
from ..common.goweb import go_json
from ..protocol.names import is_ephemeral, is_valid_name

METADATA_FILE = "nsqd.dat"


class GoPathError(OSError):
    """An OSError whose text is Go's ``*os.PathError`` (``open <path>: permission denied``): what
    upstream's nsqd logs, and prints in its FATAL line, when a file cannot be written."""

    def __init__(self, op: str, path: str, err: OSError) -> None:
        super().__init__(err.errno, path_error(op, path, err))

    def __str__(self) -> str:
        return str(self.strerror)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``path`` through a fsynced temp file and a rename, as upstream's ``writeSyncFile``;
    a failure raises :class:`GoPathError` with Go's text (the temp name is upstream's shape)."""
    tmp = f"{path}.{int.from_bytes(os.urandom(8), 'big') >> 1}.tmp"
    op = "open"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            op = "write"
            os.write(fd, data)
            op = "sync"
            os.fsync(fd)
        finally:
            os.close(fd)
        op = "rename"
        os.replace(tmp, path)
    except OSError as err:
        if op != "open":
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise GoPathError(op, tmp if op != "rename" else f"{tmp} {path}", err) from None


def encode_metadata(topics: list[dict[str, Any]]) -> bytes:
    return go_json({"topics": topics, "version": NSQ_COMPAT_VERSION})


def join_metadata(entries: Iterable[bytes]) -> bytes:
    """nsqd.dat from its topic entries encoded one by one: the same bytes as
    :func:`encode_metadata` of the whole list, built in pieces a writer can pause between."""
    return b'{"topics":[' + b",".join(entries) + b'],"version":' + _VERSION + b"}"


_VERSION = go_json(NSQ_COMPAT_VERSION)


class MetadataDamaged(ValueError):
    """nsqd.dat exists but upstream's ``json.Unmarshal`` would refuse it; the text is
    upstream's: ``failed to parse metadata in <path> - <Go's error>``."""


def read_metadata(data_path: str) -> list[dict[str, Any]] | None:
    """The topics list, or None when there is no file (a fresh start); MetadataDamaged when
    upstream's nsqd would refuse to start with it (invalid JSON, empty, cut short, wrong types)."""
    path = os.path.join(data_path, METADATA_FILE)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    problem = unmarshal_syntax_error(raw)
    doc = None
    if problem is None:
        doc = loads(raw)  # valid to Go, so the codec reads it (big numbers, bad UTF-8, ...)
        problem = _type_error(doc)
        doc = doc or {}  # a file holding just null: no topics, as Go decodes it
    if problem is not None:
        raise MetadataDamaged(f"failed to parse metadata in {os.path.normpath(path)} - {problem}")
    return [_entry(t, ("name", "paused", "channels")) for t in _field(doc, "topics") or []]


def _entry(raw: dict[str, Any] | None, fields: tuple[str, ...]) -> dict[str, Any]:
    """A topic's or channel's entry as Go decodes it: keys matched as Go matches them, absent
    or null ones zero (a null entry is an entry with an empty name, skipped as invalid)."""
    raw = raw or {}
    out: dict[str, Any] = {"name": _field(raw, "name") or "", "paused": bool(_field(raw, "paused"))}
    if "channels" in fields:
        out["channels"] = [_entry(c, ("name", "paused")) for c in _field(raw, "channels") or []]
    if raw.get("config") is not None:  # nsqpy's lifecycle settings (upstream ignores the key)
        out["config"] = raw["config"]
    return out


# Go's decoder into upstream's Metadata struct: which value does not fit, with its words
_STRUCTS = {"Metadata": {"topics": ("[]", "TopicMetadata"), "version": ("", "string")},
            "TopicMetadata": {"name": ("", "string"), "paused": ("", "bool"),
                              "channels": ("[]", "ChannelMetadata")},
            "ChannelMetadata": {"name": ("", "string"), "paused": ("", "bool")}}
_KINDS = {str: "string", bool: "bool", int: "number", float: "number", list: "array",
          dict: "object"}


def _field(doc: dict[str, Any], name: str) -> Any:
    """A struct field's value as Go finds it: the exact key, else one Go's key folding matches."""
    if name in doc:
        return doc[name]
    return next((v for k, v in doc.items() if fold_key(k) == name), None)


def _type_error(doc: Any, struct: str = "Metadata", path: str = "") -> str | None:
    """Go's first ``json: cannot unmarshal ...`` for a parsed nsqd.dat, or None."""
    if not isinstance(doc, dict):
        if doc is None:
            return None
        where = ("Go value of type nsqd.Metadata" if not path
                 else f"Go struct field {struct}.{path} of type nsqd.{struct}")
        return f"json: cannot unmarshal {_KINDS[type(doc)]} into {where}"
    for name, (shape, kind) in _STRUCTS[struct].items():
        value = _field(doc, name)
        if value is None:
            continue
        here = f"{path}.{name}" if path else name
        if shape == "[]":
            if not isinstance(value, list):
                return (f"json: cannot unmarshal {_KINDS[type(value)]} into Go struct field "
                        f"{struct}.{here} of type []nsqd.{kind}")
            for item in value:
                if item is not None and not isinstance(item, dict):
                    return (f"json: cannot unmarshal {_KINDS[type(item)]} into Go struct field "
                            f"{struct}.{here} of type nsqd.{kind}")
                problem = _type_error(item, kind, here) if item is not None else None
                if problem is not None:
                    return problem
        elif _KINDS[type(value)] != kind:
            return (f"json: cannot unmarshal {_KINDS[type(value)]} into Go struct field "
                    f"{struct}.{here} of type {kind}")
    return None


# --- a damaged nsqd.dat: topics and channels found again from the disk queues' names ---------
#
# Upstream's nsqd refuses to start on a damaged nsqd.dat; ours rebuilds the topic and channel set
# from the queue files (issue #36, docs/operations.md). Every disk queue nsqd writes is named after
# what it holds: ``<topic>.diskqueue.*`` and ``<topic>:<channel>.diskqueue.*`` (data files
# ``%06d.dat``, ``meta.dat``). Neither name may contain ``:`` (upstream's rule
# ``^[.a-zA-Z0-9_-]+(#ephemeral)?$``), so a file name splits one way only, read from its right
# end; an ephemeral topic or channel never has a disk queue. A file that looks like a queue but
# does not split into valid, durable names is not one nsqd wrote: nobody can say what it belongs
# to, and nsqd refuses to start rather than guess.

_QUEUE_FILE = re.compile(r"(.+)\.diskqueue\.(?:meta|\d{6,})\.dat")


def queues_on_disk(data_path: str) -> tuple[dict[str, list[str]], list[str]]:
    """The topics whose disk queues are in ``data_path`` with their channels' names (sorted),
    and the queue-like files that belong to no valid durable topic or channel."""
    topics: dict[str, set[str]] = {}
    strays: list[str] = []
    for entry in sorted(os.listdir(data_path)):
        match = _QUEUE_FILE.fullmatch(entry)
        if match is None:
            continue
        topic, colon, channel = match.group(1).partition(":")
        names = (topic, channel) if colon else (topic,)
        if not all(is_valid_name(n) and not is_ephemeral(n) for n in names):
            strays.append(entry)
            continue
        channels = topics.setdefault(topic, set())
        if colon:
            channels.add(channel)
    return {name: sorted(channels) for name, channels in sorted(topics.items())}, strays


def deferred_sidecar_path(data_path: str, queue_name: str) -> str:
    return os.path.join(data_path, f"{queue_name}.diskqueue.deferred.json")


def write_deferred_sidecar(data_path: str, queue_name: str, due: dict[bytes, int]) -> None:
    """Due times (unix ns) of the deferred messages just flushed to the queue, by message id."""
    path = deferred_sidecar_path(data_path, queue_name)
    if not due:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    atomic_write(path, go_json({k.decode(): v for k, v in due.items()}))


def take_deferred_sidecar(data_path: str, queue_name: str) -> dict[bytes, int]:
    """Read and remove the sidecar (a crash after this only loses delays, never messages)."""
    path = deferred_sidecar_path(data_path, queue_name)
    try:
        with open(path, "rb") as fh:
            doc = loads(fh.read())
        os.unlink(path)
    except (OSError, GoJSONError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {k.encode(): int(v) for k, v in doc.items() if isinstance(v, int) and len(k) == 16}


class DataPathLock:
    """An exclusive flock on the data directory, as upstream: one nsqd per --data-path."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RuntimeError(
                f"--data-path={self.path} in use (possibly by another instance of nsqd)") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class MetadataWriter:
    """Writes nsqd.dat on a thread of its own, so a create, pause or delete never waits on the
    event loop for a rewrite whose cost grows with the number of topics.

    The event loop only counts changes (:meth:`changed`, O(1)); the thread wakes, notes the count,
    builds the file from the live topics (``entries``, pausing between topics so the loop gets
    the interpreter back within microseconds, not after a whole rewrite) and writes it atomically.
    Changes made while it writes are taken by the next write: a burst of creates costs a few
    rewrites, not one per create. The persist point: a change is in nsqd.dat once the first write
    that *began* after it has completed (:meth:`persisted` waits for exactly that)."""

    YIELD_EVERY = 64  # topic entries built between two pauses of the thread

    def __init__(self, path: str, entries: Callable[[], Iterable[bytes]],
                 loop: asyncio.AbstractEventLoop, logger: logging.Logger) -> None:
        self.path = path
        self._entries = entries
        self._loop = loop
        self._logger = logger
        self._asked = 0  # changes counted (event loop)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []  # event loop only
        self._wake = threading.Event()
        self._write_lock = threading.Lock()  # one write at a time, the final one last
        self._thread: threading.Thread | None = None
        self._stopping = False

    def changed(self) -> int:
        """A topic or channel was made, deleted, paused or reconfigured (event loop)."""
        self._asked += 1
        if self._thread is None and not self._stopping:
            self._thread = threading.Thread(target=self._run, name="nsqd-metadata", daemon=True)
            self._thread.start()
        self._wake.set()
        return self._asked

    def persisted(self) -> "asyncio.Future[None]":
        """Done once a write that began after this call has completed (or failed, logged: as
        upstream, a pause is acknowledged even when its persist failed)."""
        fut = self._loop.create_future()
        if self._stopping:
            fut.set_result(None)  # shutdown writes the final file before the loop ends
            return fut
        self._waiters.append((self.changed(), fut))
        return fut

    def write(self, pause: bool = False) -> None:
        """Build and write nsqd.dat now (either thread); GoPathError when it cannot be written."""
        with self._write_lock:
            self._logger.info("NSQ: persisting topic/channel metadata to %s", self.path)
            atomic_write(self.path, join_metadata(self._paced(pause)))

    def _paced(self, pause: bool) -> Iterator[bytes]:
        for i, entry in enumerate(self._entries(), 1):
            if pause and not i % self.YIELD_EVERY:
                time.sleep(0.0001)  # hand the interpreter to the event loop, if it waits
            yield entry

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            asked = self._asked  # every change counted so far is already in the topics
            try:
                self.write(pause=True)
            except OSError as err:
                self._logger.error("failed to persist metadata - %s", err)
            try:
                self._loop.call_soon_threadsafe(self._done, asked)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return

    def _done(self, asked: int) -> None:
        keep = []
        for target, fut in self._waiters:
            if target > asked:
                keep.append((target, fut))
            elif not fut.done():
                fut.set_result(None)
        self._waiters = keep

    def close(self) -> None:
        """Stop the thread once its current write is done (event loop, at shutdown); the caller
        then writes the final file with :meth:`write`."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters = []
