"""Logging in NSQ's shape: ``[nsqd] 2026/11/22 07:00:00.000000 INFO: message`` on stderr."""

from __future__ import annotations

import logging
import sys
import time

from typing import TYPE_CHECKING

from .durations import format_duration

if TYPE_CHECKING:
    import asyncio

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "warning": logging.WARNING, "error": logging.ERROR, "fatal": logging.CRITICAL}
#: upstream's numeric log levels, as /config/log_level reports them
NSQ_LEVEL_NUMBERS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
          logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}


def parse_level(text: str) -> str:
    """Normalise a ``--log-level`` value; ValueError for unknown ones."""
    t = text.strip().lower()
    if t == "warning":
        t = "warn"
    if t not in NSQ_LEVEL_NUMBERS:
        raise ValueError(f"invalid log level '{text}' (debug, info, warn, error, fatal)")
    return t


class _NsqFormatter(logging.Formatter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        t = record.created
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1e6):06d}"
        return f"{self.prefix}{stamp} {_NAMES.get(record.levelno, record.levelname)}: {record.getMessage()}"


def make_logger(name: str, prefix: str, level: str) -> logging.Logger:
    """A logger writing NSQ-shaped lines to stderr."""
    logger = logging.getLogger(f"nsqpy.{name}")
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_NsqFormatter(prefix))
    logger.addHandler(handler)
    logger.setLevel(LEVELS[level])
    logger.propagate = False
    return logger


def set_level(logger: logging.Logger, level: str) -> None:
    logger.setLevel(LEVELS[level])


#: how long request lines wait at most when no answer is written after them
FLUSH_DELAY = 0.001
#: the fraction and unit of ``N.xyzµs`` as Go prints it (trailing zeros dropped), by xyz
_MICROS = tuple((f".{n:03d}".rstrip("0").rstrip(".")) + "µs" for n in range(1000))


class RequestLog:
    """Upstream's per-request HTTP log line (``200 GET /lookup?topic=t (127.0.0.1:5555) 9.6µs``)
    at INFO, cheaply enough to write one per request.

    Going through ``logging`` costs ~17 µs a line (a record, ``localtime``, a lock, a flush).
    This formats the same NSQ-shaped line with the timestamp cached per second and keeps the
    lines until :meth:`flush`: the HTTP server calls it before it writes answers (so, as with
    Go, a client never holds an answer whose line is not in the log yet, and the lines of one
    read go out in one write), and a timer within a millisecond otherwise. So that the log
    keeps its order, any record the logger's handler emits first writes out the lines still
    pending (a filter on the handler). A logger not made by :func:`make_logger` gets the lines
    through ``logging``.
    """

    __slots__ = ("logger", "prefix", "stream", "pending", "_second", "_stamp", "_timer",
                 "_line_buffered")

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        handler = logger.handlers[0] if len(logger.handlers) == 1 else None
        formatter = getattr(handler, "formatter", None)
        stream = getattr(handler, "stream", None)
        self.pending: list[str] = []
        self._timer: "asyncio.TimerHandle | None" = None
        #: a line-buffered stream (stderr is) writes through on the newline already
        self._line_buffered = bool(getattr(stream, "line_buffering", False))
        self._second = -1
        self._stamp = ""
        if handler is not None and isinstance(formatter, _NsqFormatter) and stream is not None:
            self.prefix = formatter.prefix
            self.stream = stream
            handler.addFilter(self._before_record)
        else:
            self.prefix = ""
            self.stream = None

    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)

    def request(self, status: int, method: str, uri: str, remote: str, elapsed_ns: int) -> None:
        """Log one request (the caller checked :meth:`enabled`)."""
        if self.stream is None:
            self.logger.info("%d %s %s (%s) %s", status, method, uri, remote,
                             go_duration(elapsed_ns))
            return
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._stamp = self.prefix + time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(second))
        if 1000 <= elapsed_ns < 1_000_000:  # most requests: Go's "12.345µs"
            whole, frac = divmod(elapsed_ns, 1000)
            line = (f"{self._stamp}.{int((now - second) * 1e6):06d} INFO: {status} {method} "
                    f"{uri} ({remote}) {whole}{_MICROS[frac]}\n")
        else:
            line = (f"{self._stamp}.{int((now - second) * 1e6):06d} INFO: {status} {method} "
                    f"{uri} ({remote}) {go_duration(elapsed_ns)}\n")
        if self._timer is None:
            import asyncio  # (this module loads before the program chooses how asyncio loads)

            try:
                self._timer = asyncio.get_running_loop().call_later(FLUSH_DELAY, self._on_timer)
            except RuntimeError:  # no event loop: written at once
                self.stream.write(line)
                return
        self.pending.append(line)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Write the pending lines, in one write."""
        pending = self.pending
        if pending and self.stream is not None:
            text = "".join(pending)
            pending.clear()
            try:
                self.stream.write(text)
                if not self._line_buffered:
                    self.stream.flush()
            except (OSError, ValueError):
                pass

    def _before_record(self, record: logging.LogRecord) -> bool:
        if self.pending:
            self.flush()
        return True


def go_duration(ns: int) -> str:
    """Go's ``Duration.String`` for the short spans a request takes (``889ns``, ``9.6µs``,
    ``93.424µs``, ``1.5ms``, ``2.000001s``)."""
    if ns < 1000:
        return f"{ns}ns" if ns else "0s"
    if ns >= 60_000_000_000:
        return format_duration(ns / 1e9)
    for unit, size in (("µs", 1000), ("ms", 1_000_000), ("s", 1_000_000_000)):
        if ns < size * 1000 or size == 1_000_000_000:
            whole, frac = divmod(ns, size)
            if not frac:
                return f"{whole}{unit}"
            digits = len(str(size)) - 1
            return f"{whole}.{frac:0{digits}d}".rstrip("0") + unit
    raise AssertionError("unreachable")
