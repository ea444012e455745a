"""``make run``: a local cluster with default ports — nsqlookupd, nsqd registered with it, and
nsqadmin — in the foreground until Ctrl-C (or SIGTERM), then stopped cleanly (exit 0).

Two environment variables change where it runs, for tests that start it next to other clusters
(tests/docs runs the README this way): ``NSQPY_DATA`` (nsqd's data directory, default ``data``) and
``NSQPY_DEV_PORTS`` = ``NSQD_TCP,NSQD_HTTP,LOOKUPD_TCP,LOOKUPD_HTTP,NSQADMIN_HTTP`` (default
``4150,4151,4160,4161,4171``). The banner shows the ports in use.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


DEFAULT_PORTS = (4150, 4151, 4160, 4161, 4171)


def ports_from_env() -> tuple[int, int, int, int, int]:
    """``NSQPY_DEV_PORTS`` (five comma-separated ports) or upstream's defaults."""
    value = os.environ.get("NSQPY_DEV_PORTS", "")
    if not value:
        return DEFAULT_PORTS
    ports = tuple(int(p) for p in value.split(","))
    if len(ports) != 5:
        raise SystemExit("NSQPY_DEV_PORTS needs five ports: NSQD_TCP,NSQD_HTTP,LOOKUPD_TCP,LOOKUPD_HTTP,NSQADMIN_HTTP")
    return ports  # type: ignore[return-value]


def main() -> None:
    tcp, http, ltcp, lhttp, admin = ports_from_env()
    data = Path(os.environ.get("NSQPY_DATA", "data"))
    data.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []

    def start(argv: list[str]) -> None:
        print("starting:", " ".join(argv), flush=True)
        procs.append(subprocess.Popen(argv))

    custom = (tcp, http, ltcp, lhttp, admin) != DEFAULT_PORTS

    def on(flag: str, port: int) -> list[str]:
        """Other ports than the defaults: loopback only (a test's cluster); defaults: upstream's flags."""
        return [f"--{flag}=127.0.0.1:{port}"] if custom else []

    start([_bin("nsqlookupd"), *on("tcp-address", ltcp), *on("http-address", lhttp)])
    time.sleep(0.5)
    start([_bin("nsqd"), f"--lookupd-tcp-address=127.0.0.1:{ltcp}", f"--data-path={data}",
           "--broadcast-address=127.0.0.1", *on("tcp-address", tcp), *on("http-address", http)])
    start([_bin("nsqadmin"), f"--lookupd-http-address=127.0.0.1:{lhttp}", *on("http-address", admin)])
    print(f"\nlocal cluster up: nsqd tcp {tcp} http {http}, nsqlookupd tcp {ltcp} http {lhttp}, "
          f"nsqadmin http://127.0.0.1:{admin}"
          f"\n  publish:  curl -d 'hello' 'http://127.0.0.1:{http}/pub?topic=test'"
          f"\n  consume:  .venv/bin/nsq_tail --topic=test --lookupd-http-address=127.0.0.1:{lhttp}"
          "\nCtrl-C stops everything.\n", flush=True)

    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    try:
        while not stopping:
            for p in procs:
                if p.poll() is not None:
                    print(f"{p.args[0]} exited with {p.returncode}", file=sys.stderr)
                    code = 1
                    stopping = True
            time.sleep(0.2)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
    raise SystemExit(code)


if __name__ == "__main__":
    main()
