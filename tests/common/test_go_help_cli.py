"""``--help``, ``--version`` and flag errors of every program, as upstream's Go binaries print them.

Runs the real console scripts. The outputs are compared byte for byte with upstream v1.3.0's:
its binaries' live (``NSQ_UPSTREAM_BIN``) or as recorded (``tests/recordings/help/``); the other
tests pin the Go shapes. Also: durations in Go syntax on the command line and in a
``--config`` file, read back from a running nsqd.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from helpers.recording import recording
from helpers.servers import VENV_BIN, Nsqd, Nsqlookupd
from helpers.upstream import upstream_binary

pytestmark = pytest.mark.timeout(120)

DAEMONS = ["nsqd", "nsqlookupd", "nsqadmin"]
TOOLS = ["nsq_stat", "nsq_tail", "nsq_to_file", "nsq_to_http", "nsq_to_nsq", "to_nsq"]
RECORDED = recording("help", "test_go_help_cli")


def run(binary: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


def extension_flags(program: str) -> set[str]:
    """The nsqpy additions (``Flag.extension``) a program lists in its --help."""
    modules = {"nsqd": "nsqpy.nsqd.main", "nsqlookupd": "nsqpy.lookupd.options",
               "nsqadmin": "nsqpy.admin.options"}
    module = importlib.import_module(modules.get(program, f"nsqpy.tools.{program}"))
    if not hasattr(module, "build_flagset"):
        return set()
    flagset = module.build_flagset()
    return {f.name for f in flagset.flags if f.extension}


def normalised(out: str, program: str) -> str:
    """The utilities say ``Usage of <os.Args[0]>:``; both sides are run by full path. nsqpy's
    own flags (opt-in additions) are taken out, so every upstream flag must read identically."""
    out = re.sub(rf"(?m)^Usage of \S*/{program}:$", f"Usage of {program}:", out)
    for name in extension_flags(program):
        out, n = re.subn(rf"(?m)^  -{re.escape(name)}( \S+)?\n(    \t.*\n)+", "", out)
        assert n <= 1, name
    return out


@pytest.mark.parametrize("program", DAEMONS + TOOLS)
def test_help_has_go_shape(program):
    out = run(VENV_BIN / program, "--help")
    assert out.returncode == 0 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0].startswith("Usage of ") and lines[0].endswith(":")
    names = [m.group(1) for m in map(re.compile(r"  -([\w.-]+)").match, lines) if m]
    assert names and names == sorted(names)
    for line in lines[1:]:
        assert re.fullmatch(r"  -[\w.-]+( [\w-]+)?|    \t.*|  -\w\t.*", line), line
    text = out.stderr
    for python_ism in (" str\n", " list\n", "(default '", "(default False)", "(default True)",
                       "(default [])", "(default 60.0)", "(default 2.0)"):
        assert python_ism not in text


def test_nsqd_help_lines():
    text = run(VENV_BIN / "nsqd", "-h").stderr
    for expected in [
        "  -max-req-timeout duration\n    \tmaximum requeuing timeout for a message (default 1h0m0s)",
        "  -msg-timeout duration\n    \tdefault duration to wait before auto-requeing a message (default 1m0s)",
        '  -statsd-prefix string\n    \tprefix used for keys sent to statsd (%s for host replacement) (default "nsq.%s")',
        "  -sync-timeout duration\n    \tduration of time per diskqueue fsync (default 2s)",
        "  -deflate\n    \tenable deflate feature negotiation (client compression) (default true)",
        "  -lookupd-tcp-address value\n    \tlookupd TCP address (may be given multiple times)\n",
        "  -tls-required\n    \trequire TLS for client connections (true, false, tcp-https)\n",
        "  -log-level value\n    \tset log verbosity: debug, info, warn, error, or fatal (default INFO)",
        "  -worker-id\n    \t[deprecated] use --node-id\n",
    ]:
        assert expected in text


@pytest.mark.parametrize("program", DAEMONS + TOOLS)
def test_unknown_flag_like_go(program):
    out = run(VENV_BIN / program, "--no-such-flag")
    assert out.returncode == 2
    first, second = out.stderr.splitlines()[:2]
    assert first == "flag provided but not defined: -no-such-flag"
    assert second.startswith("Usage of ")


@pytest.mark.parametrize("program", ["nsq_stat", "nsq_tail", "nsq_to_file", "nsq_to_http",
                                     "nsq_to_nsq"])
def test_tool_version_line(program):
    out = run(VENV_BIN / program, "--version")
    assert (out.returncode, out.stdout) == (0, f"{program} v1.3.0\n")


@pytest.mark.parametrize("program", DAEMONS)
def test_daemon_version_line(program):
    out = run(VENV_BIN / program, "--version")
    assert out.returncode == 0
    assert re.fullmatch(rf"{program} v1\.3\.0 \(built w/[^)]+\)\n", out.stdout)


def machine_masked(text: str) -> str:
    """A help text less what depends on the machine: the defaults taken from its host name
    (``--broadcast-address``, and ``--node-id``, a hash of it)."""
    text = text.replace(f'(default "{socket.gethostname()}")', '(default "<hostname>")')
    return re.sub(r"(hash of hostname\) \(default )\d+\)", r"\1<hash>)", text)


def upstream_run(program: str, *args: str, tmp: Path | None = None) -> tuple[int, str, str]:
    """Upstream's (status, stdout, stderr) for these arguments, live or recorded: the program's
    path in ``Usage of``, the machine's defaults and the test's ``tmp`` directory (as ``<tmp>``)
    masked."""
    def produce() -> tuple[int, str, str]:
        out = run(Path(upstream_binary(program)), *args)
        stderr = re.sub(rf"(?m)^Usage of \S*/{program}:$", f"Usage of {program}:", out.stderr)
        stderr = machine_masked(stderr.replace(str(tmp), "<tmp>") if tmp else stderr)
        return out.returncode, out.stdout, stderr
    return RECORDED.answer(None, produce)


@pytest.mark.parametrize("program", DAEMONS + TOOLS)
@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--no-such-flag"]])
def test_same_bytes_as_upstream(program, args):
    ours, (code, stdout, stderr) = run(VENV_BIN / program, *args), upstream_run(program, *args)
    assert ours.returncode == code
    assert ours.stdout == stdout
    assert machine_masked(normalised(ours.stderr, program)) == normalised(stderr, program)


@pytest.mark.parametrize("args", [["--msg-timeout=abc"], ["--max-rdy-count=x"],
                                  ["--deflate=maybe"], ["--max-rdy-count=99999999999999999999"],
                                  ["--log-level=loud"], ["--tls-min-version=ssl2"],
                                  ["--tls-required=maybe"], ["--msg-timeout"]])
def test_nsqd_flag_errors_same_bytes_as_upstream(args, tmp_path):
    ours = run(VENV_BIN / "nsqd", *args, f"--data-path={tmp_path}")
    code, _, stderr = upstream_run("nsqd", *args, f"--data-path={tmp_path}", tmp=tmp_path)
    our_stderr = machine_masked(normalised(ours.stderr, "nsqd").replace(str(tmp_path), "<tmp>"))
    assert (ours.returncode, our_stderr) == (code, stderr)


@pytest.mark.parametrize("program", DAEMONS)
def test_only_marked_extensions_beyond_upstream(program):
    """Every flag upstream v1.3.0 lacks is a marked nsqpy addition, and each is listed."""
    ours, theirs = run(VENV_BIN / program, "--help").stderr, upstream_run(program, "--help")[2]
    flag = re.compile(r"(?m)^  -([\w.-]+)")
    extra = set(flag.findall(ours)) - set(flag.findall(theirs))
    assert extra == extension_flags(program)


@pytest.mark.parametrize("program", TOOLS[:-1])
def test_tool_version_same_as_upstream(program):
    assert run(VENV_BIN / program, "--version").stdout == upstream_run(program, "--version")[1]


def config(node: Nsqd, key: str):
    with urllib.request.urlopen(f"http://{node.http_address}/config/{key}", timeout=5) as resp:
        return json.loads(resp.read())


def test_go_durations_in_flags_and_config(tmp_path):
    cfg = tmp_path / "nsqd.toml"
    cfg.write_text('max_req_timeout = "1h30m"\nsync_timeout = 500\n'
                   'http_client_connect_timeout = "1.5s"\n')
    node = Nsqd(tmp_path / "d", f"--config={cfg}", "--msg-timeout=1m30s",
                "--output-buffer-timeout", "100ms", "--node-id=0x10")
    try:
        assert config(node, "msg_timeout") == 90 * 10**9
        assert config(node, "max_req_timeout") == 5400 * 10**9
        assert config(node, "sync_timeout") == 500 * 10**6  # an integer means ms, as upstream
        assert config(node, "http_client_connect_timeout") == 1_500_000_000
        assert config(node, "output_buffer_timeout") == 100 * 10**6
        assert config(node, "id") == 16
    finally:
        node.stop()


def test_lookupd_takes_go_durations(tmp_path):
    node = Nsqlookupd(tmp_path / "l", "--inactive-producer-timeout=1m30s",
                      "--tombstone-lifetime=1500ms")
    node.stop()
    out = run(VENV_BIN / "nsqlookupd", "--tombstone-lifetime=45")
    assert out.returncode == 2
    assert out.stderr.startswith('invalid value "45" for flag -tombstone-lifetime: parse error\n')
