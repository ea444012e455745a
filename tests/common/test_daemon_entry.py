"""The shared daemon shape (``nsqpy.common.daemon``) on nsqd, nsqlookupd and nsqadmin:
a start-up failure is upstream's ``FATAL: failed to instantiate <program> - ...`` with exit 1,
SIGINT and SIGTERM stop cleanly with exit 0. Real processes."""

from __future__ import annotations

import re
import signal
import socket
import subprocess

import pytest

from helpers.servers import VENV_BIN, ServerProcess, free_port

pytestmark = pytest.mark.timeout(90)

DAEMONS = ["nsqd", "nsqlookupd", "nsqadmin"]


def own_args(program: str, tmp_path) -> list[str]:
    if program == "nsqd":
        return [f"--tcp-address=127.0.0.1:{free_port()}", f"--data-path={tmp_path}"]
    if program == "nsqlookupd":
        return [f"--tcp-address=127.0.0.1:{free_port()}"]
    return [f"--lookupd-http-address=127.0.0.1:{free_port()}"]


@pytest.mark.parametrize("program", DAEMONS)
def test_start_failure_is_fatal_exit_1(program, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([str(VENV_BIN / program), f"--http-address=127.0.0.1:{port}",
                              *own_args(program, tmp_path)],
                             capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    addr = f"127.0.0.1:{port}"
    why = rf"listen \({addr}\) failed - listen tcp {addr}: bind: address already in use"
    # upstream's nsqlookupd passes its error to a format string without a verb for it
    line = (rf"failed to instantiate {program}%!\(EXTRA \*errors\.errorString={why}\)"
            if program == "nsqlookupd" else rf"failed to instantiate {program} - {why}")
    # the FATAL line is the last: upstream exits there
    assert re.search(rf"^\[{program}\] \S+ \S+ FATAL: {line}\n\Z", out.stderr, re.M), out.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("program", DAEMONS)
def test_stop_signals_exit_0(program, sig, tmp_path):
    port = free_port()
    proc = ServerProcess([str(VENV_BIN / program), f"--http-address=127.0.0.1:{port}",
                          *own_args(program, tmp_path)],
                         f"http://127.0.0.1:{port}/ping", tmp_path / f"{program}.log")
    assert proc.stop(sig) == 0
    assert f"HTTP: closing 127.0.0.1:{port}" in proc.log()
