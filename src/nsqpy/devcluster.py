"""``make run``: a local cluster with default ports — nsqlookupd, nsqd registered with it, and
nsqadmin once it exists — in the foreground until Ctrl-C, then stopped cleanly."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def main() -> None:
    data = Path(os.environ.get("NSQPY_DATA", "data"))
    data.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []

    def start(argv: list[str]) -> None:
        print("starting:", " ".join(argv), flush=True)
        procs.append(subprocess.Popen(argv))

    start([_bin("nsqlookupd")])
    time.sleep(0.5)
    start([_bin("nsqd"), "--lookupd-tcp-address=127.0.0.1:4160", f"--data-path={data}",
           "--broadcast-address=127.0.0.1"])
    if importlib.util.find_spec("nsqpy.admin.main") is not None:
        start([_bin("nsqadmin"), "--lookupd-http-address=127.0.0.1:4161"])
    print("\nlocal cluster up: nsqd tcp 4150 http 4151, nsqlookupd tcp 4160 http 4161"
          + (", nsqadmin http://127.0.0.1:4171" if len(procs) > 2 else "")
          + "\n  publish:  curl -d 'hello' 'http://127.0.0.1:4151/pub?topic=test'"
          + "\n  consume:  nsq_tail --topic=test --lookupd-http-address=127.0.0.1:4161"
          + "\nCtrl-C stops everything.\n", flush=True)

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
