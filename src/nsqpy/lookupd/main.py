"""The ``nsqlookupd`` program: flags, then :class:`~nsqpy.lookupd.nsqlookupd.NSQLookupd` until
SIGINT/SIGTERM.

nsqlookupd serves no TLS, so the event loop is loaded without OpenSSL before anything else
(:mod:`nsqpy.common.notls`): that is most of the difference between an idle nsqlookupd of
~26 MiB and one under 20.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from ..common.notls import load_event_loop_without_tls

    load_event_loop_without_tls()
    from ..common import daemon
    from .nsqlookupd import serve
    from .options import parse_options

    return daemon.main("nsqlookupd", parse_options, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
