"""Certificates made with the openssl command the ways operators make them, for the TLS tests.

Each :class:`CertKind` is a server certificate (``server_cert``: the leaf, then any intermediate,
as a server presents them), its key, and the roots a client is given, plus whether Go's
``crypto/x509`` accepts it for ``127.0.0.1``. openssl's own defaults write certificates that
Python 3.13's ``ssl.create_default_context()`` refuses (``VERIFY_X509_STRICT``): a leaf signed with
``openssl x509 -req`` has no Authority Key Identifier, a CA made from a short config has a
basicConstraints that is not critical and no key identifiers.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = shutil.which("openssl")

# a config with no extensions of its own: only what a command's -addext / -extfile says is written
_BARE_CONFIG = "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = unused\n"
_LEAF_EXT = "subjectAltName=DNS:localhost,IP:127.0.0.1\n"


def openssl(*args: str, cwd: Path) -> None:
    """Run ``openssl args...`` in ``cwd``; CalledProcessError (with its output) if it fails."""
    subprocess.run([OPENSSL or "openssl", *args], cwd=cwd, check=True, capture_output=True,
                   timeout=60)


@dataclass(frozen=True)
class CertKind:
    name: str
    roots: Path  # the CA file a client is given
    server_cert: Path  # the chain the server presents, leaf first
    server_key: Path
    go_accepts: bool  # for 127.0.0.1 and localhost, as Go 1.19's crypto/x509 answers


def _ca(d: Path, name: str, *, config_defaults: bool, extensions: tuple[str, ...] = ()) -> None:
    """A self-signed RSA CA: with the system openssl.cnf's v3_ca extensions (``openssl req -x509``
    as typed from a tutorial), or with only ``extensions`` (a bare config)."""
    config: list[str] = []
    if not config_defaults:
        (d / "bare.cnf").write_text(_BARE_CONFIG)
        config = ["-config", "bare.cnf"]
    added = [arg for ext in extensions for arg in ("-addext", ext)]
    openssl("req", *config, "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}", *added, cwd=d)


def _signed(d: Path, name: str, ca: str, extensions: str) -> None:
    """``name``'s key and a certificate for it signed by ``ca`` with ``openssl x509 -req`` (which
    writes only the -extfile's extensions: no key identifiers)."""
    (d / f"{name}.ext").write_text(extensions)
    openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
            cwd=d)


def _chain(d: Path, name: str, *parts: str) -> Path:
    path = d / f"{name}.chain.pem"
    path.write_bytes(b"".join((d / f"{part}.pem").read_bytes() for part in parts))
    return path


def make_kinds(d: Path) -> dict[str, CertKind]:
    """The kinds, by name (every server certificate names localhost and 127.0.0.1):

    - ``openssl-defaults``: CA from ``openssl req -x509`` with the system config, leaf from
      ``openssl x509 -req`` (no Authority Key Identifier);
    - ``noncritical-ca``: CA with only a non-critical ``basicConstraints=CA:TRUE``, no key
      identifiers, no keyUsage;
    - ``intermediate-root``: root -> intermediate -> leaf, the client given the intermediate only
      (Go trusts any certificate of its pool as an anchor);
    - ``self-signed-leaf``: a self-signed leaf with no basicConstraints, given as its own root;
    - ``untrusted``: the ``openssl-defaults`` leaf, the client given another CA (refused);
    - ``intermediate-not-ca``: root -> intermediate without ``CA:TRUE`` -> leaf (refused).
    """
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "tutorial-ca", config_defaults=True)
    _signed(d, "leaf1", "tutorial-ca", _LEAF_EXT)
    _ca(d, "bare-ca", config_defaults=False, extensions=("basicConstraints=CA:TRUE",))
    _signed(d, "leaf2", "bare-ca", _LEAF_EXT)
    _signed(d, "inter", "bare-ca", "basicConstraints=CA:TRUE\n")
    _signed(d, "leaf3", "inter", _LEAF_EXT)
    _signed(d, "inter-not-ca", "bare-ca", "basicConstraints=CA:FALSE\n")
    _signed(d, "leaf4", "inter-not-ca", _LEAF_EXT)
    _ca(d, "self", config_defaults=False, extensions=(_LEAF_EXT.strip(),))
    _ca(d, "other-ca", config_defaults=True)
    kinds = [
        CertKind("openssl-defaults", d / "tutorial-ca.pem", d / "leaf1.pem", d / "leaf1.key", True),
        CertKind("noncritical-ca", d / "bare-ca.pem", d / "leaf2.pem", d / "leaf2.key", True),
        CertKind("intermediate-root", d / "inter.pem", _chain(d, "leaf3", "leaf3", "inter"),
                 d / "leaf3.key", True),
        CertKind("self-signed-leaf", d / "self.pem", d / "self.pem", d / "self.key", True),
        CertKind("untrusted", d / "other-ca.pem", d / "leaf1.pem", d / "leaf1.key", False),
        CertKind("intermediate-not-ca", d / "bare-ca.pem",
                 _chain(d, "leaf4", "leaf4", "inter-not-ca"), d / "leaf4.key", False),
    ]
    return {kind.name: kind for kind in kinds}
