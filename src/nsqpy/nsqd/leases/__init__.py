"""Consumption leases (opt-in with ``--leases``; docs/leases.md): in-flight messages that belong
to a named lease instead of a connection, finished or requeued as a group over HTTP, replayed
identically to a reader that connects under the same name again.

``names.py`` parses lease names, ``lease.py`` is one lease, ``registry.py`` the leases of one
nsqd (what IDENTIFY, SUB, RDY, TOUCH and a connection's end call), ``http.py`` the routes,
``options.py`` the flags, ``install.py`` the wiring the server calls. May import the core,
``http.py`` and ``v2/``; the core never imports it.
"""
