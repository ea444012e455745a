"""nsqd: the NSQ daemon — topics, channels, TCP protocol V2 and the HTTP API."""
