"""Start-up failures side by side with upstream v1.3.0's nsqd and nsqlookupd (their binaries,
``NSQ_UPSTREAM_BIN``, or what they answered as recorded in ``tests/recordings/exits/``): the
same exit status, the same FATAL line (timestamps, temporary paths and ports masked), nothing
printed after it. Operators' units and scripts check exactly these."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from helpers.recording import recording
from helpers.servers import VENV_BIN, free_port
from helpers.upstream import upstream_binary

RECORDED = recording("exits", "test_upstream_startup")
pytestmark = pytest.mark.timeout(60)
_STAMP = re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(\.\d+)?")

NSQD_CASES = [
    ["--node-id=1024"],
    ["--node-id=-1"],
    ["--max-deflate-level=0"],
    ["--max-deflate-level=10"],
    ["--e2e-processing-latency-percentile=2"],
    ["--e2e-processing-latency-percentile=0.5,50"],
    ["--e2e-processing-latency-percentile=1e8"],
    ["--e2e-processing-latency-percentile=x"],
    ["--data-path=/nonexistent/nsqpy-test"],
    ["--data-path=/nonexistent/nsqpy-test", "--node-id=2000"],  # the data path comes first
    ["--node-id=2000", "--tls-cert=/nonexistent/cert.pem"],     # then the ranges, then TLS
    ["--tls-cert=/nonexistent/cert.pem"],
    ["--tls-key=/nonexistent/key.pem"],
    ["--tls-required=true"],
    ["--tls-cert=/nonexistent/cert.pem", "--e2e-processing-latency-percentile=3"],
    ["--tcp-address=127.0.0.1:99999"],
    ["--http-address=127.0.0.1:70000"],
]
LOOKUPD_CASES = [
    ["--tcp-address=127.0.0.1:99999"],
    ["--http-address=bad"],
    ["--http-address=127.0.0.1:70000"],
]


def _run(binary: Path | str, args: list[str], cwd: Path, ports: list[int]) -> tuple[int, list[str]]:
    out = subprocess.run([str(binary), *args], capture_output=True, timeout=20, cwd=cwd)
    lines = []
    for line in out.stderr.decode().splitlines():
        line = _STAMP.sub("TS", line).replace(str(cwd), "DIR")
        for n, port in enumerate(ports):
            line = re.sub(rf"(?<!\d){port}(?!\d)", f"PORT{n}", line)
        lines.append(line)
    return out.returncode, lines


def _fatal_part(lines: list[str]) -> list[str]:
    """From the FATAL line (or Go's bare log.Fatal line) to the end: the version and ID lines
    before a listen failure name each build."""
    for i, line in enumerate(lines):
        if "FATAL" in line or line.startswith("TS Could not parse"):
            return lines[i:]
    return lines


@pytest.mark.parametrize("args", NSQD_CASES, ids=" ".join)
def test_nsqd_start_up_failures_as_upstream(tmp_path, args):
    def outcome(side: str, binary: Path | str) -> tuple[int, list[str]]:
        work = tmp_path / side
        work.mkdir()
        ports = [free_port() for _ in range(3)]
        base = [f"--data-path={work}", f"--tcp-address=127.0.0.1:{ports[0]}",
                f"--http-address=127.0.0.1:{ports[1]}", f"--https-address=127.0.0.1:{ports[2]}"]
        code, lines = _run(binary, base + args, work, ports)
        return code, _fatal_part(lines)

    upstream = RECORDED.answer(None, lambda: outcome("upstream", upstream_binary("nsqd")))
    ours = outcome("nsqpy", VENV_BIN / "nsqd")
    assert upstream[0] == 1 and ours == upstream


@pytest.mark.parametrize("args", LOOKUPD_CASES, ids=" ".join)
def test_nsqlookupd_start_up_failures_as_upstream(tmp_path, args):
    def outcome(binary: Path | str) -> tuple[int, list[str]]:
        ports = [free_port(), free_port()]
        base = [f"--tcp-address=127.0.0.1:{ports[0]}", f"--http-address=127.0.0.1:{ports[1]}"]
        code, lines = _run(binary, base + args, tmp_path, ports)
        return code, _fatal_part(lines)

    upstream = RECORDED.answer(None, lambda: outcome(upstream_binary("nsqlookupd")))
    ours = outcome(VENV_BIN / "nsqlookupd")
    assert upstream[0] == 1 and ours == upstream
