"""The console's WSGI app: GET routes only (anything else is 405), the shipped static assets,
the binding rule, and error pages. Owns what a request may do; the pages own what they show.

Binding rule (docs/console.md): on a loopback address (127.0.0.0/8, ``::1``, ``localhost``)
the console needs no token, like any local tool; beyond loopback every request must carry the
home's serve token (``<home>/keys/serve.token``, the one ``rensei serve`` requires), as
``Authorization: Bearer TOKEN`` or the cookie a browser gets from opening ``/?token=TOKEN``
once (HttpOnly, SameSite=Strict; setting it writes nothing to the home); the redirect that
sets it goes to a path of this console only.

On loopback the ``Host`` header must name loopback and this port (``127.0.0.1:PORT`` or the
127.x address bound, ``localhost:PORT``, ``[::1]:PORT``): any other (a page rebound to
127.0.0.1 by its own DNS name) is 421 Misdirected Request. A request from another origin
(``Sec-Fetch-Site`` ``cross-site`` or ``same-site``, or an ``Origin``/``Referer`` naming
another origin) starts no background work: a page that would start some answers with a link
to start it from here instead.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import re
import time
from collections.abc import Callable, Iterable
from importlib.resources import files
from typing import Any, Final
from urllib.parse import parse_qs, quote, urlsplit

from ..errors import RenseiRoutingError
from .context import BadRequest, Console, NotFound, Query
from .html import esc, page
from .pages_chain import audit_page, decision_page
from .pages_enforce import enforce_page
from .pages_fleet import fleet_page
from .pages_home import overview_page, policies_page
from .pages_matrix import matrix_page
from .pages_shadow import divergences_page, shadow_page
from .pages_whatif import whatif_page

__all__ = ["COOKIE", "from_elsewhere", "host_allowed", "is_loopback", "make_app"]

log = logging.getLogger("rensei_routing.console")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
Page = Callable[[Console, Query], bytes]

#: The cookie holding the token beyond loopback.
COOKIE: Final = "rensei_ui_token"
_PAGES: Final[dict[str, Page]] = {
    "/": overview_page,
    "/shadow": shadow_page,
    "/divergences": divergences_page,
    "/whatif": whatif_page,
    "/policies": policies_page,
    "/matrix": matrix_page,
    "/enforce": enforce_page,
    "/audit": audit_page,
    "/fleet": fleet_page,
}
_DECISION: Final = re.compile(r"^/decision/([0-9]{1,18})$")
#: Pages whose request may start background work (a what-if comparison): never for a request
#: from another origin.
_STARTS_WORK: Final = frozenset({"/whatif"})
_STATIC: Final = {"/static/console.css": ("console.css", "text/css; charset=utf-8")}
_SECURITY: Final = [
    # Nothing is loaded from anywhere but this server; no script runs; no framing.
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]


def is_loopback(host: str) -> bool:
    """Whether a bind address is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_allowed(environ: dict[str, Any]) -> bool:
    """Whether the request's ``Host`` names this machine's loopback and the port it came in on
    (the port may be left out only on port 80, as browsers do)."""
    host = str(environ.get("HTTP_HOST", "")).lower()
    port = str(environ.get("SERVER_PORT", ""))
    name, sep, given = host.rpartition(":")
    if not sep or name.endswith(":") or (name.startswith("[") != name.endswith("]")):
        name, given = host, "80"  # no port (or a bare IPv6 address): the default one
    if given != port:
        return False
    if name == "localhost":
        return True
    try:  # an address, not a name: 127.0.0.1 (or the 127.x the console is bound to), [::1]
        address = ipaddress.ip_address(name[1:-1] if name.startswith("[") else name)
    except ValueError:
        return False
    return address.is_loopback and (address.version == 4 or name.startswith("["))


def from_elsewhere(environ: dict[str, Any]) -> bool:
    """Whether the request was made by a page of another origin (or one a browser will not
    name): ``Sec-Fetch-Site`` ``cross-site``/``same-site``, or an ``Origin`` or ``Referer``
    whose origin is not this console's (``http://`` and the request's ``Host``)."""
    site = str(environ.get("HTTP_SEC_FETCH_SITE", "")).lower()
    if site in ("cross-site", "same-site"):
        return True
    own = "http://" + str(environ.get("HTTP_HOST", "")).lower()
    origin = environ.get("HTTP_ORIGIN")
    if origin is not None and str(origin).lower().rstrip("/") != own:
        return True
    referer = environ.get("HTTP_REFERER")
    if referer is not None:
        try:
            parts = urlsplit(str(referer))
        except ValueError:
            return True
        if f"{parts.scheme}://{parts.netloc}".lower() != own:
            return True
    return False


def _same_origin(path: str) -> str:
    """``path`` as a redirect target on this console only: percent-encoded (no backslash, no
    control character survives) and never ``//host`` (a scheme-relative URL)."""
    return "/" + quote(path, safe="/-._~").lstrip("/")


def _query(environ: dict[str, Any]) -> Query:
    parsed = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    return {str(k): str(v[0]) for k, v in parsed.items() if v}


def _cookie(environ: dict[str, Any]) -> str:
    for part in environ.get("HTTP_COOKIE", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return str(value)
    return ""


def make_app(
    console: Console, *, token: str | None = None, loopback: bool | None = None
) -> WSGIApp:
    """The console at ``console``; with ``token``, every request must carry it. ``loopback``
    (default: when there is no token, which only a loopback bind may do): the ``Host`` header
    must name loopback (:func:`host_allowed`)."""
    on_loopback = token is None if loopback is None else loopback

    def authorised(environ: dict[str, Any], q: Query) -> bool:
        if token is None:
            return True
        header = str(environ.get("HTTP_AUTHORIZATION", ""))
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer":
            given = ""  # a bare token (or any other scheme) is not a bearer token
        for candidate in (given.strip(), _cookie(environ), q.get("token", "")):
            if candidate and hmac.compare_digest(candidate.encode(), token.encode()):
                return True
        return False

    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        began = time.perf_counter()
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "") or "/"
        status, headers, body = _respond(environ, method, path)
        start(status, [*headers, *_SECURITY, ("Content-Length", str(len(body)))])
        log.info(
            "%s %s %s %.0fms",
            method[:10],
            path[:200].encode("unicode_escape").decode("ascii"),
            status.split(" ", 1)[0],
            (time.perf_counter() - began) * 1000,
        )
        return [b"" if method == "HEAD" else body]

    def _respond(
        environ: dict[str, Any], method: str, path: str
    ) -> tuple[str, list[tuple[str, str]], bytes]:
        html = [("Content-Type", "text/html; charset=utf-8")]
        if on_loopback and not host_allowed(environ):
            port = esc(environ.get("SERVER_PORT", ""))
            body = page(
                "Misdirected request",
                "",
                '<p id="error">This console answers only to '
                f"<code>127.0.0.1:{port}</code>, <code>localhost:{port}</code> or "
                f"<code>[::1]:{port}</code>: a page under another name (a DNS name rebound to "
                "this machine) may not read it.</p>",
            )
            return "421 Misdirected Request", html, body
        if method not in ("GET", "HEAD"):
            body = page("Read-only", "", "<p>This console only reads: GET only.</p>")
            return "405 Method Not Allowed", [*html, ("Allow", "GET, HEAD")], body
        q = _query(environ)
        if not authorised(environ, q):
            body = page(
                "Token required",
                "",
                "<p>This console listens beyond loopback: open it once as "
                "<code>/?token=TOKEN</code> with the home's serve token.</p>",
            )
            return "401 Unauthorized", html, body
        if token is not None and q.get("token"):
            cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
            target = _same_origin(path)
            return "303 See Other", [("Location", target), ("Set-Cookie", cookie)], b""
        if path in _STATIC:
            name, kind = _STATIC[path]
            data = files(__package__).joinpath("static", name).read_bytes()
            return "200 OK", [("Content-Type", kind)], data
        if path in _STARTS_WORK and from_elsewhere(environ):
            here = esc(_same_origin(path) + ("?" + environ["QUERY_STRING"] if q else ""))
            body = page(
                "Not started",
                "",
                '<p id="elsewhere">This request came from another site, so the console started '
                "no work for it (a page elsewhere can make your browser request this console). "
                f'<a href="{here}">Open it from here</a> to start it.</p>',
            )
            return "200 OK", html, body
        try:
            handler = _PAGES.get(path)
            if handler is not None:
                return "200 OK", html, handler(console, q)
            m = _DECISION.match(path)
            if m:
                return "200 OK", html, decision_page(console, q, int(m.group(1)))
            raise NotFound(f"no page {path}")
        except BadRequest as e:
            return "400 Bad Request", html, page("Bad request", "", f'<p id="error">{esc(e)}</p>')
        except NotFound as e:
            return "404 Not Found", html, page("Not found", "", f'<p id="error">{esc(e)}</p>')
        except RenseiRoutingError as e:
            why = str(e)
            if not console.home.db_path.exists():
                why = (
                    f"the home's database {console.home.db_path} is missing: this console "
                    "only reads a home, it never creates a database"
                )
            body = page("Cannot read the home", "", f'<p id="error">{esc(why)}</p>')
            return "503 Service Unavailable", html, body

    return app
