"""The TCP protocol V2: one client connection, from its bytes to the core and back.

``connection.py`` (transport, with ``stream_stack.py`` for TLS and compression and
``liveness.py`` for heartbeats and deadlines), ``protocol_v2.py`` (the state machine, sans I/O),
``client.py`` (the record nsqd and ``/stats`` hold) and ``tls.py`` (TLS contexts); the
auth-server client it asks is ``nsqd/auth/``. May import the core (``nsqd.py``, ``topic.py``,
``channel.py``, ``options.py``), ``auth/`` and ``nsqpy.protocol``; the core never imports it
(the server does).
"""
