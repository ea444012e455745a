"""nsqadmin: web UI and JSON API over an NSQ cluster (see ``main``)."""
