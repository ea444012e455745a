"""An origin A replicating through a cuttable proxy to its peer B (and B to A, directly: a ring of
two, so what B adopted from A has a second copy too), and the random faults the chaos tests throw
at them (tests/nsqd/replication/test_chaos.py, issue #25).

Every fault is one failure at a time (the docs' single-failure rows): after each, the test waits
until both links are up again with nothing unacked (everything each holds is on the other) before
the next,
except the composite faults that are themselves the rows under test ("B frozen, thawed, A killed
within a second", "link cut, A killed").
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.replication import get_json
from helpers.servers import Nsqd, free_port

PROXY = Path(__file__).with_name("link_proxy.py")
FAILOVER = "2s"


class Proxy:
    def __init__(self, target: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, str(PROXY), str(self.port), target],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.address = f"127.0.0.1:{self.port}"

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


def wipe(node: Nsqd) -> None:
    """The data directory deleted (the node's log kept, to read after a failure)."""
    for entry in os.listdir(node.data_path):
        path = os.path.join(node.data_path, entry)
        if entry.endswith(".log"):
            continue
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


class Pair:
    def __init__(self, tmp: Path, degraded: str, log=print) -> None:
        self.tmp = tmp
        self.log = log
        # a short --msg-timeout: what a killed consumer connection had in flight comes back soon
        a_tcp, a_http = free_port(), free_port()
        self.b_flags = [f"--replicate-to=127.0.0.1:{a_tcp}", "--sync-every=1", "--msg-timeout=4s",
                        f"--replication-failover-timeout={FAILOVER}"]
        self.b = Nsqd(tmp / "b", *self.b_flags)
        self.proxy = Proxy(self.b.tcp_address)
        self.a_flags = [f"--replicate-to={self.proxy.address}", "--sync-every=1", "--msg-timeout=4s",
                        f"--replication-degraded={degraded}",
                        f"--replication-failover-timeout={FAILOVER}"]
        self.a = Nsqd(tmp / "a", *self.a_flags, tcp_port=a_tcp, http_port=a_http)
        self.frozen: list[Nsqd] = []
        # accept mode: messages answered OK with one copy while A could die (docs' allowance)
        self.at_risk = 0
        self._risk_base = 0

    # --- state ---------------------------------------------------------------------------------

    def rep(self, node: Nsqd | None = None) -> dict:
        return get_json(node or self.a, "/stats?format=json")["replication"]

    def settled(self) -> bool:
        try:
            reps = [self.rep(self.a), self.rep(self.b)]
        except OSError:
            return False
        return all(r["state"] == "up" and r["unacked_batches"] == 0 and r["waiting_publishes"] == 0
                   for r in reps)

    def wait_settled(self, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.settled():
                self._risk_base = self._single()
                return
            time.sleep(0.1)
        raise AssertionError(f"the links did not settle within {timeout}s: "
                             f"{self.a.log()[-3000:]}\n{self.b.log()[-3000:]}")

    def _single(self) -> int:
        """Messages A answered OK with one copy so far (MPUBs count 5: the biggest batch)."""
        r = self.rep()
        return r["accepted_single_copy"] * 5 + r["degraded_messages"]

    # --- faults --------------------------------------------------------------------------------

    def freeze(self, node: Nsqd, seconds: float) -> None:
        os.kill(node.pid, signal.SIGSTOP)
        self.frozen.append(node)
        try:
            time.sleep(seconds)
        finally:
            os.kill(node.pid, signal.SIGCONT)
            self.frozen.remove(node)

    def kill_a(self, wipe_data: bool, down_for: float) -> None:
        try:
            self.at_risk += self._single() - self._risk_base
        except OSError:
            pass
        self.a.kill9()
        if wipe_data:
            wipe(self.a)
        time.sleep(down_for)
        self.a = self.a.restart(*self.a_flags)
        self._risk_base = 0

    def kill_b(self, wipe_data: bool, down_for: float) -> None:
        self.b.kill9()
        if wipe_data:
            wipe(self.b)
        time.sleep(down_for)
        self.b = self.b.restart(*self.b_flags)

    def fault(self, rng: random.Random) -> str:
        """One random fault, recovered from; returns what it was (for the log)."""
        kind = rng.choice(["freeze_a", "freeze_b", "cut", "drop", "kill_a", "kill_b",
                           "thaw_kill_a", "cut_kill_a"])
        wipe_data = rng.random() < 0.5
        if kind == "freeze_a":
            t = rng.uniform(0.5, 7.0)
            self.freeze(self.a, t)
            return f"{kind} {t:.1f}s"
        if kind == "freeze_b":
            t = rng.uniform(0.5, 7.0)
            self.freeze(self.b, t)
            return f"{kind} {t:.1f}s"
        if kind == "cut":
            t = rng.uniform(0.5, 7.0)
            self.proxy.signal(signal.SIGUSR1)
            time.sleep(t)
            if rng.random() < 0.5:
                self.proxy.signal(signal.SIGHUP)
            self.proxy.signal(signal.SIGUSR2)
            return f"{kind} {t:.1f}s"
        if kind == "drop":
            self.proxy.signal(signal.SIGHUP)
            return kind
        if kind == "kill_b":
            t = rng.uniform(0.2, 3.0)
            self.kill_b(wipe_data, t)
            return f"{kind} wipe={wipe_data} down {t:.1f}s"
        down = rng.uniform(0.2, 4.0)
        if kind == "kill_a":
            self.kill_a(wipe_data, down)
            return f"{kind} wipe={wipe_data} down {down:.1f}s"
        if kind == "thaw_kill_a":  # issue #25's scenario
            t, after = rng.uniform(5.0, 7.0), rng.uniform(0.0, 1.0)
            self.freeze(self.b, t)
            time.sleep(after)
            self.kill_a(wipe_data, down)
            return f"{kind} B frozen {t:.1f}s, A killed {after:.2f}s after, wipe={wipe_data}"
        t = rng.uniform(0.5, 5.0)  # cut_kill_a
        self.proxy.signal(signal.SIGUSR1)
        time.sleep(t)
        self.kill_a(wipe_data, 0.0 if rng.random() < 0.5 else down)
        self.proxy.signal(signal.SIGHUP)
        self.proxy.signal(signal.SIGUSR2)
        return f"{kind} cut {t:.1f}s, wipe={wipe_data}"

    def close(self) -> None:
        for node in self.frozen:
            os.kill(node.pid, signal.SIGCONT)
        self.a.stop()
        self.b.stop()
        self.proxy.stop()
