"""History (issue #33, docs/history.md): topics that keep what they received, channels that
start in the past, and ranges read over HTTP. Opt-in: without ``--retention``,
``--retention-bytes`` or a topic's retention setting only ``options`` and ``install`` are ever
imported, and nsqd and its data directory are upstream's."""
