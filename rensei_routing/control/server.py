"""The HTTP endpoints (WSGI, served by waitress on loopback by default):

- ``GET /api/daemon/ruleset-snapshot`` (control side): the org's current signed snapshot, to a
  caller holding the home's bearer token; compiled on the fly for an org never compiled; a
  policy or org-data write is noticed on the next request and recompiled in the background
  while the previous snapshot keeps serving; a failing validator is a 503 naming it.
- ``GET /api/daemon/routing/config`` (host side, no token): the status of a host's snapshot
  cache, 200 with ``snapshot`` null when none is held or no source is configured (``host run
  --listen`` serves it, and ``serve`` for its own home's cache).
- ``GET /.well-known/jwks.json`` (control side, no token: public keys only): the signing key as
  a JWKS document (``kty=OKP, crv=Ed25519``), under the key id snapshots carry.
- ``GET /metrics`` (both sides): the Prometheus text exposition; it takes the bearer token when
  the server has one (``serve``), as the snapshot route does, and none when it has none
  (``host run --listen``, whose status route takes none either).

Adapter: owns HTTP only; compiling, verifying and caching are the callables it is given. The
clock is injected (``now``). Access log lines never include headers, so never the token, and
escape what the client chose (:func:`loggable`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from ..core.snapshot.envelope import RulesetSnapshot, compiled_moment
from ..core.snapshot.freshness import DEFAULT_MAX_SKEW, FreshnessPolicy, age_of
from ..core.timestamps import format_age
from ..errors import RenseiRoutingError, SnapshotValidationError, StoreError

if TYPE_CHECKING:  # imported where used: importing this module does not start waitress
    from .listener import RunningServer

__all__ = [
    "RunningServer",
    "SnapshotService",
    "ahead_of_clock",
    "loggable",
    "make_app",
    "serve_in_thread",
]

log = logging.getLogger("rensei_routing.http")

SNAPSHOT_PATH: Final = "/api/daemon/ruleset-snapshot"
CONFIG_PATH: Final = "/api/daemon/routing/config"
JWKS_PATH: Final = "/.well-known/jwks.json"
METRICS_PATH: Final = "/metrics"
#: The route label of each path in ``rensei_http_requests_total`` (any other path: ``other``).
_ROUTES: Final = {
    SNAPSHOT_PATH: "snapshot",
    CONFIG_PATH: "config",
    JWKS_PATH: "jwks",
    METRICS_PATH: "metrics",
}
#: The exposition's content type (ops.exposition.CONTENT_TYPE; the adapter imports no service).
_METRICS_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True, slots=True)
class _Served:
    """A snapshot with its served bytes and ETag: a strong validator of those exact bytes.
    Not the bare content hash: a re-sealed snapshot keeps its content hash but carries a later
    signed ``compiledAt`` that a polling host must receive."""

    snapshot: RulesetSnapshot
    body: bytes
    etag: str

    @classmethod
    def of(cls, snapshot: RulesetSnapshot) -> _Served:
        body = snapshot.to_bytes()
        return cls(snapshot, body, '"' + hashlib.sha256(body).hexdigest() + '"')


def ahead_of_clock(
    snapshot: RulesetSnapshot, now: datetime, max_skew: timedelta = DEFAULT_MAX_SKEW
) -> str | None:
    """A warning when ``snapshot``'s ``compiledAt`` is later than ``now`` by more than
    ``max_skew`` (hosts whose clock agrees with this one refuse it as a future snapshot, and
    this side cannot re-seal it), else ``None``."""
    ahead = compiled_moment(snapshot) - now
    if ahead <= max_skew:
        return None
    return (
        f"snapshot {snapshot.ruleset_rev} was compiled at {snapshot.compiled_at}, "
        f"{format_age(ahead // timedelta(milliseconds=1))} ahead of this clock (allowed skew "
        f"{format_age(max_skew // timedelta(milliseconds=1))}): hosts with this clock refuse it; "
        "check the clocks "
        "(the compiling one and this one), then `rensei snapshot compile`"
    )


class SnapshotService:
    """The current snapshot of one org, kept in memory and refreshed off the request path.

    ``latest()`` returns the latest stored snapshot (or ``None``); ``compile_now()``
    publishes one (raising ``SnapshotValidationError`` when a validator fails);
    ``refresh(held)`` returns a newer snapshot when the data changed or ``held`` needs a
    fresh seal, else ``None``; ``needs_refresh(held)`` is the cheap check run per request.
    While a refresh runs, the previous snapshot keeps serving. With ``clock``, serving a
    snapshot compiled ahead of it (:func:`ahead_of_clock`) logs a warning: when it is adopted,
    and again at most every ``clock_check_s`` seconds while it is served (a clock set back
    while serving turns the held snapshot into a future one).

    ``newer(held)``, run on every request before answering, returns a stored snapshot newer
    than ``held`` (a later revision, or the same one re-sealed later) published by anyone (a
    CLI ``snapshot compile``, another process), else ``None``: what was already published is
    served at once, only what still has to be compiled waits for the background.
    """

    def __init__(
        self,
        *,
        latest: Callable[[], RulesetSnapshot | None],
        compile_now: Callable[[], RulesetSnapshot],
        needs_refresh: Callable[[RulesetSnapshot], bool],
        refresh: Callable[[RulesetSnapshot], RulesetSnapshot | None],
        newer: Callable[[RulesetSnapshot], RulesetSnapshot | None] = lambda held: None,
        clock: Callable[[], datetime] | None = None,
        clock_check_s: float = 60.0,
    ) -> None:
        self._clock = clock
        self._clock_check_s = clock_check_s
        self._next_clock_check = 0.0
        self._latest = latest
        self._newer = newer
        self._compile = compile_now
        self._needs_refresh = needs_refresh
        self._refresh_fn = refresh
        self._lock = threading.Lock()
        self._served: _Served | None = None
        self._worker: threading.Thread | None = None
        self.last_error: str | None = None
        #: Why the store could not be read, by who found out (the request path, the
        #: background refresh, a replica's watcher); cleared by that path's next success.
        self._store_errors: dict[str, str] = {}

    @property
    def store_error(self) -> str | None:
        """Why the store cannot be read now (``None``: it can). While set, the held snapshot
        keeps serving, flagged ``X-Ruleset-Store: unreachable`` (fail-static)."""
        errors = dict(self._store_errors)
        return next(iter(errors.values()), None)

    def store_failed(self, where: str, error: str | None) -> None:
        """Record that path ``where`` could not read the store (``error``), or could again
        (``None``)."""
        if error is None:
            self._store_errors.pop(where, None)
        else:
            self._store_errors[where] = error

    def offer(self, snap: RulesetSnapshot) -> None:
        """Serve ``snap`` from now on when it is newer than what is served (a replica's
        watcher hands over what another replica published)."""
        self._adopt(snap)

    def held(self) -> RulesetSnapshot | None:
        """The snapshot served now, ``None`` before the first."""
        with self._lock:
            return None if self._served is None else self._served.snapshot

    def _adopt(self, snap: RulesetSnapshot) -> _Served:
        with self._lock:
            held = self._served
            if held is None or (snap.revision, compiled_moment(snap)) > (
                held.snapshot.revision,
                compiled_moment(held.snapshot),
            ):
                held = self._served = _Served.of(snap)
                self._next_clock_check = 0.0  # check the new one at once
            return held

    def _check_clock(self, served: _Served) -> None:
        if self._clock is None:
            return
        moment = time.monotonic()
        with self._lock:
            if moment < self._next_clock_check:
                return
            self._next_clock_check = moment + self._clock_check_s
        if (warning := ahead_of_clock(served.snapshot, self._clock())) is not None:
            log.warning("%s", warning)

    def current(self) -> _Served:
        """What to serve now.

        Raises:
            SnapshotValidationError: nothing was ever compiled and compiling fails.
            RenseiRoutingError: the store cannot be read.
        """
        with self._lock:
            served = self._served
        if served is None:
            served = self._adopt(self._latest() or self._compile())
        else:
            try:
                published = self._newer(served.snapshot)
            except StoreError as e:  # fail-static: what is held keeps serving, flagged
                self.store_failed("request", str(e))
                published = None
            else:
                self.store_failed("request", None)
            if published is not None:
                served = self._adopt(published)
        self._check_clock(served)
        if self._needs_refresh(served.snapshot):
            self._refresh_in_background(served.snapshot)
        return served

    def _refresh_in_background(self, held: RulesetSnapshot) -> None:
        with self._lock:
            if self._worker is not None and self._worker.is_alive():
                return
            self._worker = threading.Thread(
                target=self._refresh, args=(held,), name="recompile", daemon=True
            )
            self._worker.start()

    def _refresh(self, held: RulesetSnapshot) -> None:
        try:
            snap = self._refresh_fn(held)
        except StoreError as e:
            self.last_error = str(e)
            self.store_failed("refresh", str(e))
            log.warning("background recompile failed: %s", e)
            return
        except RenseiRoutingError as e:
            self.last_error = str(e)
            log.warning("background recompile failed: %s", e)
            return
        self.last_error = None
        self.store_failed("refresh", None)
        if snap is not None:
            self._adopt(snap)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait for a background refresh to finish (tests, shutdown)."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)


def _escape(char: str) -> str:
    if char == "\\":
        return "\\\\"
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def loggable(text: str) -> str:
    """``text`` (a request's method or path, chosen by an unauthenticated client) safe for one
    log line: every non-printable character (``str.isprintable``: control characters, escape
    sequences, CR and LF, C1 controls) and the backslash written as a ``\\xNN``-style escape,
    so it cannot colour a terminal, move its cursor or forge another line."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else _escape(c) for c in text)


def _json(start: StartResponse, status: str, value: Any) -> list[bytes]:
    body = json.dumps(value, indent=2).encode("utf-8")
    start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def make_app(
    *,
    now: Callable[[], datetime],
    token: str | None = None,
    service: SnapshotService | None = None,
    freshness: FreshnessPolicy | None = None,
    host_status: Callable[[], dict[str, Any]] | None = None,
    jwks: dict[str, Any] | None = None,
    metrics: Callable[[Mapping[tuple[str, str], int]], str] | None = None,
) -> WSGIApp:
    """A WSGI app serving the snapshot endpoint (when ``service`` is given; it requires
    ``token``), the host status endpoint (when ``host_status`` is given), the JWKS
    document (when ``jwks`` is given: public keys only, so no token) and ``/metrics`` (when
    ``metrics`` is given: called with this app's answers so far by (route, code); it requires
    ``token`` when there is one)."""
    policy = freshness or FreshnessPolicy()
    answered: Counter[tuple[str, str]] = Counter()
    answered_lock = threading.Lock()

    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        status, body = _route(environ, path, method, start)
        code = status.split(" ", 1)[0]
        with answered_lock:
            answered[(_ROUTES.get(path, "other"), code)] += 1
        log.info("%s %s %s", loggable(method), loggable(path), code)
        return body

    def _authorized(environ: dict[str, Any]) -> bool:
        given = environ.get("HTTP_AUTHORIZATION", "")
        expected = f"Bearer {token}" if token else None
        return expected is not None and hmac.compare_digest(given.encode(), expected.encode())

    def _unauthorized(start: StartResponse) -> tuple[str, Iterable[bytes]]:
        start(
            "401 Unauthorized",
            [("WWW-Authenticate", 'Bearer realm="rensei"'), ("Content-Length", "0")],
        )
        return "401", [b""]

    def _metrics(environ: dict[str, Any], start: StartResponse) -> tuple[str, Iterable[bytes]]:
        assert metrics is not None
        if token and not _authorized(environ):
            return _unauthorized(start)
        with answered_lock:
            so_far = dict(answered)
        try:
            body = metrics(so_far).encode("utf-8")
        except RenseiRoutingError as e:
            return "503", _json(start, "503 Service Unavailable", {"error": str(e)})
        start(
            "200 OK",
            [
                ("Content-Type", _METRICS_TYPE),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
            ],
        )
        return "200", [body]

    def _route(
        environ: dict[str, Any], path: str, method: str, start: StartResponse
    ) -> tuple[str, Iterable[bytes]]:
        if method not in ("GET", "HEAD"):
            return "405", _json(start, "405 Method Not Allowed", {"error": "GET only"})
        if path == SNAPSHOT_PATH and service is not None:
            return _snapshot(environ, start)
        if path == CONFIG_PATH and host_status is not None:
            return "200", _json(start, "200 OK", host_status())
        if path == JWKS_PATH and jwks is not None:
            return "200", _json(start, "200 OK", jwks)
        if path == METRICS_PATH and metrics is not None:
            return _metrics(environ, start)
        return "404", _json(start, "404 Not Found", {"error": f"no route {path}"})

    def _snapshot(environ: dict[str, Any], start: StartResponse) -> tuple[str, Iterable[bytes]]:
        assert service is not None
        if not _authorized(environ):
            return _unauthorized(start)
        try:
            served = service.current()
        except SnapshotValidationError as e:
            names = [r.name for r in e.failed]
            return "503", _json(
                start,
                "503 Service Unavailable",
                {"error": "validation failed", "validators": names, "detail": str(e)},
            )
        except RenseiRoutingError as e:
            return "503", _json(start, "503 Service Unavailable", {"error": str(e)})
        snap = served.snapshot
        age = age_of(compiled_moment(snap), now())
        etag = served.etag
        headers = [
            ("X-Ruleset-Rev", snap.ruleset_rev),
            ("Age", str(int(age.total_seconds()))),
            ("X-Ruleset-Degraded", "true" if age > policy.degraded_after else "false"),
            ("X-Ruleset-Compiled-At", snap.compiled_at),
            ("ETag", etag),
            ("Cache-Control", "no-cache"),
            ("X-Ruleset-Store", "ok" if service.store_error is None else "unreachable"),
        ]
        if etag in [t.strip() for t in environ.get("HTTP_IF_NONE_MATCH", "").split(",")]:
            start("304 Not Modified", headers)
            return "304", [b""]
        start(
            "200 OK",
            [
                *headers,
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(served.body))),
            ],
        )
        return "200", [served.body]

    return app


def serve_in_thread(
    app: WSGIApp, *, host: str, port: int, threads: int = 2, drain_s: float = 0.0
) -> RunningServer:
    """Start serving ``app`` on ``host:port`` (0 = any free port) in a background thread
    (:class:`~rensei_routing.control.listener.RunningServer`)."""
    from .listener import serve_in_thread as start

    return start(app, host=host, port=port, threads=threads, drain_s=drain_s)


def __getattr__(name: str) -> Any:
    if name == "RunningServer":  # kept importable from here, loaded on first use
        from .listener import RunningServer

        return RunningServer
    raise AttributeError(name)
