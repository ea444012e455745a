"""The nsqd program assembled: the core, its listeners and the features its flags ask for.

Everything nsqd runs is started and stopped here, in one readable order (the order of upstream's
log lines): the core (``NSQD``) is opened and loaded, the V2 TCP listener (``v2/``) and the HTTP
API (``http.py``) are put in front of it, and the features are installed through the core's
hooks: the lifecycle controls always (their settings can be turned on at run time over HTTP),
TLS and the auth client with their flags, leases with ``--leases``, replication with ``--replicate-to`` or
``--accept-replicas``, statsd with ``--statsd-address``.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from .. import version_string
from ..common.addr import is_unix_socket, listen_socket, listener_name
from .http import start_http
from .lifecycle.controls import install as install_lifecycle
from .history.install import install_history
from .leases.install import install_leases
from .lifecycle.drain import install_drain_signal
from .nsqd import NSQD
from .options import percentile_error
from .stats.statsd import start_statsd
from .v2.connection import V2Connection


class Server:
    """One running nsqd: ``start`` and ``shutdown`` are the daemon's two entry points."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self._tcp_server: asyncio.AbstractServer | None = None
        self.http_server: Any = None  # httpserver.HTTPServer
        self.https_server: Any = None

    async def start(self) -> None:
        nsqd = self.nsqd
        opts = nsqd.options
        # upstream's nsqd.New: the data path and option ranges (main.py, options.start_up_errors),
        # TLS, percentiles, then its first two log lines (a start-up error prints only itself)
        if opts.tls_cert or opts.tls_key or opts.tls_required != "false":
            # (TLS and the auth client are loaded when a flag asks for them)
            from .v2.tls import server_context

            nsqd.tls_context = server_context(opts, nsqd.logger)
        problem = percentile_error(opts.values)
        if problem:
            raise RuntimeError(problem)
        nsqd.logger.info("%s", version_string("nsqd"))
        nsqd.logger.info("ID: %d", opts.node_id)
        if opts.auth_http_address:
            from .auth.client import AuthClient
            from .auth.http import HttpAuth
            from .v2.tls import client_context, common_name

            nsqd.auth = AuthClient.from_options(opts, nsqd.logger, client_context(opts))
            if nsqd.auth is not None:
                nsqd.http_auth = HttpAuth(nsqd.auth, opts.http_auth_required, nsqd.logger,
                                          common_name)
        nsqd.open()
        install_lifecycle(nsqd)
        install_leases(nsqd)
        install_history(nsqd)
        if opts.replicate_to or opts.accept_replicas:
            from .replication.setup import setup_replication

            setup_replication(nsqd)
        nsqd.load()
        await self._listen_tcp(opts.tcp_address)
        if opts.http_address:
            self.http_server, nsqd.http_port = await start_http(nsqd, opts.http_address)
        if nsqd.tls_context is not None and opts.https_address:
            self.https_server, nsqd.https_port = await start_http(nsqd, opts.https_address,
                                                                  nsqd.tls_context)
        # as upstream, unset broadcast ports become the listeners' (what /config/... answers)
        for key, port in (("broadcast_http_port", nsqd.http_port), ("broadcast_tcp_port", nsqd.tcp_port)):
            if not opts.values[key] and port > 0:
                opts.values[key] = port
        nsqd.run()
        statsd_task = start_statsd(nsqd)  # resolves --statsd-prefix; pushes with --statsd-address
        if statsd_task is not None:
            nsqd.keep_task(statsd_task)
        nsqd.lookup.start()
        if nsqd.replicator is not None:
            nsqd.replicator.start()
        if nsqd.replicas is not None:
            nsqd.replicas.start()
        install_drain_signal(nsqd)

    async def _listen_tcp(self, addr: str) -> None:
        nsqd = self.nsqd
        if is_unix_socket(addr):
            self._tcp_server = await nsqd.loop.create_unix_server(lambda: V2Connection(nsqd), addr)
            nsqd.tcp_port = -1
        else:
            self._tcp_server = await nsqd.loop.create_server(  # dual-stack on 0.0.0.0, as Go
                lambda: V2Connection(nsqd), sock=listen_socket(addr))
            nsqd.tcp_port = self._tcp_server.sockets[0].getsockname()[1]
        nsqd.logger.info("TCP: listening on %s", _sockname(self._tcp_server))

    async def shutdown(self) -> None:
        """Graceful exit: stop listening, close clients, flush queues to disk."""
        nsqd = self.nsqd
        if nsqd.exiting:
            return
        nsqd.exiting = True
        if self._tcp_server is not None:
            nsqd.logger.info("TCP: closing %s", _sockname(self._tcp_server))
            self._tcp_server.close()
        nsqd.close_clients()
        for label, server in (("HTTP", self.http_server), ("HTTPS", self.https_server)):
            if server is not None:
                nsqd.logger.info("%s: closing %s", label, listener_name(server.sockets[0]))
                await server.close()
        if nsqd.auth is not None:
            await nsqd.auth.close()
        nsqd.persist_at_exit()
        if nsqd.replicator is not None:
            await nsqd.replicator.close()
        if nsqd.replicas is not None:
            nsqd.replicas.close()
        await nsqd.close()


def _sockname(server: asyncio.AbstractServer) -> str:
    sock = server.sockets[0]
    name = sock.getsockname()
    if sock.family == socket.AF_UNIX:
        return str(name)
    host, port = name[0], name[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
