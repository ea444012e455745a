"""NSQ's utilities as console scripts: nsq_to_file, nsq_to_http, nsq_to_nsq, nsq_tail, nsq_stat, to_nsq.

Each module has a ``main()`` that parses upstream's flags (``nsqpy.common.flags``), runs on an
asyncio loop (uvloop when available) with the :mod:`nsqpy.client` library, and stops cleanly on
SIGINT/SIGTERM. Pieces they share (go-nsq ``--consumer-opt``/``--producer-opt`` parsing, version
strings, lookupd queries, host pools, timing metrics) live in :mod:`nsqpy.tools.common`.
"""
