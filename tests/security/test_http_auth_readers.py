"""Every reader of nsqd's HTTP API sends the secret (docs/security.md, "AUTH over HTTP"), and
fails at once, saying authorization is required, without it: ``nsq_tail --from``,
``nsq_to_file --from``, ``nsqpy.client.history`` and nsqadmin (``--nsqd-auth-secret``). The
Spark sources are tested in tests/spark/test_http_auth.py."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from helpers.daemons_cluster import NsqAdmin
from helpers.servers import VENV_BIN, unique_name
from nsqpy.client import http_mpublish
from nsqpy.client.history import HistoryError, fetch_segments, read_messages
from security.support import grant

pytestmark = pytest.mark.timeout(90)

READER = [{"topic": "^hr", "channels": [".*"], "permissions": ["subscribe"]}]
ADMIN = [{"topic": ".*", "channels": [".*"], "permissions": ["publish", "subscribe"]}]


@pytest.fixture
def node(secure_nsqd, auth_server):
    auth_server.answers["reader"] = grant(identity="reader", auths=READER)
    auth_server.answers["admin"] = grant(identity="admin", auths=ADMIN)
    return secure_nsqd(f"--auth-http-address={auth_server.address}", "--retention=1h")


def run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / tool), *args], capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_nsq_tail_from_sends_the_consumer_secret(node):
    topic = unique_name("hr_tail")
    bodies = [b"m-%02d" % i for i in range(20)]
    http_mpublish(node.http_address, topic, bodies)
    args = (f"--topic={topic}", f"--nsqd-http-address={node.http_address}", "--from=earliest",
            "--to=latest")
    out = run("nsq_tail", *args, "--consumer-opt=auth_secret,reader")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(b"\n")[:-1] == bodies
    out = run("nsq_tail", *args)
    assert out.returncode != 0 and not out.stdout
    assert b"HTTP 401 AUTH_REQUIRED - authorization required" in out.stderr, out.stderr
    out = run("nsq_tail", *args, "--consumer-opt=auth_secret,nobody")
    assert out.returncode != 0 and b"HTTP 403 AUTH_FAILED" in out.stderr, out.stderr


def test_nsq_to_file_from_sends_the_consumer_secret(node, tmp_path):
    topic = unique_name("hr_file")
    http_mpublish(node.http_address, topic, [b"a", b"b"])
    args = (f"--topic={topic}", f"--nsqd-http-address={node.http_address}", "--from=earliest",
            "--to=latest")
    refused = run("nsq_to_file", *args, f"--output-dir={tmp_path / 'no'}")
    assert refused.returncode != 0
    assert b"AUTH_REQUIRED - authorization required" in refused.stderr, refused.stderr
    done = run("nsq_to_file", *args, f"--output-dir={tmp_path / 'yes'}",
               "--consumer-opt=auth_secret,reader")
    assert done.returncode == 0, done.stderr
    [archive] = list((tmp_path / "yes").rglob("*.log"))
    assert archive.read_bytes() == b"a\nb\n"


def test_client_history_takes_the_secret(node):
    topic = unique_name("hr_client")
    http_mpublish(node.http_address, topic, [b"x", b"y"])
    assert fetch_segments(node.http_address, topic, secret="reader").messages == 2
    assert [m.body for m in read_messages(node.http_address, topic, secret="reader")] == [b"x", b"y"]
    with pytest.raises(HistoryError) as err:
        list(read_messages(node.http_address, topic))
    assert (err.value.status, err.value.code) == (401, "AUTH_REQUIRED")
    assert "authorization required" in str(err.value)
    with pytest.raises(HistoryError) as err:  # granted hr*, not this topic
        fetch_segments(node.http_address, "other", secret="reader")
    assert (err.value.status, err.value.code) == (403, "UNAUTHORIZED")


def test_nsqadmin_sends_its_secret_and_says_when_nsqd_refuses(secure_nsqd, auth_server, tmp_path):
    auth_server.answers["admin"] = grant(identity="admin", auths=ADMIN)
    auth_server.answers["reader"] = grant(identity="reader", auths=READER)
    node = secure_nsqd(f"--auth-http-address={auth_server.address}", "--http-auth-required")
    started = []
    try:
        for secret in ("admin", "reader", ""):
            flags = [f"--nsqd-auth-secret={secret}"] if secret else []
            started.append(NsqAdmin(tmp_path / f"admin-{secret or 'none'}",
                                    f"--nsqd-http-address={node.http_address}", *flags))
        granted, limited, anonymous = (admin_api(a, "/api/nodes") for a in started)
        assert [n["tcp_port"] for n in granted["nodes"]] == [node.tcp_port], granted
        for doc, why in ((anonymous, "got response 401 Unauthorized"),
                         (limited, "got response 403 Forbidden")):
            assert "authorization required" in doc["message"] or limited is doc, doc
            assert "not authorized" in doc["message"] or anonymous is doc, doc
            assert why in doc["message"] and "--nsqd-auth-secret" in doc["message"], doc
    finally:
        for admin in started:
            admin.stop()


def admin_api(admin: NsqAdmin, path: str) -> dict:
    try:
        with urllib.request.urlopen(f"http://{admin.http_address}{path}", timeout=20) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return json.loads(err.read())
