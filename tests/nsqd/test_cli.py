"""nsqd as an operator runs it: flags, config file, version, errors, signals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from helpers.servers import Nsqd, free_port, unique_name
from helpers.wire import Wire

NSQD = str(Path(sys.executable).parent / "nsqd")
pytestmark = pytest.mark.timeout(60)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([NSQD, *args], capture_output=True, text=True, timeout=30)


def test_version():
    out = run("--version")
    assert out.returncode == 0
    assert out.stdout.startswith("nsqd v1.3.0 (built w/")


def test_unknown_flag_exits_2():
    out = run("-no-such-flag")
    assert out.returncode == 2 and "flag provided but not defined: -no-such-flag" in out.stderr


@pytest.mark.parametrize("flag", ["--enable-experiment=x"])
def test_unimplemented_flags_fail_naming_the_flag(flag, tmp_path):
    out = run(flag, f"--data-path={tmp_path}")
    assert out.returncode != 0
    assert flag.split("=")[0].lstrip("-") in out.stderr and "not implemented" in out.stderr


@pytest.mark.parametrize("args,needle", [
    (["--node-id=1024"], "node-id"),
    (["--max-deflate-level=10"], "max-deflate-level"),
    (["--e2e-processing-latency-percentile=1.5"], "percentile"),
    (["--msg-timeout=abc"], "msg-timeout"),
])
def test_invalid_values_fail(args, needle, tmp_path):
    out = run(*args, f"--data-path={tmp_path}")
    assert out.returncode != 0 and needle in out.stderr


def test_config_file_and_flag_precedence(tmp_path):
    cfg = tmp_path / "nsqd.toml"
    cfg.write_text('mem_queue_size = 123\nmax_rdy_count = 77\nmsg_timeout = "5s"\n'
                   'nsqlookupd_tcp_addresses = []\n')
    node = Nsqd(tmp_path / "d", f"--config={cfg}", "--max-rdy-count=88")
    try:
        def config(key):
            with urllib.request.urlopen(f"http://{node.http_address}/config/{key}") as r:
                return json.load(r)
        assert config("mem_queue_size") == 123
        assert config("max_rdy_count") == 88  # the command line wins over the file
        assert config("msg_timeout") == 5_000_000_000  # durations as Go nanoseconds
        w = Wire(node.tcp_address)
        assert w.identify(feature_negotiation=True)["max_rdy_count"] == 88
    finally:
        node.stop()


def test_go_flag_syntax_variants(tmp_path):
    tcp, http = free_port(), free_port()
    proc = subprocess.Popen([NSQD, "-tcp-address", f"127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}",
                             f"-data-path={tmp_path}", "-snappy=false", "-deflate"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        from helpers.servers import wait_http_ok
        wait_http_ok(f"http://127.0.0.1:{http}/ping", proc)
        resp = Wire(f"127.0.0.1:{tcp}").identify(feature_negotiation=True, snappy=True)
        assert resp["snappy"] is False
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0  # SIGINT is a graceful exit with status 0


def test_ephemeral_channel_and_topic_disappear(nsqd):
    topic = unique_name() + "#ephemeral"
    w = Wire(nsqd.tcp_address)
    w.sub(topic, "c#ephemeral")

    def topics():
        with urllib.request.urlopen(f"http://{nsqd.http_address}/stats?format=json") as r:
            return [t["topic_name"] for t in json.load(r)["topics"] or []]
    assert topic in topics()
    w.close()
    import time
    deadline = time.monotonic() + 30
    while topic in topics() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert topic not in topics()  # last client gone -> channel deleted -> ephemeral topic deleted
    meta = json.loads((nsqd.data_path / "nsqd.dat").read_text())
    assert all(t["name"] != topic for t in meta["topics"])
