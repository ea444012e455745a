"""What nsqlookupd's listeners share: options, logger, the registration DB, derived settings.

:class:`~nsqpy.lookupd.main.NSQLookupd` makes one and hands it to the TCP server, the HTTP API
and ``/metrics``; none of them imports the daemon, so the modules of this package form no
circle (main → tcp/http → state).
"""

from __future__ import annotations

import logging

from .options import Options
from .registration_db import RegistrationDB


class LookupdState:
    """One nsqlookupd's shared state (single-threaded: the event loop's)."""

    def __init__(self, opts: Options, logger: logging.Logger) -> None:
        self.opts = opts
        self.logger = logger
        self.db = RegistrationDB()
        #: level checks hoisted out of the hot paths (the level cannot change at run time)
        self.log_info = logger.isEnabledFor(logging.INFO)
        self.inactive_timeout_ns = round(opts.inactive_producer_timeout * 1e9)
        self.tombstone_lifetime_ns = round(opts.tombstone_lifetime * 1e9)
        #: the IDENTIFY answer, built once the listeners are bound
        self.identify_response = b""
        self.tcp_address = ""
        self.http_address = ""
        #: open V1 (TCP) clients, as the TCP server counts them
        self.tcp_clients = 0
