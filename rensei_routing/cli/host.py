"""``rensei serve`` (control side: the snapshot endpoint) and ``rensei host ...`` (the daemon
side: trust, sync, run, status, claim). Holds no verification rules (core) and no caching
logic (host.cache); owns the loops, signals and output.
"""

from __future__ import annotations

import logging
import random
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from .. import signing
from ..core.snapshot.authz import (
    BUILTIN_AUTHORIZER,
    AuthorizationDecision,
    AuthorizationRequest,
    EntityRef,
)
from ..core.snapshot.freshness import format_age
from ..core.snapshot.postures import DecisionClass
from ..errors import ExpiredError, KeyFormatError, RenseiRoutingError, SnapshotError
from ..host.cache import HostCache, HostConfig, token_from_file
from ..host.files import read_limited
from ._clock import now, now_text
from ._output import emit, note, printable
from ._root import CommandError, cli, echo_json, home_option, json_option
from ._session import session

if TYPE_CHECKING:  # imported where used: `host status` starts without the store or waitress
    from ..control.server import RunningServer, SnapshotService
    from ..store.home import Home

log = logging.getLogger("rensei_routing.host")


def host_cache(home: Path) -> HostCache:
    return HostCache(Path(home) / "host")


@contextmanager
def _stop_on_sigterm() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT (restoring the previous handlers on exit)."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _logging() -> None:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s"
    )


# -- serve ---------------------------------------------------------------------------------------


def snapshot_service(h: Home, *, reseal_after: float = 120.0) -> SnapshotService:
    """The endpoint's snapshot source for ``h``, with this invocation's validators and
    vocabulary (``serve`` and ``quickstart``)."""
    from ..control.server import SnapshotService
    from ..control.snapshots import compile_snapshot, latest_snapshot, refresh_snapshot
    from ..plugins.manager import snapshot_validators

    ctx = session()
    validators, vocabulary = snapshot_validators(ctx.pm), ctx.vocabulary()
    return SnapshotService(
        latest=lambda: latest_snapshot(h),
        compile_now=lambda: (
            compile_snapshot(
                h, compiled_at=now_text(), validators=validators, vocabulary=vocabulary
            ).snapshot
        ),
        needs_refresh=lambda held: True,
        refresh=lambda held: refresh_snapshot(
            h,
            held,
            now=now(),
            reseal_after=timedelta(seconds=reseal_after),
            validators=validators,
            vocabulary=vocabulary,
        ),
    )


@cli.command(name="serve", short_help="Serve the signed ruleset snapshot over HTTP until SIGTERM.")
@click.option("--host", "bind", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True)
@click.option(
    "--reseal-after",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Re-sign an unchanged snapshot older than this many seconds, so hosts stay fresh.",
)
@home_option
def serve(bind: str, port: int, reseal_after: float, home: Path) -> None:
    """Serve GET /api/daemon/ruleset-snapshot (bearer token: <home>/keys/serve.token) until
    SIGTERM; writes to policies or org data are recompiled in the background."""
    import waitress.server

    from ..control.server import make_app
    from ..control.snapshots import ensure_serve_token
    from ..store.home import Home

    h = Home(home)
    h.info()
    token = ensure_serve_token(h)
    service = snapshot_service(h, reseal_after=reseal_after)
    app = make_app(now=now, token=token, service=service)
    _logging()
    server: Any = waitress.server.create_server(app, host=bind, port=port, threads=4)
    actual = server.effective_port
    note(f"serving http://{bind}:{actual}/api/daemon/ruleset-snapshot")

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    server.run()  # returns after SIGTERM/SIGINT, once in-flight requests are answered
    service.wait_idle(10)
    note("stopped")


# -- host ----------------------------------------------------------------------------------------


@cli.group(name="host")
def host() -> None:
    """The host's verified snapshot cache: trust, sync, run, status, claim."""


@host.command(name="trust")
@click.argument("keyfile", type=click.Path(dir_okay=False, path_type=Path))
@home_option
def host_trust(keyfile: Path, home: Path) -> None:
    """Trust the public signing key in KEYFILE (ed25519:<base64>) for snapshots."""
    try:
        key = signing.load_public_key(keyfile)
    except KeyFormatError as e:
        raise CommandError(str(e)) from e
    path = host_cache(home).trust(key)
    note(f"trusted key {key.key_id} ({path})")


@host.command(name="sync")
@click.option("--from", "source_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--endpoint", default=None, help="Base URL of a `rensei serve` endpoint.")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File holding the endpoint's bearer token.",
)
@home_option
def host_sync(
    source_file: Path | None, endpoint: str | None, token_file: Path | None, home: Path
) -> None:
    """Fetch once (from a file or an endpoint), verify, and persist; remembers the source."""
    if (source_file is None) == (endpoint is None):
        raise click.UsageError("give exactly one of --from FILE or --endpoint URL")
    if endpoint is not None and token_file is None:
        raise click.UsageError("--endpoint needs --token-file")
    cache = host_cache(home)
    config = cache.config()
    config = HostConfig(
        **{
            **config.to_dict(),
            "endpoint": endpoint,
            "token_file": None if token_file is None else str(token_file.resolve()),
            "source_file": None if source_file is None else str(source_file.resolve()),
        }
    )
    cache.save_config(config)
    result = poll_once(cache, config)
    emit(printable(result))


def poll_once(cache: HostCache, config: HostConfig) -> str:
    """One fetch + verify + persist; the line to report.

    Raises:
        SnapshotError (and its refusals): the last known-good copy is kept.
    """
    moment = now()
    if config.source_file is not None:
        source = config.source_file
        try:
            data = read_limited(Path(source), 64 * 1024 * 1024)
        except (OSError, ValueError) as e:
            cache.record_fetch(now=moment, source=source, ok=False, detail=str(e))
            raise SnapshotError(f"cannot read {source}: {e}") from e
    elif config.endpoint is not None:
        source = config.endpoint
        try:
            from ..host.fetch import fetch_snapshot

            token = token_from_file(config.token_file or "")
            held = cache.load()
            result = fetch_snapshot(
                source, token=token, etag=None if held is None else _etag_of(held)
            )
        except RenseiRoutingError as e:
            cache.record_fetch(now=moment, source=source, ok=False, detail=str(e))
            raise
        if result.body is None:  # 304: what we hold is what is served
            cache.record_fetch(now=moment, source=source, ok=True, detail="not modified")
            return f"not modified: {held.ruleset_rev if held else '-'}"
        data = result.body
    else:
        raise SnapshotError("no snapshot source configured (rensei host sync)")
    accepted = cache.accept(data, now=moment, source=source)
    verb = "adopted" if accepted.adopted else "unchanged"
    return f"{verb}: {accepted.snapshot.ruleset_rev} (compiled {accepted.snapshot.compiled_at})"


def _etag_of(snap: Any) -> str:
    import hashlib

    return hashlib.sha256(snap.to_bytes()).hexdigest()


@host.command(name="run")
@click.option("--interval", type=click.FloatRange(min=0.05), default=None, help="Seconds.")
@click.option("--jitter", type=click.FloatRange(min=0), default=None, help="Seconds.")
@click.option(
    "--listen",
    default=None,
    metavar="HOST:PORT",
    help="Also serve GET /api/daemon/routing/config (the cache status) on this address.",
)
@home_option
def host_run(interval: float | None, jitter: float | None, listen: str | None, home: Path) -> None:
    """Poll the configured source until SIGTERM: fetch, verify, persist; a failure keeps the
    last known-good copy and is recorded for `rensei host status`."""
    cache = host_cache(home)
    config = cache.config()
    if not config.has_source:
        raise CommandError("no snapshot source configured: run `rensei host sync` first")
    period = config.interval_s if interval is None else interval
    spread = config.jitter_s if jitter is None else jitter
    rng = random.Random()
    _logging()
    server = _status_server(cache, listen) if listen else None
    with _stop_on_sigterm() as stop:
        while not stop.is_set():
            try:
                log.info("%s", poll_once(cache, config))
            except RenseiRoutingError as e:
                log.warning("poll failed, keeping the last known-good snapshot: %s", e)
            stop.wait(period + rng.uniform(0, spread))
    if server is not None:
        server.stop()
    note("stopped")


def _status_server(cache: HostCache, listen: str) -> RunningServer:
    from ..control.server import make_app, serve_in_thread

    bind, _, port = listen.rpartition(":")
    if not bind or not port.isdigit():
        raise click.UsageError(f"--listen {listen!r} is not HOST:PORT")
    app = make_app(now=now, host_status=lambda: host_status_data(cache))
    server = serve_in_thread(app, host=bind, port=int(port))
    note(f"status on http://{bind}:{server.port}/api/daemon/routing/config")
    return server


def host_status_data(cache: HostCache) -> dict[str, Any]:
    """The cache's status as data (``host status --json`` and the config endpoint)."""
    config = cache.config()
    out: dict[str, Any] = {
        "source": {
            "endpoint": config.endpoint,
            "file": config.source_file,
            "configured": config.has_source,
        },
        "degradedAfterS": config.degraded_after_s,
        "refuseAfterS": config.refuse_after_s,
        "snapshot": None,
        "lastFetch": cache.last_fetch(),
    }
    try:
        snap = cache.load()
    except SnapshotError as e:
        out["error"] = str(e)
        return out
    if snap is None:
        return out
    entry: dict[str, Any] = {
        "rulesetRev": snap.ruleset_rev,
        "compiledAt": snap.compiled_at,
        "contentHash": snap.content_hash,
        "state": "fresh",
    }
    try:
        _, fresh = cache.current(now=now(), config=config)
        entry.update(fresh.to_dict())
        entry["state"] = "degraded" if fresh.degraded else "fresh"
    except ExpiredError as e:
        entry.update({"snapshotAgeMs": e.age_ms, "degraded": True, "state": "expired"})
    except SnapshotError as e:
        entry.update({"state": "refused", "error": str(e)})
    out["snapshot"] = entry
    return out


def snapshot_line(status: dict[str, Any]) -> str:
    """The ``Ruleset snapshot: {org}@{rev} (age 3m12s)`` line of a :func:`host_status_data`."""
    snap = status["snapshot"]
    if snap is None:
        return "Ruleset snapshot: none cached"
    age = snap.get("snapshotAgeMs")
    line = f"Ruleset snapshot: {snap['rulesetRev']}"
    if age is not None:
        line += f" (age {format_age(age)})"
    if snap["state"] == "degraded":
        line += " (degraded)"
    elif snap["state"] in ("expired", "refused"):
        line += f" ({snap['state']}: refusing to decide from it)"
    return line


@host.command(name="status")
@home_option
@json_option
def host_status(home: Path, json_: bool) -> None:
    """The `Ruleset snapshot:` line (absent when no source is configured) and the last fetch."""
    status = host_status_data(host_cache(home))
    if json_:
        echo_json(status)
        return
    if not status["source"]["configured"]:
        note("no snapshot source configured")
        return
    emit(printable(snapshot_line(status)))
    last = status["lastFetch"]
    if last:
        result = "ok" if last.get("ok") else "FAILED"
        emit(
            printable(
                f"Last fetch: {last.get('at')} from {last.get('source')}: {result}, "
                f"{last.get('detail')}"
            )
        )


@host.command(name="claim")
@click.option("--pool", "pool_id", required=True, help="The pool to claim capacity in.")
@click.option("--project", default=None, help="The claiming project (checked against grants).")
@home_option
@json_option
def host_claim(pool_id: str, project: str | None, home: Path, json_: bool) -> None:
    """Re-check a claim's permission against the cached snapshot (the grant check AND every
    plugin authorizer); record the decision in the audit log. Exit 0 admitted, 1 refused (not
    granted, not authorized, expired snapshot, ...)."""
    from ..store.home import Home
    from .authorize import decide_cached, denial, outcome_lines, record

    h = Home(home)
    h.info()  # refuse before deciding anything if the audit log cannot be written
    moment = now()
    context = {"pool": pool_id} if project is None else {"pool": pool_id, "project": project}
    request = AuthorizationRequest.build(
        EntityRef(type="Project", id=project or "*"),
        EntityRef(type="Action", id="claim"),
        EntityRef(type="Pool", id=pool_id),
        context,
    )
    decision = decide_cached(home, request, moment)
    grant = next((o.result for o in decision.outcomes if o.name == BUILTIN_AUTHORIZER), None)
    # the grant check's reason unless another authorizer denied (or nothing could run)
    by_grant = grant is not None and decision.authorizer in (None, BUILTIN_AUTHORIZER)
    reason, detail = (
        (grant.reason, grant.detail)
        if by_grant and grant
        else (
            decision.reason,
            decision.detail,
        )
    )
    payload: dict[str, Any] = {
        "record_type": "claim-decision",
        "decision_class": DecisionClass.PLACEMENT.value,
        "pool_id": pool_id,
        "project": project,
        "admitted": decision.allowed,
        "reason": reason,
        "detail": detail,
        **decision.freshness.to_dict(),
        "authorization": _verdict(decision),
    }
    record(h, payload, moment)
    if decision.reason == "snapshot-expired":
        raise CommandError(decision.detail)
    if decision.reason == "snapshot-unavailable":
        raise SnapshotError(decision.detail)
    fresh = decision.freshness
    if json_:
        echo_json(payload)
    else:
        verdict = "admitted" if decision.allowed else "refused"
        flag = " (degraded)" if fresh.degraded else ""
        emit(
            printable(
                f"{verdict}: pool {pool_id} ({reason}) against {fresh.ruleset_rev}, "
                f"age {format_age(fresh.age_ms or 0)}{flag}"
            )
        )
        if len(decision.outcomes) > 1:
            for line in outcome_lines(decision):
                emit(printable(line))
    if not decision.allowed:
        if decision.authorizer in (None, BUILTIN_AUTHORIZER):
            raise CommandError(f"claim refused: {reason} {detail}".rstrip())
        raise CommandError(f"claim refused: {denial(decision)}")


def _verdict(decision: AuthorizationDecision) -> dict[str, Any]:
    """The authorization verdict a claim record carries (the request's own fields and the
    snapshot fields are already on the record)."""
    full = decision.to_dict()
    keep = ("principal", "action", "allowed", "reason", "authorizer", "detail", "policyIds")
    return {
        **{k: full[k] for k in keep},
        "errors": full["errors"],
        "authorizers": full["authorizers"],
    }
