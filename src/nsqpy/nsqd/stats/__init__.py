"""nsqd's numbers: the ``/stats`` snapshot (``snapshot.py``, upstream's shapes), Prometheus
``/metrics`` (``prometheus.py``) and the statsd pusher (``statsd.py``).

Reads the core's live objects (and the V2 client records) and never changes them; may import
the core and ``v2/``. The HTTP API serves what it computes.
"""
