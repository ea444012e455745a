"""The secret a client sends to nsqd's HTTP API, and what nsqd's refusals mean
(docs/security.md, "AUTH over HTTP").

With an auth server, nsqd's routes that read or move messages (and, with
``--http-auth-required``, all of them) ask for ``Authorization: Bearer <secret>``: the secret
a V2 client sends with ``AUTH``. Every reader of those routes (the history reads, the Spark
source and sink, the tools, nsqadmin) builds its header here and words the refusal here.
"""

from __future__ import annotations

#: nsqd's answers to a request it refused for its secret, and what each means
_REFUSALS = {
    (401, "AUTH_REQUIRED"): "authorization required: nsqd has an auth server and this call "
                            "needs a secret (Authorization: Bearer), none was sent",
    (403, "AUTH_FAILED"): "authorization failed: nsqd's auth server refused the secret "
                          "(or could not be asked)",
    (403, "UNAUTHORIZED"): "not authorized: the secret holds no grant for this topic/channel",
}


def bearer(secret: str | bytes | None) -> dict[str, str]:
    """The header that carries ``secret`` (none without one)."""
    if not secret:
        return {}
    text = secret.decode("latin-1") if isinstance(secret, bytes) else secret
    return {"Authorization": f"Bearer {text}"}


def refusal(status: int, message: str) -> str | None:
    """What an answer means when nsqd refused the request for its secret, else None."""
    return _REFUSALS.get((status, message))


__all__ = ["bearer", "refusal"]
