"""What AUTH over HTTP costs per request (docs/security.md, "AUTH over HTTP"), with ``wrk``.

nsqd's ``POST /pub`` (200-byte body, 32 connections, as http_bench.py's ``pub`` row) three ways:
default flags; with ``--auth-http-address`` (``/pub`` is upstream's route, not checked: the
cost should be nil); and with ``--http-auth-required`` too, every request carrying
``Authorization: Bearer`` (the check runs: the header read, the cached answer looked up, the
grant matched). The auth server is a stdlib HTTP server in this process; it is asked once, the
answer is kept for its ttl. Printed: requests/s, p50/p99 latency and nsqd's CPU time per request.

    .venv/bin/python bench/http_auth_bench.py [--duration 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import http.server
import json
import tempfile
import threading
from pathlib import Path

from http_bench import OURS, ROWS, Row, Server, fmt, run_wrk

GRANT = json.dumps({"ttl": 3600, "identity": "bench", "authorizations": [
    {"topic": ".*", "channels": [".*"], "permissions": ["publish", "subscribe"]}]}).encode()


class _Auth(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # every secret is granted everything
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(GRANT)))
        self.end_headers()
        self.wfile.write(GRANT)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    auth = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Auth)
    threading.Thread(target=auth.serve_forever, daemon=True).start()
    address = f"--auth-http-address=127.0.0.1:{auth.server_address[1]}"
    pub = ROWS["pub"]
    bearer = Row(pub.name, pub.daemon, pub.method, pub.path, pub.connections, pub.body,
                 headers=(("Authorization", "Bearer s3cret"),))
    cases = [("default flags", (), pub), ("--auth-http-address", (address,), pub),
             ("+ --http-auth-required, Bearer", (address, "--http-auth-required"), bearer)]
    try:
        with tempfile.TemporaryDirectory(prefix="http_auth_bench") as tmp:
            for rnd in range(args.rounds):
                print(f"round {rnd + 1}: POST /pub, wrk -t1 -c{pub.connections}, "
                      f"{args.duration:g}s", flush=True)
                for name, flags, row in cases:
                    server = Server("nsqd", OURS, Path(tmp), flags)
                    try:
                        run_wrk(row, server.http, 1.0, Path(tmp))  # warm-up (and the one query)
                        result = run_wrk(row, server.http, args.duration, Path(tmp),
                                         server.proc.pid)
                    finally:
                        server.close()
                    print(f"  {name:<32} {fmt(result, row)}", flush=True)
    finally:
        auth.shutdown()


if __name__ == "__main__":
    main()
