"""Go's standard library as the oracle of the differential tests: the program in tests/gooracle
(standard library only) built with the ``go`` on this machine and spoken to in batches.

nsqpy imitates Go's ``regexp`` (``common/goregexp.py``), ``encoding/json``
(``protocol/gojson.py``) and what ``crypto/x509`` accepts (``common/gotls.py``); the tests
generate thousands of inputs and ask Go itself what it answers. The build never reaches a network (``GOPROXY=off``, module mode
with no dependency) and keeps its cache in the test's temporary directory; ``make test``
installs Debian's golang-go (Go 1.19, the Go upstream v1.3.0 was built with) when it is missing.
One request a line, a batch ended by an empty line, the answers of the batch read back in one
go: a thousand cases cost one round trip, not a thousand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import pytest
from hypothesis import HealthCheck, Phase, seed, settings

SOURCE = Path(__file__).resolve().parent.parent / "gooracle"


@dataclass(frozen=True)
class Reply:
    """Go's answer to one request: ``value`` (the mode's answer), or ``error`` (Go's error text)."""

    value: str | None
    error: str | None

    @property
    def data(self) -> bytes | None:
        """The value as the bytes its hex stands for (the JSON modes); None when Go erred."""
        return None if self.value is None else bytes.fromhex(self.value)


class GoOracle:
    """The running oracle program; :meth:`ask` sends a batch and returns Go's replies in order."""

    def __init__(self, binary: Path) -> None:
        self._proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE)

    def ask(self, requests: Iterable[tuple[str, Sequence[bytes | str]]]) -> list[Reply]:
        """Each request is ``(mode, args)``; a str argument is sent as its UTF-8 bytes."""
        lines = []
        for mode, args in requests:
            fields = (a.encode() if isinstance(a, str) else a for a in args)
            lines.append(" ".join([mode, *(f.hex() for f in fields)]))
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("".join(f"{line}\n" for line in lines).encode() + b"\n")
        self._proc.stdin.flush()
        replies = []
        for _ in lines:
            line = self._proc.stdout.readline().decode().rstrip("\n")
            if not line:
                raise RuntimeError(f"the Go oracle ended (exit status {self._proc.poll()})")
            if line.startswith("ERR "):
                replies.append(Reply(None, bytes.fromhex(line[4:]).decode("utf-8", "replace")))
            else:
                replies.append(Reply(line, None))
        return replies

    def one(self, mode: str, *args: bytes | str) -> Reply:
        return self.ask([(mode, args)])[0]

    def close(self) -> None:
        """End the program (its stdin closed) and wait for it, killing it by PID if it lingers."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)


def build(workdir: Path) -> Path:
    """Build the oracle into ``workdir`` (the Go build cache too); skip the test without ``go``."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed (make test installs Debian's golang-go): "
                    "the Go oracle cannot be built")
    binary = workdir / "gooracle"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOSUMDB": "off",
           "GO111MODULE": "on", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0",
           "GOCACHE": str(workdir / "cache"), "GOPATH": str(workdir / "gopath")}
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=SOURCE, env=env, check=True,
                   timeout=300)
    return binary


#: the differential tests draw the same cases on every run (``NSQPY_ORACLE_SEED=<n>`` draws others)
SEED = int(os.environ.get("NSQPY_ORACLE_SEED", "45"))


def differential(batches: int = 50) -> Callable[[Callable], Callable]:
    """The hypothesis settings of a differential test whose every example is one batch of cases
    for the oracle: ``batches`` of them, seeded (:data:`SEED`), no example database written, and
    no shrinking: a failing batch names its differing cases itself, while shrinking it would ask
    the oracle again for every smaller batch tried (minutes, where the run takes seconds)."""
    def decorate(test: Callable) -> Callable:
        configured = settings(max_examples=batches, deadline=None, database=None,
                              phases=(Phase.explicit, Phase.reuse, Phase.generate),
                              suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large])(test)
        return seed(SEED)(configured)
    return decorate
