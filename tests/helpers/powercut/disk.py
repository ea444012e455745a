"""The disk a power cut can hit: what a file system holds in memory and what it has made durable.

No FUSE here, no paths: inodes, pages and directory entries, so the rules of what survives a
power cut are in one place and read as rules (``serve.py`` maps FUSE calls onto this class).

What is durable lives in a backing directory, an *image*: ``image.json`` (the durable namespace:
each directory's committed entries, each inode's mode) and ``data/<ino>`` (each file's
fsynced contents). Everything since lives only in memory: dirty pages of files and the
current directory entries. The rules, the ones POSIX gives and real file systems keep:

* a file's data (and its size, a truncate included) reaches the image only through ``fsync`` or
  ``fdatasync`` of that file;
* a directory's entries (create, unlink, rename, mkdir, rmdir) reach it through ``fsync`` of that
  directory (``strict``, the letter of POSIX), or through *any* fsync of anything (``journal``:
  ext4's and XFS's ordered metadata journal, where a commit carries every metadata change made
  before it, so an fsynced new file is found again without a directory fsync);
* at a power cut everything else is lost; with ``tear`` a seeded choice of the dirty pages of each
  file reaches the disk first, in the order they were dirtied, the last one only partly (whole
  512-byte sectors), and the file's size grows to cover that page, as a disk that lost power in
  the middle of writeback leaves it.

Faults a test can set beside the cut, each one a rule too:

* ``limit``: the disk holds at most that many bytes of files (their sizes, unsynced included); a
  write that would pass it writes what fits and says so (a short write), or fails with ENOSPC
  when nothing fits, as a full disk does. Truncating or removing files frees space.
* ``arm(op, after, ...)``: the power goes by itself at the ``after``-th ``write``, ``fsync`` or
  ``fsyncdir`` (of a path containing ``match``) from now, before that call is applied; the call and every
  later one fail with EIO. The FUSE process takes writes a page at a time (``serve.py``), as
  writeback does, so a cut falls between two pages of a program's ``pwritev``, or before its
  ``fdatasync``, at a moment a seed chose.
* ``fail_fsyncs(n, match)``: the next ``n`` fsyncs (of a path containing ``match``) fail with
  EIO and make nothing durable (the pages stay dirty: a later fsync may still write them, or a
  cut lose them).
"""

from __future__ import annotations

import errno
import json
import os
import random
import stat
import time

PAGE = 4096
SECTOR = 512
ROOT = 1
MODES = ("journal", "strict")


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class Node:
    """One inode: a directory (``entries``, and ``durable``: the entries as last committed) or a
    file (``size``, ``dirty`` pages by number in the order they were dirtied, ``valid``: how
    much of the image's data is still the file's, below any unsynced truncate)."""

    __slots__ = ("ino", "mode", "entries", "durable", "size", "dirty", "valid", "nlink",
                 "opens", "mtime")

    def __init__(self, ino: int, mode: int) -> None:
        self.ino = ino
        self.mode = mode
        self.entries: dict[str, int] | None = {} if stat.S_ISDIR(mode) else None
        self.durable: dict[str, int] = {}
        self.size = 0
        self.dirty: dict[int, bytearray] = {}
        self.valid = 0
        self.nlink = 0
        self.opens = 0
        self.mtime = time.time_ns()

    @property
    def is_dir(self) -> bool:
        return self.entries is not None


class Disk:
    """The file system's state; every method is one system call's worth of change."""

    def __init__(self, backing: str, mode: str = "journal") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.backing = backing
        self.mode = mode
        self.data_dir = os.path.join(backing, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.nodes: dict[int, Node] = {}
        self._fds: dict[int, int] = {}  # ino -> fd of data/<ino>
        self.powered = True
        self.counts = {"fsync": 0, "fsyncdir": 0, "commits": 0, "writes": 0, "enospc": 0,
                       "failed_fsyncs": 0}
        self.limit: int | None = None
        self.armed: dict | None = None
        self.tripped: dict | None = None  # the armed cut's report, once it went off
        self.failing_fsyncs = 0
        self._failing_match = ""
        self._load()

    # --- the image -----------------------------------------------------------------------------

    def _data_path(self, ino: int) -> str:
        return os.path.join(self.data_dir, str(ino))

    def _load(self) -> None:
        """Mount: the image is all there is (after a cut, after a clean stop, or new)."""
        try:
            with open(os.path.join(self.backing, "image.json"), "rb") as f:
                image = json.load(f)
        except FileNotFoundError:
            image = {"next": ROOT + 1, "nodes": {str(ROOT): {"mode": stat.S_IFDIR | 0o755,
                                                             "entries": {}}}}
        self.next_ino = image["next"]
        for key, spec in image["nodes"].items():
            node = Node(int(key), spec["mode"])
            if node.is_dir:
                node.entries = dict(spec["entries"])
                node.durable = dict(spec["entries"])
            else:
                try:
                    node.size = node.valid = os.path.getsize(self._data_path(node.ino))
                except FileNotFoundError:
                    pass
            self.nodes[node.ino] = node
        for node in self.nodes.values():
            if node.is_dir:
                for ino in node.entries.values():
                    self.nodes[ino].nlink += 1
        self.nodes[ROOT].nlink += 1
        for name in os.listdir(self.data_dir):  # fsynced files no durable entry reached
            if not name.isdigit() or int(name) not in self.nodes:
                os.unlink(os.path.join(self.data_dir, name))

    def _write_image(self) -> None:
        nodes: dict[str, dict] = {}
        todo = [ROOT]
        while todo:
            node = self.nodes[todo.pop()]
            if str(node.ino) in nodes:
                continue
            spec: dict = {"mode": node.mode}
            if node.is_dir:
                spec["entries"] = node.durable
                todo.extend(node.durable.values())
            nodes[str(node.ino)] = spec
        tmp = os.path.join(self.backing, "image.json.tmp")
        with open(tmp, "w") as f:
            json.dump({"next": self.next_ino, "nodes": nodes}, f)
        os.replace(tmp, os.path.join(self.backing, "image.json"))
        self.counts["commits"] += 1

    def _commit(self, dirs) -> None:
        changed = False
        for node in dirs:
            if node.durable != node.entries:
                node.durable = dict(node.entries)
                changed = True
        if changed:
            self._write_image()
            self._collect()

    def _commit_all(self) -> None:
        self._commit([n for n in self.nodes.values() if n.is_dir])

    # --- lookups -------------------------------------------------------------------------------

    def _check_power(self) -> None:
        if not self.powered:
            raise _err(errno.EIO)

    def resolve(self, path: str) -> Node:
        self._check_power()
        node = self.nodes[ROOT]
        for part in path.split("/"):
            if not part:
                continue
            if not node.is_dir:
                raise _err(errno.ENOTDIR)
            ino = node.entries.get(part)
            if ino is None:
                raise _err(errno.ENOENT)
            node = self.nodes[ino]
        return node

    def parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self.resolve(head)
        if not parent.is_dir:
            raise _err(errno.ENOTDIR)
        return parent, name

    # --- namespace -----------------------------------------------------------------------------

    def make(self, path: str, mode: int) -> Node:
        """A new file or directory at ``path`` (EEXIST if the name is taken)."""
        parent, name = self.parent(path)
        if name in parent.entries:
            raise _err(errno.EEXIST)
        node = Node(self.next_ino, mode)
        self.next_ino += 1
        self.nodes[node.ino] = node
        parent.entries[name] = node.ino
        node.nlink = 1
        return node

    def remove(self, path: str, directory: bool) -> None:
        parent, name = self.parent(path)
        ino = parent.entries.get(name)
        if ino is None:
            raise _err(errno.ENOENT)
        node = self.nodes[ino]
        if directory and not node.is_dir:
            raise _err(errno.ENOTDIR)
        if not directory and node.is_dir:
            raise _err(errno.EISDIR)
        if directory and node.entries:
            raise _err(errno.ENOTEMPTY)
        del parent.entries[name]
        node.nlink -= 1
        self._collect()

    def rename(self, old: str, new: str) -> None:
        src_parent, src_name = self.parent(old)
        ino = src_parent.entries.get(src_name)
        if ino is None:
            raise _err(errno.ENOENT)
        dst_parent, dst_name = self.parent(new)
        node = self.nodes[ino]
        target = dst_parent.entries.get(dst_name)
        if target == ino:
            return
        if target is not None:
            victim = self.nodes[target]
            if victim.is_dir != node.is_dir:
                raise _err(errno.EISDIR if victim.is_dir else errno.ENOTDIR)
            if victim.is_dir and victim.entries:
                raise _err(errno.ENOTEMPTY)
            victim.nlink -= 1
        del src_parent.entries[src_name]
        dst_parent.entries[dst_name] = ino
        self._collect()

    def _collect(self) -> None:
        """Forget inodes nothing can reach again: no entry, no open handle, no committed entry
        of a directory still known (the image might name them after a later commit)."""
        while True:
            kept = {ROOT}
            for node in self.nodes.values():
                if node.is_dir:
                    kept.update(node.durable.values())
            gone = [n for n in self.nodes.values()
                    if n.nlink <= 0 and n.opens <= 0 and n.ino not in kept]
            if not gone:
                return
            for node in gone:
                del self.nodes[node.ino]
                fd = self._fds.pop(node.ino, None)
                if fd is not None:
                    os.close(fd)
                try:
                    os.unlink(self._data_path(node.ino))
                except FileNotFoundError:
                    pass

    def opened(self, node: Node) -> None:
        node.opens += 1

    def released(self, node: Node) -> None:
        node.opens -= 1
        self._collect()

    # --- data ----------------------------------------------------------------------------------

    def _fd(self, node: Node) -> int:
        fd = self._fds.get(node.ino)
        if fd is None:
            fd = self._fds[node.ino] = os.open(self._data_path(node.ino), os.O_RDWR | os.O_CREAT,
                                               0o644)
        return fd

    def _durable_bytes(self, node: Node, offset: int, size: int) -> bytes:
        """What the image holds of the file at ``offset``, zeros past what is still valid."""
        end = min(offset + size, node.valid)
        got = os.pread(self._fd(node), end - offset, offset) if end > offset else b""
        return got + bytes(size - len(got))

    def read(self, node: Node, size: int, offset: int) -> bytes:
        self._check_power()
        end = min(offset + size, node.size)
        if offset >= end:
            return b""
        out = bytearray(self._durable_bytes(node, offset, end - offset))
        for number in range(offset // PAGE, (end - 1) // PAGE + 1):
            page = node.dirty.get(number)
            if page is not None:
                lo, hi = max(offset, number * PAGE), min(end, (number + 1) * PAGE)
                out[lo - offset:hi - offset] = page[lo - number * PAGE:hi - number * PAGE]
        return bytes(out)

    def write(self, node: Node, data: bytes, offset: int) -> int:
        self._check_power()
        if self.limit is not None and offset + len(data) > node.size:
            room = self.limit - self.used + node.size - offset  # bytes this write may take
            if room < len(data):
                if room <= 0:
                    self.counts["enospc"] += 1
                    raise _err(errno.ENOSPC)
                data = data[:room]  # a short write: the caller's next one gets ENOSPC
        end = offset + len(data)
        view = memoryview(data)
        for number in range(offset // PAGE, (end - 1) // PAGE + 1 if data else offset // PAGE):
            page = node.dirty.get(number)
            if page is None:  # (valid <= size: past the end of the file it reads zeros)
                page = node.dirty[number] = bytearray(self._durable_bytes(node, number * PAGE, PAGE))
            lo, hi = max(offset, number * PAGE), min(end, (number + 1) * PAGE)
            page[lo - number * PAGE:hi - number * PAGE] = view[lo - offset:hi - offset]
        node.size = max(node.size, end)
        node.mtime = time.time_ns()
        self.counts["writes"] += 1
        return len(data)

    def truncate(self, node: Node, length: int) -> None:
        self._check_power()
        if length < node.size:
            for number in [n for n in node.dirty if n * PAGE >= length]:
                del node.dirty[number]
            page = node.dirty.get(length // PAGE)
            if page is not None:
                page[length % PAGE:] = bytes(PAGE - length % PAGE)
            node.valid = min(node.valid, length)
        node.size = length
        node.mtime = time.time_ns()

    @property
    def used(self) -> int:
        """Bytes of the files a name or an open handle still holds: what ``limit`` is held
        against (an unlinked file frees its space with its last close)."""
        return sum(n.size for n in self.nodes.values()
                   if not n.is_dir and (n.nlink > 0 or n.opens > 0))

    # --- faults --------------------------------------------------------------------------------

    def arm(self, op: str, after: int, match: str = "", tear: bool = False,
            seed: int | None = None) -> None:
        """Cut the power at the ``after``-th ``op`` (``write``, ``fsync`` or ``fsyncdir``) of a
        path holding ``match``, counted from now, before it is applied."""
        if op not in ("write", "fsync", "fsyncdir") or after < 1:
            raise ValueError(f"arm: op write|fsync|fsyncdir and after >= 1, not {op!r}, {after}")
        self._check_power()
        self.armed = {"op": op, "left": after, "match": match, "tear": tear, "seed": seed}
        self.tripped = None

    def trip(self, op: str, path: str) -> None:
        """Called before every write and fsync: the armed cut goes off here, or not."""
        armed = self.armed
        if armed is None or armed["op"] != op or armed["match"] not in path:
            return
        armed["left"] -= 1
        if armed["left"] > 0:
            return
        self.armed = None
        report = self.cut(armed["tear"], armed["seed"])
        self.tripped = {**report, "op": op, "path": path}
        raise _err(errno.EIO)

    # --- durability ----------------------------------------------------------------------------

    def fail_fsyncs(self, n: int, match: str = "") -> None:
        """The next ``n`` fsyncs of a path holding ``match`` fail (EIO), making nothing durable."""
        self.failing_fsyncs, self._failing_match = n, match

    def fsync(self, node: Node, path: str = "") -> None:
        """fsync or fdatasync of a file: its data and size reach the image; in journal mode
        every directory change made so far too."""
        self._check_power()
        if self.failing_fsyncs > 0 and self._failing_match in path:
            self.failing_fsyncs -= 1
            self.counts["failed_fsyncs"] += 1
            raise _err(errno.EIO)
        self.counts["fsync"] += 1
        self._flush(node, node.dirty, node.size)
        if self.mode == "journal":
            self._commit_all()

    def fsyncdir(self, node: Node) -> None:
        self._check_power()
        self.counts["fsyncdir"] += 1
        self._commit_all() if self.mode == "journal" else self._commit([node])

    def _flush(self, node: Node, pages: dict[int, bytearray], size: int) -> None:
        """Write ``pages`` (clipped to ``size``) into the image and make the durable file
        ``size`` long; bytes of the image past ``valid`` (an unsynced truncate) read zeros."""
        if node.is_dir:
            return
        fd = self._fd(node)
        if node.valid < os.fstat(fd).st_size:
            os.ftruncate(fd, node.valid)
        for number, page in sorted(pages.items()):
            start = number * PAGE
            if start < size:
                os.pwrite(fd, page[:min(PAGE, size - start)], start)
        os.ftruncate(fd, size)
        node.dirty = {}
        node.size = node.valid = size

    def _tear(self, node: Node, reached: list[tuple[int, bytearray]], sectors: int) -> int:
        """Writeback cut short: the pages ``reached`` got to the disk, the last of them only its
        first ``sectors`` sectors; the file's size covers that page. Returns the size."""
        number, page = reached[-1]
        old = self._durable_bytes(node, number * PAGE, PAGE)
        reached[-1] = (number, page[:sectors * SECTOR] + old[sectors * SECTOR:])
        fd = self._fd(node)
        durable_size = os.fstat(fd).st_size
        for number, page in reached:
            os.pwrite(fd, page, number * PAGE)
        size = max(durable_size, min(node.size, max(n for n, _ in reached) * PAGE + PAGE))
        os.ftruncate(fd, size)
        return size

    def unsynced_files(self) -> int:
        """Files whose data or size differs from the image's."""
        return sum(1 for n in self.nodes.values() if n.dirty or n.valid != n.size)

    def sync_all(self) -> None:
        """A clean shutdown: everything reaches the image."""
        self._check_power()
        for node in list(self.nodes.values()):
            if node.dirty or node.valid != node.size:  # (a directory has neither)
                self._flush(node, node.dirty, node.size)
        self._commit_all()

    def cut(self, tear: bool = False, seed: int | None = None) -> dict:
        """The power goes: nothing more is served, the image stays as it is, or with ``tear``
        as a writeback cut short left it. Returns what was lost and what was torn."""
        self._check_power()
        rng = random.Random(seed)
        lost = torn = 0
        report: list[dict] = []
        for node in sorted(self.nodes.values(), key=lambda n: n.ino):
            if node.is_dir or not (node.dirty or node.valid != node.size):
                continue
            lost += len(node.dirty)
            if not tear or not node.dirty:
                continue
            reached = rng.randint(0, len(node.dirty))
            if reached:
                sectors = rng.randint(0, PAGE // SECTOR - 1)
                size = self._tear(node, list(node.dirty.items())[:reached], sectors)
                torn += 1
                report.append({"ino": node.ino, "pages": reached, "sectors": sectors,
                               "size": size})
        self.powered = False
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        return {"lost_pages": lost, "torn_files": torn, "torn": report}

    # --- attributes ----------------------------------------------------------------------------

    def attributes(self, node: Node) -> dict:
        seconds = node.mtime
        return {"st_mode": node.mode, "st_nlink": max(node.nlink, 1) + (1 if node.is_dir else 0),
                "st_size": 4096 if node.is_dir else node.size, "st_uid": os.getuid(),
                "st_gid": os.getgid(), "st_atime": seconds, "st_mtime": seconds,
                "st_ctime": seconds, "st_blocks": (node.size + 511) // 512}
