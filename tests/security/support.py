"""Helpers for the security tests: certificates made with the openssl CLI (helpers/certs.py), an
nsqd with TLS flags (health-checked without plain HTTP, which --tls-required=true refuses), and a
real aiohttp auth server running in a thread of the test process."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson
from aiohttp import web

from helpers.certs import OPENSSL, openssl
from helpers.servers import VENV_BIN, ServerProcess, free_port

# --- certificates --------------------------------------------------------------------------------

@dataclass
class Certs:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path  # signed by the CA, CN=client-one
    client_key: Path
    rogue_cert: Path  # self-signed, CN=rogue (not trusted by the CA file)
    rogue_key: Path

    def client_context(self, with_cert: str | None = None) -> ssl.SSLContext:
        """A client context that trusts our CA (and checks 127.0.0.1 against the SAN)."""
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if with_cert == "client":
            ctx.load_cert_chain(self.client_cert, self.client_key)
        elif with_cert == "rogue":
            ctx.load_cert_chain(self.rogue_cert, self.rogue_key)
        return ctx


def make_certs(d: Path) -> Certs:
    """A CA, a server certificate for localhost/127.0.0.1, a client one, and a rogue one (EC P-256)."""
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=nsqpy test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    for name, cn, ext in (
        ("server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                "extendedKeyUsage=serverAuth\n"),
        ("client", "client-one", "extendedKeyUsage=clientAuth\n"),
    ):
        (d / f"{name}.ext").write_text(ext + "basicConstraints=CA:FALSE\n"
                                       "keyUsage=critical,digitalSignature\n"
                                       "subjectKeyIdentifier=hash\n"
                                       "authorityKeyIdentifier=keyid,issuer\n")
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}",
                cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
                cwd=d)
    openssl("req", "-x509", *ec, "-keyout", "rogue.key", "-out", "rogue.pem", "-days", "2",
            "-subj", "/CN=rogue", "-addext", "extendedKeyUsage=clientAuth", cwd=d)
    return Certs(d, d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem",
                 d / "client.key", d / "rogue.pem", d / "rogue.key")


# --- nsqd with TLS ---------------------------------------------------------------------------------

def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port} did not open in {timeout}s")


class SecureNsqd(ServerProcess):
    """nsqd on free loopback ports (TCP, HTTP, HTTPS); ready once its TCP and HTTP(S) ports accept."""

    def __init__(self, data_path: Path, *extra: str, certs: Certs | None = None,
                 binary: str | None = None) -> None:
        """``binary``: another nsqd to run with the same flags (upstream's, side by side)."""
        self.tcp_port, self.http_port, self.https_port = free_port(), free_port(), free_port()
        self.data_path = data_path
        data_path.mkdir(parents=True, exist_ok=True)
        argv = [binary or str(VENV_BIN / "nsqd"), f"--tcp-address=127.0.0.1:{self.tcp_port}",
                f"--http-address=127.0.0.1:{self.http_port}",
                f"--https-address=127.0.0.1:{self.https_port}", f"--data-path={data_path}",
                "--broadcast-address=127.0.0.1"]
        if certs is not None:
            argv += [f"--tls-cert={certs.server_cert}", f"--tls-key={certs.server_key}"]
        argv += list(extra)
        self.argv = argv
        self.health_url = f"http://127.0.0.1:{self.http_port}/ping"
        self.log_path = data_path / "nsqd.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            _wait_port(self.tcp_port, self.proc)
            _wait_port(self.http_port, self.proc)
            if certs is not None:
                _wait_port(self.https_port, self.proc)
        except Exception:
            self.stop()
            raise AssertionError(f"nsqd failed to start: {self.log()}")

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def https_address(self) -> str:
        return f"127.0.0.1:{self.https_port}"


# --- auth server -----------------------------------------------------------------------------------

Answer = Callable[[dict[str, str]], tuple[int, Any]]


class AuthServer:
    """An nsqd auth server (aiohttp, own thread and loop) whose answers a test scripts.

    ``answers[secret]`` is ``(status, json_document)`` or a callable taking the request's
    values; unknown secrets get 403. Every request is recorded in ``requests``.
    """

    def __init__(self, path: str = "/auth") -> None:
        self.port = free_port()
        self.path = path
        self.answers: dict[str, Any] = {}
        self.requests: list[dict[str, Any]] = []
        self.delay = 0.0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._call(self._start())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _call(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.method == "POST":
            try:
                doc = orjson.loads(body)
                values = {k: v[0] for k, v in doc.items()}
            except (orjson.JSONDecodeError, AttributeError, IndexError, TypeError):
                values = {}
        else:
            values = dict(request.query)
        self.requests.append({"method": request.method, "path": request.path, "values": values,
                              "scheme": request.scheme,
                              "raw_query": request.rel_url.raw_query_string, "body": body,
                              "headers": dict(request.headers), "t": time.monotonic()})
        if self.delay:
            await asyncio.sleep(self.delay)
        answer = self.answers.get(values.get("secret", ""))
        if callable(answer):
            answer = answer(values)
        if answer is None:
            return web.Response(status=403, text='{"message":"FORBIDDEN"}')
        status, doc = answer
        data = doc if isinstance(doc, (bytes, str)) else orjson.dumps(doc)
        return web.Response(status=status, body=data if isinstance(data, bytes) else data.encode(),
                            content_type="application/json")

    def serve_https(self, ctx: ssl.SSLContext) -> int:
        """Also answer on HTTPS (same handler); returns the port."""
        port = free_port()

        async def start() -> None:
            assert self._runner is not None
            await web.TCPSite(self._runner, "127.0.0.1", port, ssl_context=ctx,
                              reuse_address=True).start()

        self._call(start())
        return port

    def down(self) -> None:
        """Stop listening (the auth server is down); :meth:`close` still cleans up."""
        if self._runner is not None:
            self._call(self._runner.cleanup())
            self._runner = None

    def close(self) -> None:
        self.down()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


def grant(ttl: int = 3600, identity: str = "user", identity_url: str = "",
          auths: list[dict] | None = None) -> tuple[int, dict]:
    return 200, {"ttl": ttl, "identity": identity, "identity_url": identity_url,
                 "authorizations": auths if auths is not None else []}


# --- raw V2 over TLS ------------------------------------------------------------------------------

def tls_wire(address: str, ctx: ssl.SSLContext, **identify: Any):
    """A :class:`helpers.wire.Wire` upgraded to TLS the way clients do it; returns (wire, answer)."""
    from helpers.wire import Wire
    from nsqpy.protocol.frames import FRAME_TYPE_RESPONSE

    wire = Wire(address)
    answer = wire.identify(feature_negotiation=True, tls_v1=True, **identify)
    assert answer["tls_v1"] is True, answer
    assert not wire.pending, wire.pending  # nothing may follow the answer before the handshake
    wire.sock = ctx.wrap_socket(wire.sock, server_hostname="127.0.0.1")
    frame = wire.read_frame()
    assert (frame.frame_type, frame.data) == (FRAME_TYPE_RESPONSE, b"OK"), frame
    return wire, answer
