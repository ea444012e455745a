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

#: the pseudo-command name of a run; no real command name can contain a space
FIN_RUN = b"FIN "

_LINE = 21  # len(b"FIN ") + 16 + len(b"\n")
_RUN = re.compile(rb"(?:FIN [^ \r\n]{16}\n){2,}")


def match_fin_run(buf: bytes | bytearray, pos: int) -> tuple[int, tuple] | None:
    """Two or more complete FIN lines at ``pos``: ``(end, (FIN_RUN, [b"FIN"], ids))``, else None."""
    m = _RUN.match(buf, pos)
    if m is None:
        return None
    end = m.end()
    run = bytes(buf[pos:end])
    return end, (FIN_RUN, [b"FIN"], [run[i:i + 16] for i in range(4, end - pos, _LINE)])
