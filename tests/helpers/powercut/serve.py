"""The FUSE process: serves a :class:`~disk.Disk` at a mount point, and takes orders on a Unix
socket (``cut``, ``sync``, ``stats``: one JSON line each way).

Run by :class:`helpers.powercut.PowerCutFS` as ``python serve.py BACKING MOUNTPOINT SOCKET MODE``
(a process of its own: the test's process must not hold the GIL a FUSE request waits for).
libfuse runs single-threaded (``-s``); the control thread takes the same lock, so a cut falls
between two system calls of the programs on the mount, never inside one.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import socket
import sys
import threading

import mfusepy

if __package__:
    from .disk import PAGE, Disk, Node
else:  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from disk import PAGE, Disk, Node  # type: ignore[no-redef]


class PowerCutOperations(mfusepy.Operations):
    """FUSE's path calls mapped onto the disk's inode calls, one mutex around each."""

    use_ns = True

    def __init__(self, disk: Disk, lock: threading.Lock) -> None:
        self.disk = disk
        self.mutex = lock
        self.handles: dict[int, Node] = {}
        self._fh = itertools.count(1)

    def _handle(self, node: Node) -> int:
        fh = next(self._fh)
        self.handles[fh] = node
        self.disk.opened(node)
        return fh

    def _node(self, path: str | None, fh: int | None) -> Node:
        if fh:
            node = self.handles.get(fh)
            if node is not None:
                self.disk._check_power()
                return node
        if path is None:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return self.disk.resolve(path)

    def init_with_config(self, conn_info, config_3):
        """Writes come one page at a time, as a page cache writes them back: a cut can fall
        between two pages of one ``pwritev`` (libfuse would otherwise take up to 1 MiB a call)."""
        if conn_info is not None:
            conn_info.max_write = PAGE

    def getattr(self, path, fh=None):
        with self.mutex:
            return self.disk.attributes(self._node(path, fh))

    def access(self, path, amode):
        with self.mutex:
            self.disk.resolve(path)
        return 0

    def readdir(self, path, fh):
        with self.mutex:
            node = self.disk.resolve(path)
            if not node.is_dir:
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
            return [".", "..", *node.entries]

    def mkdir(self, path, mode):
        with self.mutex:
            self.disk.make(path, mode | 0o040000)
        return 0

    def rmdir(self, path):
        with self.mutex:
            self.disk.remove(path, directory=True)
        return 0

    def unlink(self, path):
        with self.mutex:
            self.disk.remove(path, directory=False)
        return 0

    def rename(self, old, new):
        with self.mutex:
            self.disk.rename(old, new)
        return 0

    def create(self, path, mode, flags=0):
        with self.mutex:
            try:
                node = self.disk.make(path, mode | 0o100000)
            except FileExistsError:
                if flags & os.O_EXCL:
                    raise
                node = self.disk.resolve(path)
                if flags & os.O_TRUNC:
                    self.disk.truncate(node, 0)
            return self._handle(node)

    def open(self, path, flags):
        with self.mutex:
            node = self.disk.resolve(path)
            if flags & os.O_TRUNC:
                self.disk.truncate(node, 0)
            return self._handle(node)

    def opendir(self, path):
        with self.mutex:
            return self._handle(self.disk.resolve(path))

    def release(self, path, fh):
        with self.mutex:
            node = self.handles.pop(fh, None)
            if node is not None:
                self.disk.released(node)
        return 0

    releasedir = release

    def flush(self, path, fh):
        return 0  # close() makes nothing durable

    def read(self, path, size, offset, fh):
        with self.mutex:
            return self.disk.read(self._node(path, fh), size, offset)

    def write(self, path, data, offset, fh):
        with self.mutex:
            node = self._node(path, fh)
            self.disk.trip("write", path or "")
            return self.disk.write(node, data, offset)

    def truncate(self, path, length, fh=None):
        with self.mutex:
            self.disk.truncate(self._node(path, fh), length)
        return 0

    def fsync(self, path, datasync, fh):
        with self.mutex:
            node = self._node(path, fh)
            self.disk.trip("fsync", path or "")
            self.disk.fsync(node, path or "")
        return 0

    def fsyncdir(self, path, datasync, fh):
        with self.mutex:
            node = self._node(path, fh)
            self.disk.trip("fsyncdir", path or "")
            self.disk.fsyncdir(node)
        return 0

    def chmod(self, path, mode):
        with self.mutex:
            node = self.disk.resolve(path)
            node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
        return 0

    def chown(self, path, uid, gid):
        return 0

    def utimens(self, path, times=None):
        return 0

    def statfs(self, path):
        with self.mutex:
            limit, used = self.disk.limit, self.disk.used
        free = 1 << 23 if limit is None else max(limit - used, 0) // 4096
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 24, "f_bfree": free,
                "f_bavail": free, "f_files": 1 << 20, "f_ffree": 1 << 19, "f_namemax": 255}


def _control(server: socket.socket, disk: Disk, lock: threading.Lock) -> None:
    """Answer one JSON order per line until the socket closes."""
    while True:
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                order = json.loads(line)
                with lock:
                    try:
                        if order["op"] == "cut":
                            answer = disk.cut(order.get("tear", False), order.get("seed"))
                        elif order["op"] == "sync":
                            disk.sync_all()
                            answer = {}
                        elif order["op"] == "limit":
                            disk.limit = order["bytes"]
                            answer = {"used": disk.used}
                        elif order["op"] == "arm":
                            disk.arm(order["on"], order["after"], order.get("match", ""),
                                     order.get("tear", False), order.get("seed"))
                            answer = {}
                        elif order["op"] == "fail_fsyncs":
                            disk.fail_fsyncs(order["n"], order.get("match", ""))
                            answer = {}
                        else:
                            answer = {"nodes": len(disk.nodes), "powered": disk.powered,
                                      "unsynced_files": disk.unsynced_files(),
                                      "used": disk.used, "tripped": disk.tripped, **disk.counts}
                    except OSError as err:
                        answer = {"error": str(err)}
                stream.write(json.dumps(answer).encode() + b"\n")
                stream.flush()


def main(backing: str, mountpoint: str, control: str, mode: str) -> None:
    disk = Disk(backing, mode)
    lock = threading.Lock()
    server = socket.socket(socket.AF_UNIX)
    server.bind(control)
    server.listen()
    threading.Thread(target=_control, args=(server, disk, lock), daemon=True).start()
    # no kernel caching of attributes or names: after a cut the mount is made anew anyway,
    # but within one the kernel must not answer from what it saw before a rename
    mfusepy.FUSE(PowerCutOperations(disk, lock), mountpoint, foreground=True, nothreads=True,
                 hard_remove=True, attr_timeout=0, entry_timeout=0, negative_timeout=0,
                 fsname="powercut")


if __name__ == "__main__":
    main(*sys.argv[1:5])
