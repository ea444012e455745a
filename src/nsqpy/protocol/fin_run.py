"""Runs of ``FIN <id>`` lines parsed in one step: the consume path's command parsing, batched.

A consumer sends one ``FIN <16-byte id>\\n`` (21 bytes) per message, so a busy connection's reads
are mostly back-to-back FINs. Parsed line by line, each costs a ``find``, a copy, a ``split``, a
tuple and a handler call -- as much as delivering the message did. :func:`match_fin_run` instead
matches the whole run with one regular expression and returns it as a single command
``(FIN_RUN, [b"FIN"], ids)`` that nsqd handles with one call (``ProtocolV2.fin_run`` -> ``Channel.finish_many``), which
still treats every id exactly as a lone FIN would (same errors, same order).

Only what the line parser would read as ``FIN`` with one 16-byte id is taken (no space, CR or LF
inside the id, LF-terminated); anything else -- a CRLF line, a wrong length, a partial line at
the end of the buffer -- is left to the line parser, so behaviour is unchanged.
"""

from __future__ import annotations

import re

from .repeated import RepeatedRecords

#: the pseudo-command name of a run; no real command name can contain a space
FIN_RUN = b"FIN "

_LINE = 21  # len(b"FIN ") + 16 + len(b"\n")
_RUN = re.compile(rb"(?:FIN [^ \r\n]{16}\n){2,}")
# the ids of whole lines cut out in C, up to 256 lines per unpack, not a slice per line
_LINE_IDS = RepeatedRecords("4x16sx")


def _all_fin_lines(run: bytes, n: int) -> bool:
    """``run`` is exactly ``n`` lines ``FIN <16 bytes without space, CR or LF>\n``: checked
    column by column with extended slices and counts (C speed, no per-line work)."""
    return (run[3::_LINE] == b" " * n and run[20::_LINE] == b"\n" * n
            and run[0::_LINE] == b"F" * n and run[1::_LINE] == b"I" * n
            and run[2::_LINE] == b"N" * n and run.count(b" ") == n
            and run.count(b"\n") == n and b"\r" not in run)


def match_fin_run(buf: bytes | bytearray, pos: int) -> tuple[int, tuple] | None:
    """Two or more complete FIN lines at ``pos``: ``(end, (FIN_RUN, [b"FIN"], ids))``, else None.

    The common case -- everything buffered is whole FIN lines -- is recognised without the
    regular expression; a run followed by anything else goes through it."""
    n = (len(buf) - pos) // _LINE
    if n < 2:
        return None
    end = pos + n * _LINE
    run = bytes(buf[pos:end])
    if not _all_fin_lines(run, n):
        m = _RUN.match(buf, pos)
        if m is None:
            return None
        end = m.end()
        run = run[:end - pos]
    return end, (FIN_RUN, [b"FIN"], _ids(run, (end - pos) // _LINE))


def _ids(run: bytes, n: int) -> list[bytes]:
    """The 16-byte ids of the ``n`` whole FIN lines at the start of ``run``."""
    ids: list[bytes] = []
    _LINE_IDS.unpack_into(ids, run, 0, n)
    return ids
