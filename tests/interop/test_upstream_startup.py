"""Start-up failures side by side with upstream v1.3.0's nsqd and nsqlookupd (their binaries,
``NSQ_UPSTREAM_BIN``): the same exit status, the same FATAL line (timestamps and temporary paths
masked), nothing printed after it. Operators' units and scripts check exactly these."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from helpers.servers import VENV_BIN, free_port
from helpers.upstream import requires, upstream_dir

UPSTREAM = upstream_dir()
pytestmark = [
    pytest.mark.timeout(60),
    requires("nsqd", "nsqlookupd"),
]
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


def _run(binary: Path, args: list[str], cwd: Path) -> tuple[int, list[str]]:
    out = subprocess.run([str(binary), *args], capture_output=True, timeout=20, cwd=cwd)
    lines = [_STAMP.sub("TS", line).replace(str(cwd), "DIR")
             for line in out.stderr.decode().splitlines()]
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
    results = []
    for side, binary in (("upstream", UPSTREAM / "nsqd"), ("nsqpy", VENV_BIN / "nsqd")):
        work = tmp_path / side
        work.mkdir()
        base = [f"--data-path={work}", f"--tcp-address=127.0.0.1:{free_port()}",
                f"--http-address=127.0.0.1:{free_port()}", f"--https-address=127.0.0.1:{free_port()}"]
        code, lines = _run(binary, base + args, work)
        results.append((code, _fatal_part(lines)))
    upstream, ours = results
    assert upstream[0] == 1 and ours == upstream


@pytest.mark.parametrize("args", LOOKUPD_CASES, ids=" ".join)
def test_nsqlookupd_start_up_failures_as_upstream(tmp_path, args):
    results = []
    for binary in (UPSTREAM / "nsqlookupd", VENV_BIN / "nsqlookupd"):
        base = [f"--tcp-address=127.0.0.1:{free_port()}", f"--http-address=127.0.0.1:{free_port()}"]
        code, lines = _run(binary, base + args, tmp_path)
        results.append((code, _fatal_part(lines)))
    upstream, ours = results
    assert upstream[0] == 1 and ours == upstream
