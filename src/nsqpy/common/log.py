"""Logging in NSQ's shape: ``[nsqd] 2026/11/22 07:00:00.000000 INFO: message`` on stderr."""

from __future__ import annotations

import asyncio
import logging
import sys
import time

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


class RequestLog:
    """Upstream's per-request HTTP log line (``200 GET /lookup?topic=t (127.0.0.1:5555) 9.6µs``)
    at INFO, cheaply enough to write one per request.

    Going through ``logging`` costs ~17 µs a line (a record, ``localtime``, a lock, a flush);
    this formats the same NSQ-shaped line with the timestamp cached per second and appends it to
    the byte buffer under the logger's stream, flushed once per event-loop turn. Every other log
    line goes through the same buffer (the text stream flushes into it), so the order of lines
    is kept. A logger not made by :func:`make_logger` gets the lines through ``logging``.
    """

    __slots__ = ("logger", "prefix", "raw", "_second", "_stamp", "_flush_pending")

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        handler = logger.handlers[0] if len(logger.handlers) == 1 else None
        formatter = getattr(handler, "formatter", None)
        stream = getattr(handler, "stream", None)
        raw = getattr(stream, "buffer", None)
        if isinstance(formatter, _NsqFormatter) and raw is not None:
            self.prefix = formatter.prefix
            self.raw = raw
        else:
            self.prefix = ""
            self.raw = None
        self._second = -1
        self._stamp = ""
        self._flush_pending = False

    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)

    def request(self, status: int, method: str, uri: str, remote: str, elapsed_ns: int) -> None:
        """Log one request (the caller checked :meth:`enabled`)."""
        text = f"{status} {method} {uri} ({remote}) {go_duration(elapsed_ns)}"
        raw = self.raw
        if raw is None:
            self.logger.info("%s", text)
            return
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._stamp = self.prefix + time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(second))
        raw.write(f"{self._stamp}.{int((now - second) * 1e6):06d} INFO: {text}\n".encode())
        if not self._flush_pending:
            self._flush_pending = True
            try:
                asyncio.get_running_loop().call_soon(self._flush)
            except RuntimeError:
                self._flush()

    def _flush(self) -> None:
        self._flush_pending = False
        try:
            self.raw.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            pass


def go_duration(ns: int) -> str:
    """Go's ``Duration.String`` for the short spans a request takes (``889ns``, ``9.6µs``,
    ``93.424µs``, ``1.5ms``, ``2.000001s``)."""
    if ns < 1000:
        return f"{ns}ns" if ns else "0s"
    if ns >= 60_000_000_000:
        from .flags import format_duration

        return format_duration(ns / 1e9)
    for unit, size in (("µs", 1000), ("ms", 1_000_000), ("s", 1_000_000_000)):
        if ns < size * 1000 or size == 1_000_000_000:
            whole, frac = divmod(ns, size)
            if not frac:
                return f"{whole}{unit}"
            digits = len(str(size)) - 1
            return f"{whole}.{frac:0{digits}d}".rstrip("0") + unit
    raise AssertionError("unreachable")
