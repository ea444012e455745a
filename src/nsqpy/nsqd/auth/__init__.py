"""AUTH: the auth-server client (``client.py``) that V2's ``AUTH`` and the HTTP API share, and
the HTTP API's check (``http.py``) of what each route needs (``needs.py``, declared with the
route), with its flag (``options.py``). May import the core; the core never imports it (the
server installs it as ``nsqd.auth`` and ``nsqd.http_auth``). docs/security.md.
"""
