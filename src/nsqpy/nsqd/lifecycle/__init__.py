"""The message lifecycle controls (opt-in, docs/operations.md): max attempts with dead letters,
message TTL, bounded disk queues, requeue on disconnect, drain, peek, per-topic and per-channel
settings, with their HTTP routes (``http.py``) and flags (``options.py``).

``controls.py`` is what the core calls (``hooks.Lifecycle``); the rest is one control a module.
May import the core (including ``http.py`` for its route helpers); the core never imports it.
"""
