"""``nsqd.dat``: the topics, channels and pause states an nsqd restores at start (upstream's JSON),
plus our sidecar that keeps deferred messages' due times across a restart.

Both are written atomically (temp file, fsync, rename). The sidecar is additive: the deferred
messages themselves go into the channel's disk queue exactly as upstream writes them, so either
implementation can read the data directory; only nsqpy also restores their remaining delay.
"""

from __future__ import annotations

import fcntl
import os
from typing import Any

from .. import NSQ_COMPAT_VERSION
from ..common.gojson import ANY, BOOL, STRING, GoJSONError, ListOf, decode_struct, loads
from ..common.goweb import go_json

METADATA_FILE = "nsqd.dat"
# upstream's Metadata, TopicMetadata and ChannelMetadata; ``config`` is the lifecycle feature's
# per-entity settings (docs), carried as read
_CHANNEL = {"name": STRING, "paused": BOOL, "config": ANY}
_METADATA = {"topics": ListOf({**_CHANNEL, "channels": ListOf(_CHANNEL)}), "version": STRING}


def atomic_write(path: str, data: bytes) -> None:
    tmp = f"{path}.{int.from_bytes(os.urandom(4), 'big') >> 1}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def encode_metadata(topics: list[dict[str, Any]]) -> bytes:
    return go_json({"topics": topics, "version": NSQ_COMPAT_VERSION})


def read_metadata(data_path: str) -> list[dict[str, Any]] | None:
    """The topics list, or None when there is no file (a fresh start). ValueError if corrupt."""
    path = os.path.join(data_path, METADATA_FILE)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    try:
        doc = decode_struct(raw, _METADATA, "nsqd.Metadata")
    except GoJSONError as err:
        raise ValueError(f"failed to parse metadata - {err}") from None
    return doc.get("topics") or []


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
