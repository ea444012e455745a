"""nsqlookupd: the directory service — registration DB, TCP protocol V1 server and HTTP API."""
