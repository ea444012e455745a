"""One httprouter (v1.3.0, as upstream's three daemons use it) for nsqd, nsqlookupd and nsqadmin.

Every request goes through :class:`Router`, which decides as ``julienschmidt/httprouter`` does:

1. an exact match (static segments, ``:name`` matching one non-empty segment);
2. else, for a method that has routes (not ``CONNECT``, path not ``/``): a redirect to the path
   with its trailing slash added/removed, or to the case-insensitive match of the cleaned path
   (``//a/../Ping`` → ``/ping``): 301 for GET, 307 otherwise, query string kept;
3. else ``OPTIONS`` with an ``Allow`` list → 200;
4. else 405 with ``Allow`` when another method has the path;
5. else 404.

The router only decides; each daemon renders its own errors (their bodies differ slightly):
:func:`unrouted_answer` for daemons on :mod:`nsqpy.httpserver`, :func:`unrouted_response` for
those still on aiohttp (imported only when used).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

from ..httpserver.wire import Head, Response

if TYPE_CHECKING:
    from aiohttp import web

T = TypeVar("T")

#: what Go's ``url.URL.EscapedPath`` leaves alone in a path, besides letters, digits and ``-._~``
_PATH_SAFE = "$&+,/:;=@"


def clean_path(path: str) -> str:
    """httprouter's ``CleanPath``: Go's ``path.Clean``, rooted, keeping a trailing slash."""
    if not path:
        return "/"
    if path[0] != "/":
        path = "/" + path
    trailing = len(path) > 1 and path.endswith("/")
    parts: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if parts:
                parts.pop()
            continue
        parts.append(seg)
    out = "/" + "/".join(parts)
    if trailing and out != "/":
        out += "/"
    return out


def _html_escape(text: str) -> str:
    """Go's ``htmlEscape`` in ``net/http`` (numeric entities for quotes)."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&#34;").replace("'", "&#39;"))


def redirect_parts(method: str, path: str,
                   raw_query: str | None) -> tuple[int, dict[str, str], bytes]:
    """What httprouter does with ``http.Redirect(w, req, req.URL.String(), code)``: 301 for
    GET, 307 keeping the method; the request's query kept as sent, an empty one too
    (``raw_query`` is None when the target had no ``?``). Go escapes the path, then bytes above
    ASCII in ``Location`` (``%c3``); GET gets its little HTML body with the URL unescaped, GET
    and HEAD its Content-Type. ``raw_query`` holds the bytes as latin-1 characters."""
    from urllib.parse import quote  # redirects are rare: loaded with the first

    code = 301 if method == "GET" else 307
    url = quote(path.encode("utf-8", "surrogateescape"), safe=_PATH_SAFE)
    if raw_query is not None:
        url += "?" + raw_query
    location = url if url.isascii() else "".join(
        c if c < "\x80" else f"%{ord(c):x}" for c in url)
    headers = {"Location": location}
    body = b""
    if method in ("GET", "HEAD"):
        headers["Content-Type"] = "text/html; charset=utf-8"
    if method == "GET":
        text = "Moved Permanently" if code == 301 else "Temporary Redirect"
        body = f'<a href="{_html_escape(url)}">{text}</a>.\n\n'.encode("latin-1")
    return code, headers, body


def redirect(request: "web.Request", path: str) -> "web.Response":
    """:func:`redirect_parts` as an aiohttp response."""
    from aiohttp import web

    code, headers, body = redirect_parts(request.method, path,
                                         request.rel_url.raw_query_string or None)
    return web.Response(status=code, body=body, headers=headers)


@dataclass(frozen=True)
class Unrouted:
    """Why a request matched no route: ``redirect`` (to ``location``), ``options`` / ``405``
    (with ``allow``), or ``404``."""

    kind: str
    location: str = ""
    allow: str = ""


class Router(Generic[T]):
    """Routes by method and path to a target of the daemon's choosing (a handler, a tuple...)."""

    def __init__(self) -> None:
        self.static: dict[str, dict[str, T]] = {}  # method -> path -> target
        self.param: dict[str, list[tuple[list[str], T]]] = {}  # method -> [(segments, target)]
        self.methods: set[str] = set()
        self.global_allowed = ""  # the Allow list of the server-wide path "*"

    def add(self, method: str, path: str, target: T) -> None:
        self.methods.add(method)
        self.global_allowed = ", ".join(sorted((self.methods - {"OPTIONS"}) | {"OPTIONS"}))
        if "/:" in path:
            self.param.setdefault(method, []).append((path.split("/"), target))
        else:
            self.static.setdefault(method, {})[path] = target

    def match(self, method: str, path: str) -> tuple[T, dict[str, str]] | None:
        """The target and the ``:name`` values for an exact match."""
        target = self.static.get(method, {}).get(path)
        if target is not None:
            return target, {}
        routes = self.param.get(method)
        if routes:
            segs = path.split("/")
            for pattern, target in routes:
                params = _match_segments(pattern, segs)
                if params is not None:
                    return target, params
        return None

    def unrouted(self, method: str, path: str) -> Unrouted:
        """httprouter's decision for a request :meth:`match` did not route."""
        if method in self.methods and method != "CONNECT" and path != "/":
            alt = path[:-1] if len(path) > 1 and path.endswith("/") else path + "/"
            if self.match(method, alt) is not None or (
                    path.endswith("//") and self._empty_last_param(method, alt)):
                return Unrouted("redirect", location=alt)
            fixed = self._case_insensitive(method, clean_path(path))
            if fixed is not None:
                return Unrouted("redirect", location=fixed)
        allow = self.allowed(path, method)
        if method == "OPTIONS":
            if allow:
                return Unrouted("options", allow=allow)
        elif allow:
            return Unrouted("405", allow=allow)
        return Unrouted("404")

    def allowed(self, path: str, method: str) -> str:
        """The ``Allow`` header: the other methods that route ``path``, plus OPTIONS, sorted
        (for ``*``, every method the router has)."""
        if path == "*":
            return self.global_allowed
        found = [m for m in self.methods
                 if m not in (method, "OPTIONS") and self.match(m, path) is not None]
        return ", ".join(sorted(found + ["OPTIONS"])) if found else ""

    def _empty_last_param(self, method: str, path: str) -> bool:
        """httprouter reads ``/config//`` as ``:opt`` empty then a trailing slash, and so
        redirects it to ``/config/`` (which it then does not route)."""
        segs = path.split("/")
        return any(pattern[-1].startswith(":")
                   and _match_segments(pattern[:-1], segs[:-1]) is not None
                   and len(pattern) == len(segs)
                   for pattern, _ in self.param.get(method, []))

    def _case_insensitive(self, method: str, path: str) -> str | None:
        """``findCaseInsensitivePath`` fixing a trailing slash too: the route's own spelling
        of static segments, the request's of parameter values."""
        alt = path[:-1] if len(path) > 1 and path.endswith("/") else path + "/"
        for candidate in (path, alt):
            low = candidate.lower()
            for known in self.static.get(method, {}):
                if known.lower() == low:
                    return known
            segs = candidate.split("/")
            for pattern, _ in self.param.get(method, []):
                lowered = [s if s.startswith(":") else s.lower() for s in pattern]
                if _match_segments(lowered, [s.lower() for s in segs]) is not None:
                    return "/".join(s if p.startswith(":") else p
                                    for p, s in zip(pattern, segs))
        return None


def _match_segments(pattern: list[str], segs: list[str]) -> dict[str, str] | None:
    if len(pattern) != len(segs):
        return None
    params: dict[str, str] = {}
    for p, s in zip(pattern, segs):
        if p.startswith(":"):
            if not s:
                return None
            params[p[1:]] = s
        elif p != s:
            return None
    return params


def unrouted_answer(router: Router[Any], method: str, path: str, target: str, raw_query: str,
                    error: Callable[[int, str, tuple[tuple[str, str], ...]], Response]
                    ) -> Response:
    """The answer (on :mod:`nsqpy.httpserver`) to a request no route matched (``target`` as
    sent tells whether it had a ``?``); ``error(status, text, extra_headers)`` renders the
    daemon's ``{"message": ...}`` errors."""
    decision = router.unrouted(method, path)
    if decision.kind == "redirect":
        code, headers, body = redirect_parts(method, decision.location,
                                             raw_query if "?" in target else None)
        return Head(code, list(headers.items())), body
    if decision.kind == "options":
        return _allow_head(200, decision.allow), b""
    if decision.kind == "405":
        return error(405, "METHOD_NOT_ALLOWED", (("Allow", decision.allow),))
    return error(404, "NOT_FOUND", ())


_ALLOW_HEADS: dict[tuple[int, str], Head] = {}


def _allow_head(status: int, allow: str) -> Head:
    head = _ALLOW_HEADS.get((status, allow))
    if head is None:
        head = _ALLOW_HEADS[(status, allow)] = Head(status, [("Allow", allow)])
    return head


def unrouted_response(router: Router[Any], request: "web.Request",
                      error: Any) -> "web.Response":
    """The aiohttp response for a request no route matched; ``error(status, text)`` renders
    the daemon's ``{"message": ...}`` errors."""
    from aiohttp import web

    decision = router.unrouted(request.method, request.path)
    if decision.kind == "redirect":
        return redirect(request, decision.location)
    if decision.kind == "options":
        return web.Response(headers={"Allow": decision.allow})
    if decision.kind == "405":
        response: web.Response = error(405, "METHOD_NOT_ALLOWED")
        response.headers["Allow"] = decision.allow
        return response
    return error(404, "NOT_FOUND")
