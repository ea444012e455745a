"""``nsq_to_file``: archive topics to files, acknowledging only what is safely on disk.

One consumer and one output file per topic. Each message is written as ``body + "\\n"``; it is
FINished only once the file holding it has been fsynced, so nothing that nsqd has forgotten can
be lost by a crash (a crash before the sync means nsqd re-delivers: at-least-once). Syncs happen
when ``--max-in-flight`` messages are buffered, when the consumer is starved (nsqd will send
nothing more until we answer), every ``--sync-interval``, on rotation and on stop.

Files: ``--filename-format`` with ``<TOPIC> <HOST> <PID> <DATETIME> <REV>``; a new file when the
formatted name changes (the ``--datetime-format`` hour, by default), after ``--rotate-interval``
or past ``--rotate-size`` bytes (counted before compression, as upstream, plus what a file
reopened for appending already held). ``--gzip`` writes one gzip member per sync (concatenated members
are a valid gzip file, and each member's trailer marks a point where everything before it was
acknowledged). With ``--work-dir`` files are written there and moved to ``--output-dir`` when
closed, never overwriting (``<REV>`` is bumped instead).

Signals: SIGHUP syncs and closes the files (the next message opens a new one, e.g. after
logrotate moved them); SIGINT/SIGTERM stop gracefully: CLS, write/sync/FIN what is still in
flight, close and move the files, exit 0. A second SIGINT/SIGTERM exits at once (status 1):
messages not yet FINished are simply re-delivered by nsqd.

Failures are upstream's: an nsqd that cannot be reached is logged (``couldn't create logger for
new topic t: dial tcp ...``) and the program runs on without that topic (tried again at the next
``--topic-refresh`` when topics come from nsqlookupd); an I/O error is fatal at once (status 1,
Go's error text), leaving nsqd to deliver again what was not yet FINished.

Differences from upstream, on purpose: with ``--topic-pattern`` and no ``--topic`` the topic
list is fetched at start-up rather than after the first ``--topic-refresh``; a file opened in
append mode whose last line was cut short (a crash mid-write) gets a newline first, so the torn
line does not swallow the next message; a ``--topic`` whose logger could never be made (a name
nsqd refuses, no ``<REV>`` where needed, a go-nsq config error) gets upstream's ``couldn't create
logger`` line and then exit 1, where upstream runs on archiving nothing, and so do
``--max-in-flight=0`` and an invalid ``--topic-pattern``; ``max_attempts`` defaults to 0
(unlimited): go-nsq's 5 would FIN a message re-delivered more often (after repeated crashes)
without writing it; directories are fsynced after a file is created or moved, so a power loss
cannot drop the entry of a file whose data was acknowledged; a lost connection is closed and
reconnected at once, where go-nsq waits until the messages in flight on it are answered.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
import zlib
from collections import deque
from typing import Any

from ..client import Message
from ..common import goregexp
from ..common.flags import Flag, FlagSet
from ..common.log import make_logger
from ..protocol.names import is_valid_name
from . import common, goerrors, golog, gonsq, history
from .common import fatal, repeated
from .goconfig import GoNsqConfig

PROGRAM = "nsq_to_file"

# the strftime directives upstream's go-strftime knows; anything else after % stays literal
_STRFTIME_DIRECTIVES = frozenset("BbmAadHIMSYypZz%")


class FatalError(Exception):
    """An I/O failure after which the program must stop without acknowledging anything more."""


def build_flagset() -> FlagSet:
    fs = FlagSet(PROGRAM, usage_name="nsqd")  # upstream names this FlagSet "nsqd" (its --help says so)
    F = Flag
    fs.add(
        F("version", False, "print version string", kind="bool"),
        F("log-level", "info", "set log verbosity: debug, info, warn, error, or fatal",
          go_type="string", go_default='"info"'),
        F("log-prefix", "[nsq_to_file] ", "log message prefix"),
        F("channel", "nsq_to_file", "nsq channel"),
        F("max-in-flight", 200, "max number of messages to allow in flight", kind="int"),
        F("output-dir", "/tmp", "directory to write output files to"),
        F("work-dir", "", "directory for in-progress files before moving to output-dir"),
        F("datetime-format", "%Y-%m-%d_%H", "strftime compatible format for <DATETIME> in filename format"),
        F("filename-format", "<TOPIC>.<HOST><REV>.<DATETIME>.log",
          "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. "
          "<REV> is increased when file already exists)"),
        F("host-identifier", "", "value to output in log filename in place of hostname. "
          "<SHORT_HOST> and <HOSTNAME> are valid replacement tokens"),
        F("gzip-level", 6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)", kind="int"),
        F("gzip", False, "gzip output files.", kind="bool"),
        F("skip-empty-files", False, "skip writing empty files", kind="bool"),
        F("topic-refresh", 60.0, "how frequently the topic list should be refreshed", kind="duration"),
        F("topic-pattern", "", "only log topics matching the following pattern"),
        F("rotate-size", 0, "rotate the file when it grows bigger than `rotate-size` bytes", kind="int"),
        F("rotate-interval", 0.0, "rotate the file every duration", kind="duration"),
        F("sync-interval", 30.0, "sync file to disk every duration", kind="duration"),
        F("http-client-connect-timeout", 2.0, "timeout for HTTP connect", kind="duration"),
        F("http-client-request-timeout", 5.0, "timeout for HTTP request", kind="duration"),
        repeated("nsqd-tcp-address", "nsqd TCP address (may be given multiple times)"),
        repeated("lookupd-http-address", "lookupd HTTP address (may be given multiple times)"),
        repeated("topic", "nsq topic (may be given multiple times)"),
        repeated("consumer-opt", "option to passthrough to nsq.Consumer (may be given multiple "
                 "times, http://godoc.org/github.com/nsqio/go-nsq#Config)"),
        *history.flags("archive the topic's retained messages from this point to --to, then exit",
                       "with --from (or alone, from earliest): archive the retained messages "
                       "up to this point and exit (default: latest, what nsqd holds when asked)"),
    )
    return fs


# --- file names -------------------------------------------------------------------------------


def compile_strftime(fmt: str) -> str:
    """Upstream's strftime subset as a Python ``time.strftime`` format (other ``%x`` literal)."""
    out: list[str] = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch == "%" and i + 1 < len(fmt) and fmt[i + 1] in _STRFTIME_DIRECTIVES:
            out.append(fmt[i : i + 2])
            i += 2
            continue
        out.append("%%" if ch == "%" else ch)
        i += 1
    return "".join(out)


def host_identifier(template: str, hostname: str | None = None) -> str:
    hostname = hostname or socket.gethostname()
    short = hostname.split(".")[0]
    if not template:
        return short
    return template.replace("<SHORT_HOST>", short).replace("<HOSTNAME>", hostname)


def needs_rev(opts: Any) -> bool:
    return bool(opts.gzip or opts.rotate_size > 0 or opts.rotate_interval > 0
                or opts.work_dir != opts.output_dir)


def filename_format(opts: Any, topic: str, hostname: str | None = None, pid: int | None = None) -> str:
    """Everything but ``<DATETIME>`` (and ``<REV>``) substituted, ``.gz`` appended for gzip."""
    fmt: str = opts.filename_format
    if needs_rev(opts):
        if "<REV>" not in fmt:
            raise ValueError("missing <REV> in --filename-format when gzip, rotation, or work dir enabled")
    else:
        fmt = fmt.replace("<REV>", "")
    fmt = fmt.replace("<TOPIC>", topic)
    fmt = fmt.replace("<HOST>", host_identifier(opts.host_identifier, hostname))
    fmt = fmt.replace("<PID>", str(os.getpid() if pid is None else pid))
    if opts.gzip and not fmt.endswith(".gz"):
        fmt += ".gz"
    return fmt


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def exclusive_rename(src: str, dst: str) -> None:
    """Move without ever replacing: link (fails if ``dst`` exists), then unlink ``src``.
    Errors read as Go's (``link SRC DST: file exists``); FileExistsError stays one."""
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError as err:
        raise goerrors.GoOSError(goerrors.link_error(src, dst, err)) from None
    fsync_dir(os.path.dirname(dst))
    try:
        os.unlink(src)
    except OSError as err:
        raise goerrors.GoOSError(goerrors.os_error("remove", src, err)) from None


def fsync_dir(path: str) -> None:
    """Make a directory entry (a new or moved file) durable, not just the file's data."""
    fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- one topic ----------------------------------------------------------------------------------


class FileLogger:
    """Consumes one topic into its current file (see the module docstring)."""

    def __init__(self, opts: Any, topic: str, go_cfg: GoNsqConfig, logger: Any) -> None:
        """upstream's ``NewFileLogger`` up to the consumer's creation: ValueError (bad
        ``--filename-format``) or StartError; :meth:`connect` does the rest."""
        self.opts = opts
        self.topic = topic
        self.logger = logger
        self.tag = f"[{topic}/{opts.channel}]"
        self.filename_format = filename_format(opts, topic)
        self.datetime_format = compile_strftime(opts.datetime_format)
        self.max_in_flight = max(1, opts.max_in_flight)
        self._incoming: deque[Message] = deque()
        self._pending: list[Message] = []  # written to the file, not yet fsynced nor FINished
        self._wake = asyncio.Event()
        self._hup = False
        self._tick = False
        self._stop = False
        # the open file
        self._fd: int | None = None
        self._path = ""
        self._filename = ""  # formatted name of the open file, <REV> still in it
        self._rev = 0
        self._open_time = 0.0
        self._filesize = 0  # upstream's count: bytes on disk at open + bytes handed to the writer
        self._disk_bytes = 0
        self._gz: Any = None  # zlib compressobj of the current gzip member
        self._member_bytes = 0
        self._name_cache: tuple[int, str] = (-1, "")
        #: a history export names files after the messages' time, not the clock (seconds)
        self._message_time: int | None = None
        kwargs: dict[str, Any] = {}
        if "max_attempts" not in go_cfg.consumer:
            # go-nsq FINs a message delivered more than max_attempts times without handling it;
            # an archiver never fails a message on purpose, so that would only drop unwritten
            # data (after repeated crashes, say): unlimited unless --consumer-opt=max_attempts,N
            kwargs["max_attempts"] = 0
        self.consumer = common.GoConsumer(topic, opts.channel, self._on_message, go_cfg, PROGRAM,
                                          opts.max_in_flight, auto_finish=False, **kwargs)

    async def connect(self) -> None:
        """Connect the consumer (StartError as upstream's ``NewFileLogger`` fails)."""
        try:
            await self.consumer.connect(self.opts.nsqd_tcp_address, self.opts.lookupd_http_address)
        except common.StartError:
            await self.consumer.abandon()
            raise

    # --- outside events ------------------------------------------------------------------

    def _on_message(self, msg: Message) -> None:
        """Called by the consumer for each delivery; the router writes it (no answer here)."""
        self._incoming.append(msg)
        if not self._wake.is_set():
            self._wake.set()

    def hup(self) -> None:
        self._hup = True
        self._wake.set()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.opts.sync_interval)
            self._tick = True
            self._wake.set()

    # --- the router -----------------------------------------------------------------------

    async def run(self) -> None:
        """Write, sync, FIN, rotate until stopped; then drain, close and move the file."""
        ticker = asyncio.create_task(self._ticker()) if self.opts.sync_interval > 0 else None
        closer: asyncio.Task[None] | None = None
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                sync = close_file = False
                if self._stop and closer is None:
                    if ticker is not None:
                        ticker.cancel()
                    closer = asyncio.create_task(self.consumer.close())
                    closer.add_done_callback(lambda _t: self._wake.set())
                    sync = True
                if self._hup:
                    self._hup = False
                    sync = close_file = True
                if self._tick:
                    self._tick = False
                    if self._needs_rotation():
                        if self.opts.skip_empty_files:
                            close_file = True
                        else:
                            self._update_file()
                    sync = True
                if self._incoming and not (closer is not None and closer.done()):
                    if self._write_incoming():
                        sync = True
                    if len(self._pending) >= self.max_in_flight:
                        sync = True
                if sync or closer is not None or self.consumer.is_starved():
                    await self._sync()
                if close_file:
                    self._close()
                if closer is not None and closer.done():
                    break
            await closer  # re-raise a failure of the consumer's close
        finally:
            # on a FatalError nothing more is acknowledged: the process exits, the connections
            # drop and nsqd re-delivers whatever was in flight
            if ticker is not None:
                ticker.cancel()
        if self._incoming:
            # only after a close timeout: their connections are gone, nsqd re-delivers them
            self.logger.warning("%s %d messages arrived too late to be acknowledged; "
                                "nsqd will deliver them again", self.tag, len(self._incoming))
            self._incoming.clear()
        await self._sync()
        self._close()

    def _write_incoming(self) -> bool:
        """Append every queued message to the file; True when the file was rotated."""
        rotated = False
        chunks: list[bytes] = []
        incoming = self._incoming
        pending = self._pending
        while incoming:
            msg = incoming.popleft()
            if self._message_time is not None:
                self._message_time = msg.timestamp // 1_000_000_000
            if self._needs_rotation():
                if chunks:
                    self._write(b"".join(chunks))
                    chunks = []
                self._update_file()
                rotated = True
            chunks.append(msg.body)
            chunks.append(b"\n")
            self._filesize += len(msg.body) + 1
            pending.append(msg)
        if chunks:
            self._write(b"".join(chunks))
        return rotated

    async def _sync(self) -> None:
        """Make everything written durable, then FIN it."""
        if not self._pending:
            return
        self.logger.info("%s syncing %d records to disk", self.tag, len(self._pending))
        if self._fd is not None:
            self._end_member()
            try:
                await asyncio.to_thread(os.fsync, self._fd)
            except OSError as err:
                raise FatalError(f"{self.tag} failed syncing messages: "
                                 f"{goerrors.os_error('sync', self._path, err)}") from None
        pending, self._pending = self._pending, []
        for msg in pending:
            msg.finish()

    # --- the file ---------------------------------------------------------------------------

    def _current_filename(self) -> str:
        now = int(time.time()) if self._message_time is None else self._message_time
        cached_at, name = self._name_cache
        if cached_at != now:
            stamp = time.strftime(self.datetime_format, time.localtime(now))
            name = self.filename_format.replace("<DATETIME>", stamp)
            self._name_cache = (now, name)
        return name

    def _needs_rotation(self) -> bool:
        if self._fd is None:
            return True
        filename = self._current_filename()
        if filename != self._filename:
            self.logger.info("%s new filename %s, rotating...", self.tag, filename)
            return True
        opts = self.opts
        if opts.rotate_interval > 0:
            age = time.monotonic() - self._open_time
            if age > opts.rotate_interval:
                self.logger.info("%s %.3fs since last open, rotating...", self.tag, age)
                return True
        if opts.rotate_size > 0 and self._filesize > opts.rotate_size:
            self.logger.info("%s %s currently %d bytes (> %d), rotating...", self.tag, self._path,
                             self._filesize, opts.rotate_size)
            return True
        return False

    def _write(self, data: bytes) -> None:
        if self._gz is not None:
            self._member_bytes += len(data)
            data = self._gz.compress(data)
        try:
            _write_all(self._fd, data)  # type: ignore[arg-type]
        except OSError as err:
            raise FatalError(f"{self.tag} writing message to disk: "
                             f"{goerrors.os_error('write', self._path, err)}") from None
        self._disk_bytes += len(data)

    def _end_member(self, force: bool = False) -> None:
        """gzip: finish the current member (its trailer covers everything written so far)."""
        if self._gz is None or not (self._member_bytes or force):
            return
        tail = self._gz.flush(zlib.Z_FINISH)
        try:
            _write_all(self._fd, tail)  # type: ignore[arg-type]
        except OSError as err:
            raise FatalError(f"{self.tag} failed to close GZIP writer: "
                             f"{goerrors.os_error('write', self._path, err)}") from None
        self._disk_bytes += len(tail)
        self._gz = self._new_member()
        self._member_bytes = 0

    def _new_member(self) -> Any:
        return zlib.compressobj(self.opts.gzip_level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)

    def _close(self) -> None:
        """Finish, fsync and close the current file, then move it to --output-dir if needed."""
        fd = self._fd
        if fd is None:
            return
        # an untouched gzip file still gets one (empty) member, so it is a valid .gz
        self._end_member(force=self._disk_bytes == 0)
        try:
            os.fsync(fd)
        except OSError as err:
            raise FatalError(f"{self.tag} failed to fsync output file: "
                             f"{goerrors.os_error('sync', self._path, err)}") from None
        try:
            os.close(fd)
        except OSError as err:
            raise FatalError(f"{self.tag} failed to close output file: "
                             f"{goerrors.os_error('close', self._path, err)}") from None
        self._fd = None
        self._gz = None
        opts = self.opts
        if opts.work_dir == opts.output_dir:
            return
        src = self._path
        rel = src[len(opts.work_dir):].lstrip(os.sep) if src.startswith(opts.work_dir) else os.path.basename(src)
        dst = os.path.join(opts.output_dir, rel)
        self.logger.info("%s moving finished file %s to %s", self.tag, src, dst)
        try:
            exclusive_rename(src, dst)
            return
        except FileExistsError:
            pass
        except OSError as err:
            raise FatalError(f"{self.tag} unable to move file from {src} to {dst}: {err}") from None
        template = os.path.join(os.path.dirname(dst), os.path.basename(self._filename))
        rev = self._rev + 1
        while True:
            self.logger.warning("%s destination file already exists: %s", self.tag, dst)
            dst = template.replace("<REV>", f"-{rev:06d}")
            try:
                exclusive_rename(src, dst)
            except FileExistsError:
                rev += 1
                continue
            except OSError as err:
                raise FatalError(f"{self.tag} unable to rename file from {src} to {dst}: {err}") from None
            self.logger.info("%s renamed finished file %s to %s to avoid overwrite", self.tag, src, dst)
            return

    def _update_file(self) -> None:
        """Close the current file and open the next one (a fresh ``<REV>`` where needed)."""
        self._close()
        opts = self.opts
        filename = self._current_filename()
        if filename != self._filename:
            self._rev = 0
        else:
            self._rev += 1
        self._filename = filename
        self._open_time = time.monotonic()
        full = os.path.join(opts.work_dir, filename)
        _make_parent(full, self.tag)
        exclusive = bool(opts.gzip or opts.rotate_interval > 0)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_APPEND)
        has_rev = "<REV>" in full
        while True:
            path = full.replace("<REV>", f"-{self._rev:06d}")
            if opts.work_dir != opts.output_dir:
                rel = path[len(opts.work_dir):].lstrip(os.sep)
                out = os.path.join(opts.output_dir, rel)
                _make_parent(out, self.tag)
                if os.path.lexists(out):
                    self.logger.warning("%s output file already exists: %s", self.tag, out)
                    self._next_rev(has_rev, out)
                    continue
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                self.logger.warning("%s working file already exists: %s", self.tag, path)
                self._next_rev(has_rev, path)
                continue
            except OSError as err:
                raise FatalError(f"{self.tag} unable to open {path}: "
                                 f"{goerrors.os_error('open', path, err)}") from None
            size = os.fstat(fd).st_size
            if opts.rotate_size > 0 and size > opts.rotate_size:
                self.logger.info("%s %s currently %d bytes (> %d), rotating...", self.tag, path,
                                 size, opts.rotate_size)
                os.close(fd)
                self._next_rev(has_rev, path)
                continue
            break
        self.logger.info("%s opening %s", self.tag, path)
        try:
            fsync_dir(os.path.dirname(path))
        except OSError as err:
            os.close(fd)
            raise FatalError(f"{self.tag} unable to sync directory of {path}: {err}") from None
        self._fd = fd
        self._path = path
        self._filesize = size
        self._disk_bytes = size
        self._member_bytes = 0
        if opts.gzip:
            self._gz = self._new_member()
        elif size > 0 and _last_byte(path) != b"\n":
            # the previous writer died mid-line: end that line so the next message stays whole
            self._write(b"\n")

    def _next_rev(self, has_rev: bool, path: str) -> None:
        if not has_rev:
            raise FatalError(f"{self.tag} cannot use {path} and --filename-format has no <REV>")
        self._rev += 1


def _last_byte(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1)
    except OSError:
        return b"\n"  # unreadable (a write-only file?): leave it as it is


def _make_parent(path: str, tag: str) -> None:
    """upstream's ``makeDirFromPath``: ``MkdirAll`` of the directory part (its trailing slash
    kept, which shows in Go's error texts)."""
    parent = path[: path.rfind("/") + 1]
    if parent:
        try:
            goerrors.mkdir_all(parent, 0o770)
        except OSError as err:
            raise FatalError(f"{tag} unable to create dir: {err}") from None


# --- a range of history ----------------------------------------------------------------------


class _Retained:
    """A retained message as the file writer takes it (nothing to acknowledge)."""

    __slots__ = ("body", "timestamp")

    def __init__(self, body: bytes, timestamp: int) -> None:
        self.body = body
        self.timestamp = timestamp

    def finish(self) -> None:
        pass


async def export_history(opts: Any, go_cfg: GoNsqConfig, logger: Any, start: Any, end: Any) -> int:
    """``--from``/``--to``: write each topic's retained messages in the range to the files a live
    archive would have made (``<DATETIME>`` from each message's timestamp), fsync, exit."""
    async with common.http_session(opts.http_client_connect_timeout, 3600.0) as session:
        topics = list(opts.topic)
        if not topics:
            try:
                found = await common.lookupd_topics(session, opts.lookupd_http_address)
            except common.HTTPQueryError as err:
                fatal(f"could not retrieve topic list: {err}")
            topics = [t for t in found if opts.pattern is None or opts.pattern.search(t)]
        secret = go_cfg.conn.get("auth_secret")
        # every topic checked before a file is made: a typo ends the tool with nothing written
        sources = {topic: await history.holders(session, opts, topic, start, end, secret)
                   for topic in topics}
        for topic, bases in sources.items():
            fl = FileLogger(opts, topic, go_cfg, logger)
            fl._message_time = 0
            count = 0
            async for batch in history.read(session, bases, topic, start, end, secret):
                fl._incoming.extend(_Retained(m.body, m.timestamp) for m in batch)  # type: ignore[misc]
                count += len(batch)
                fl._write_incoming()
                if len(fl._pending) >= fl.max_in_flight:
                    await fl._sync()
            await fl._sync()
            fl._close()
            logger.info("%s archived %d retained messages", fl.tag, count)
    return 0


# --- all topics -----------------------------------------------------------------------------------


class TopicDiscoverer:
    """Owns the FileLoggers: the given topics, or lookupd's topics matching --topic-pattern."""

    def __init__(self, opts: Any, go_cfg: GoNsqConfig, logger: Any,
                 pattern: goregexp.GoRegexp | None) -> None:
        self.opts = opts
        self.go_cfg = go_cfg
        self.logger = logger
        self.pattern = pattern
        self.loggers: dict[str, FileLogger] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()

    def allowed(self, topic: str) -> bool:
        return self.pattern is None or self.pattern.match_string(topic)

    async def update_topics(self, topics: list[str]) -> None:
        """upstream's ``updateTopics``: one topic after the other, a logger (and its connected
        consumer) for each new one; one that cannot be made is logged and tried again at the
        next refresh."""
        for topic in topics:
            if topic in self.loggers or self._stopping.is_set():
                continue
            if not self.allowed(topic):
                self.logger.warning("skipping topic %s (doesn't match pattern %s)", topic,
                                    self.opts.topic_pattern)
                continue
            try:
                fl = FileLogger(self.opts, topic, self.go_cfg, self.logger)
                await fl.connect()
            except (ValueError, common.StartError) as err:
                self.logger.error("couldn't create logger for new topic %s: %s", topic, err)
                continue
            self.loggers[topic] = fl
            task = asyncio.create_task(fl.run())
            task.add_done_callback(self._logger_done)
            self.tasks[topic] = task

    def _logger_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        err = task.exception()
        if isinstance(err, FatalError):
            self.logger.critical("%s", err)
        else:
            self.logger.critical("file logger failed: %r", err)
        # upstream exits 1 on the spot: what was written but not yet FINished is delivered
        # again by nsqd, so nothing acknowledged is lost
        golog.exit_now(1)

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        for fl in self.loggers.values():
            fl.stop()

    def hup(self) -> None:
        for fl in self.loggers.values():
            fl.hup()

    async def _refresh(self) -> None:
        opts = self.opts
        async with common.http_session(opts.http_client_connect_timeout,
                                       opts.http_client_request_timeout) as session:
            while not self._stopping.is_set():
                try:
                    topics = await common.lookupd_topics(session, opts.lookupd_http_address)
                except common.HTTPQueryError as err:
                    self.logger.error("could not retrieve topic list: %s", err)
                else:
                    await self.update_topics(topics)
                try:
                    async with asyncio.timeout(opts.topic_refresh):
                        await self._stopping.wait()
                except TimeoutError:
                    pass

    async def run(self) -> int:
        starting = asyncio.create_task(self.update_topics(self.opts.topic))
        refresher = None if self.opts.topic else asyncio.create_task(self._refresh())
        await self._stopping.wait()
        await starting
        if refresher is not None:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
        for fl in self.loggers.values():
            fl.stop()  # those made while the stop came
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        return 0


async def _main(opts: Any, go_cfg: GoNsqConfig, logger: Any,
                pattern: goregexp.GoRegexp | None) -> int:
    discoverer = TopicDiscoverer(opts, go_cfg, logger, pattern)
    signals_seen = 0

    def on_term(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            logger.warning("second %s: exiting now (unacknowledged messages are re-delivered)",
                           signal.Signals(signum).name)
            golog.exit_now(1)
        discoverer.stop()

    common.on_signals(on_term, *common.TERM_SIGNALS)
    common.on_signals(lambda _s: discoverer.hup(), signal.SIGHUP)
    return await discoverer.run()


def _permanent_failure(o: Any, cfg: GoNsqConfig) -> tuple[str, str] | None:
    """The first topic whose logger could never be made (and why), checked before any starts.

    upstream logs ``couldn't create logger for new topic <t>: <why>`` for such a topic and runs
    on without it (with ``--topic``, consuming nothing, forever); we log the same line and exit
    1, so a unit or script sees the misconfiguration.
    """
    for topic in o.topic:
        if o.topic_pattern and (o.pattern is None or not o.pattern.match_string(topic)):
            continue
        try:
            filename_format(o, topic)
        except ValueError as err:
            return topic, str(err)
        problem = cfg.validate(o.max_in_flight)
        if problem is None and not is_valid_name(topic):
            problem = "invalid topic name"
        if problem is None and not is_valid_name(o.channel):
            problem = "invalid channel name"
        if problem is not None:
            return topic, problem
    return None


def main(argv: list[str] | None = None) -> None:
    gonsq.disable_client_logging()
    fs = build_flagset()
    values, rest = common.parse_flags(fs, sys.argv[1:] if argv is None else argv)
    if rest:
        fatal(f"unknown arguments: {golog.go_list(rest)}")
    o = common.Options(values)
    level = o.log_level.lower()
    if level not in ("debug", "info", "warn", "error", "fatal"):
        fatal("--log-level is invalid")
    o.log_level = level
    if o.version:
        print(common.version_string(PROGRAM))
        return
    if o.channel == "":
        fatal("--channel is required")
    if o.http_client_connect_timeout <= 0:
        fatal("--http-client-connect-timeout should be positive")
    if o.http_client_request_timeout <= 0:
        fatal("--http-client-request-timeout should be positive")
    replay = history.points(o)
    if replay is None:
        common.check_sources(o.nsqd_tcp_address, o.lookupd_http_address, suffix=".")
    if not 1 <= o.gzip_level <= 9:
        fatal(f"invalid --gzip-level value ({o.gzip_level}), should be 1-9")
    if not o.topic and not o.topic_pattern:
        fatal("--topic or --topic-pattern required")
    if not o.topic and not o.lookupd_http_address:
        fatal("--lookupd-http-address must be specified when no --topic specified")
    if o.max_in_flight < 1:
        fatal("--max-in-flight must be at least 1")  # nsqpy's: upstream would archive nothing
    if o.work_dir == "":
        o.work_dir = o.output_dir
    # compared and joined as strings below: "/data/out/" and "/data/out" are the same place
    o.output_dir = os.path.normpath(o.output_dir)
    o.work_dir = os.path.normpath(o.work_dir)
    o.pattern = None
    if o.topic_pattern:
        try:
            o.pattern = goregexp.compile(o.topic_pattern)  # Go's regexp, as upstream's
        except goregexp.RegexpUnavailable as err:
            fatal(str(err))
        except ValueError as err:  # nsqpy's: upstream would skip every topic
            fatal(f"invalid --topic-pattern {o.topic_pattern!r}: {err}")
    logger = make_logger(PROGRAM, o.log_prefix, o.log_level)
    cfg = common.go_config(o.consumer_opt, "consumer-opt", ignore_errors=True)
    failure = _permanent_failure(o, cfg)
    if failure is not None:
        logger.error("couldn't create logger for new topic %s: %s", *failure)
        raise SystemExit(1)
    if not o.topic:
        try:
            filename_format(o, "topic")
        except ValueError as err:
            fatal(str(err))
    if replay is not None:
        common.run(lambda: _export(o, cfg, logger, *replay))
    common.run(lambda: _main(o, cfg, logger, o.pattern))


async def _export(o: Any, cfg: GoNsqConfig, logger: Any, start: Any, end: Any) -> int:
    try:
        return await export_history(o, cfg, logger, start, end)
    except FatalError as err:
        logger.critical("%s", err)
        return 1


if __name__ == "__main__":
    main()
