"""Replication (opt-in, docs/replication.md): a peer keeps a copy of every message until it is
finished, and delivers it if the origin is lost.

``origin.py`` ships (``--replicate-to``), ``peer.py`` and ``store.py`` keep the copies
(``--accept-replicas``), ``reship.py`` reconciles a returning origin, ``failover.py`` and
``adopt.py`` take over a lost one, ``setup.py`` installs it all, ``options.py`` holds its flags.
May import the core, ``v2/`` (TLS contexts, the V2 connection it takes over) and the client
library; the core reaches it only through ``hooks.Replication`` and ``nsqd.replicas``.
"""
