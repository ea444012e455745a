"""The real statsd daemon (Etsy's, npm ``statsd``, installed by ``make test`` under
tests/statsd_daemon) as a subprocess on free loopback ports, stopped by PID.

What it aggregated is read over its management TCP interface (``counters`` / ``gauges``), which
answers with Node's ``util.inspect`` of the object followed by ``END``.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from .servers import free_port

STATSD_DIR = Path(__file__).resolve().parent.parent / "statsd_daemon" / "node_modules" / "statsd"
NODE = shutil.which("node")
_ENTRY = re.compile(r"(?:'((?:[^'\\]|\\.)*)'|([A-Za-z_$][\w$]*)): (-?[0-9.e+-]+|NaN|-?Infinity)")


def missing_reason() -> str | None:
    """Why the daemon cannot run here (for a skip), or None."""
    if NODE is None:
        return "node is not installed"
    if not (STATSD_DIR / "stats.js").is_file():
        return "npm statsd missing: run `make test` (it installs tests/statsd_daemon)"
    return None


def free_udp_port() -> int:
    while True:
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


class StatsdDaemon:
    """``node stats.js config.js`` with a UDP port for metrics and a management TCP port.

    ``config`` entries override the defaults (e.g. ``backends``/``graphitePort`` to feed a real
    carbon, ``flushInterval`` in ms); the default backend is the console one and flushes are an
    hour apart so counters keep accumulating until read.
    """

    def __init__(self, directory: Path, **config: Any) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.udp_port = free_udp_port()
        self.mgmt_port = free_port()
        cfg = {"address": "127.0.0.1", "port": self.udp_port, "mgmt_address": "127.0.0.1",
               "mgmt_port": self.mgmt_port, "flushInterval": 3_600_000,
               "backends": ["./backends/console"], "console": {"prettyprint": False}}
        cfg.update(config)
        conf = directory / "statsd_config.js"
        conf.write_text("(" + json.dumps(cfg) + ")\n")
        self.log_path = directory / "statsd.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([NODE or "node", str(STATSD_DIR / "stats.js"), str(conf)],
                                     cwd=STATSD_DIR, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.command("health")
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"statsd did not start: {self.log()}")
                time.sleep(0.1)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.udp_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def command(self, name: str) -> str:
        """One management command's answer (up to its ``END`` or ``health`` line)."""
        with socket.create_connection(("127.0.0.1", self.mgmt_port), timeout=5) as sock:
            sock.sendall(name.encode() + b"\n")
            data = b""
            while not (data.endswith(b"END\n\n") or (name == "health" and data.endswith(b"\n"))):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        return data.decode()

    def _inspected(self, name: str) -> dict[str, float]:
        text = self.command(name)
        return {(m.group(1) if m.group(1) is not None else m.group(2)): float(m.group(3))
                for m in _ENTRY.finditer(text)}

    def counters(self) -> dict[str, float]:
        return self._inspected("counters")

    def gauges(self) -> dict[str, float]:
        return self._inspected("gauges")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
