"""Logging in NSQ's shape: ``[nsqd] 2026/11/22 07:00:00.000000 INFO: message`` on stderr."""

from __future__ import annotations

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
