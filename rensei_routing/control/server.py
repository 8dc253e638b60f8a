"""The HTTP endpoints (WSGI, served by waitress on loopback by default):

- ``GET /api/daemon/ruleset-snapshot`` (control side): the org's current signed snapshot, to a
  caller holding the home's bearer token; compiled on the fly for an org never compiled; a
  policy or org-data write is noticed on the next request and recompiled in the background
  while the previous snapshot keeps serving; a failing validator is a 503 naming it.
- ``GET /api/daemon/routing/config`` (host side): the status of the host's snapshot cache.
- ``GET /.well-known/jwks.json`` (control side, no token: public keys only): the signing key as
  a JWKS document (``kty=OKP, crv=Ed25519``), under the key id snapshots carry.

Adapter: owns HTTP only; compiling, verifying and caching are the callables it is given. The
clock is injected (``now``). Access log lines never include headers, so never the token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, cast

from ..core.snapshot.envelope import RulesetSnapshot, compiled_moment
from ..core.snapshot.freshness import FreshnessPolicy, age_of
from ..errors import RenseiRoutingError, SnapshotValidationError

__all__ = ["RunningServer", "SnapshotService", "make_app", "serve_in_thread"]

log = logging.getLogger("rensei_routing.http")

SNAPSHOT_PATH: Final = "/api/daemon/ruleset-snapshot"
CONFIG_PATH: Final = "/api/daemon/routing/config"
JWKS_PATH: Final = "/.well-known/jwks.json"

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


class SnapshotService:
    """The current snapshot of one org, kept in memory and refreshed off the request path.

    ``latest()`` returns the latest stored snapshot (or ``None``); ``compile_now()``
    publishes one (raising ``SnapshotValidationError`` when a validator fails);
    ``refresh(held)`` returns a newer snapshot when the data changed or ``held`` needs a
    fresh seal, else ``None``; ``needs_refresh(held)`` is the cheap check run per request.
    While a refresh runs, the previous snapshot keeps serving.
    """

    def __init__(
        self,
        *,
        latest: Callable[[], RulesetSnapshot | None],
        compile_now: Callable[[], RulesetSnapshot],
        needs_refresh: Callable[[RulesetSnapshot], bool],
        refresh: Callable[[RulesetSnapshot], RulesetSnapshot | None],
    ) -> None:
        self._latest = latest
        self._compile = compile_now
        self._needs_refresh = needs_refresh
        self._refresh_fn = refresh
        self._lock = threading.Lock()
        self._served: _Served | None = None
        self._worker: threading.Thread | None = None
        self.last_error: str | None = None

    def _adopt(self, snap: RulesetSnapshot) -> _Served:
        with self._lock:
            held = self._served
            if held is None or (snap.revision, compiled_moment(snap)) > (
                held.snapshot.revision,
                compiled_moment(held.snapshot),
            ):
                held = self._served = _Served.of(snap)
            return held

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
        except RenseiRoutingError as e:
            self.last_error = str(e)
            log.warning("background recompile failed: %s", e)
            return
        self.last_error = None
        if snap is not None:
            self._adopt(snap)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait for a background refresh to finish (tests, shutdown)."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)


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
) -> WSGIApp:
    """A WSGI app serving the snapshot endpoint (when ``service`` is given; it requires
    ``token``), the host status endpoint (when ``host_status`` is given) and the JWKS
    document (when ``jwks`` is given: public keys only, so no token)."""
    policy = freshness or FreshnessPolicy()

    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        status, body = _route(environ, path, method, start)
        log.info("%s %s %s", method, path, status.split(" ", 1)[0])
        return body

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
        return "404", _json(start, "404 Not Found", {"error": f"no route {path}"})

    def _snapshot(environ: dict[str, Any], start: StartResponse) -> tuple[str, Iterable[bytes]]:
        assert service is not None
        given = environ.get("HTTP_AUTHORIZATION", "")
        expected = f"Bearer {token}" if token else None
        if expected is None or not hmac.compare_digest(given.encode(), expected.encode()):
            start(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Bearer realm="rensei"'), ("Content-Length", "0")],
            )
            return "401", [b""]
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


class RunningServer:
    """A waitress server running its loop in a background thread (``host run --listen``,
    tests, benchmarks). :meth:`stop` ends the loop from inside it, so no thread ever polls a
    socket another thread closed."""

    def __init__(self, app: WSGIApp, *, host: str, port: int, threads: int = 2) -> None:
        import waitress.server

        # Any: waitress types the result as a union; one listen address is a TcpWSGIServer
        self._server = cast(
            Any, waitress.server.create_server(app, host=host, port=port, threads=threads)
        )
        self.port: int = int(self._server.effective_port)
        self._thread = threading.Thread(target=self._server.run, name="http", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Close every socket from the loop thread, wait for the loop to end, then let the
        worker threads finish the requests in flight."""
        import waitress.wasyncore

        server = self._server
        try:
            server.trigger.pull_trigger(lambda: waitress.wasyncore.close_all(server._map))
        except OSError:
            # The wake-up pipe is unusable (seen once under a full test run: EBADF on its write
            # end). Close from here instead; the loop, polling its own descriptor, then finds
            # an empty map and ends at its next timeout.
            waitress.wasyncore.close_all(server._map, ignore_all=True)
        self._thread.join(timeout)
        server.task_dispatcher.shutdown()


def serve_in_thread(app: WSGIApp, *, host: str, port: int, threads: int = 2) -> RunningServer:
    """Start serving ``app`` on ``host:port`` (0 = any free port) in a background thread."""
    return RunningServer(app, host=host, port=port, threads=threads)
