"""nsqd: the NSQ daemon — topics, channels, the TCP protocol V2 and the HTTP API.

The core is this folder's own modules: ``nsqd.py`` (the NSQD object), ``topic.py``, ``channel.py``,
``diskqueue.py``, ``metadata.py``, ``lookup.py`` (nsqlookupd registration), ``options.py``
(upstream's flags) and ``hooks.py``, the narrow hooks through which the core reaches features.
Above it: ``v2/`` (a TCP client connection), ``stats/`` (``/stats``, ``/metrics``, statsd),
``http.py`` (upstream's HTTP routes), ``lifecycle/`` and ``replication/`` (opt-in features), and at
the top ``server.py`` and ``main.py``, which assemble the program. The rule: an arrow points from
a feature to the core, never back; a new feature gets a folder of its own and plugs in through
``hooks.py`` (docs/architecture.md).
"""
