"""``rensei serve``: the control side's snapshot endpoint until SIGTERM (and, for this home's
own host cache, the status route). Holds no serving rules (control.server, control.snapshots);
owns the options, the start-up notes and the drain.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import RenseiRoutingError
from ..host.cache import host_cache
from ..host.status import host_status_data
from ._clock import now
from ._daemon import listen_options, log_to_stderr, stop_on_sigterm
from ._output import note
from ._root import CommandError, cli, home_option
from ._session import session


@cli.command(name="serve", short_help="Serve the signed ruleset snapshot over HTTP until SIGTERM.")
@listen_options(port=8787, printed="on stderr")
@click.option(
    "--reseal-after",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Re-sign an unchanged snapshot older than this many seconds, so hosts stay fresh.",
)
@click.option(
    "--drain",
    "drain_s",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="On SIGTERM, seconds to let responses in flight finish before closing.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=8),
    default=1000,
    show_default=True,
    help="Open connections at most (capped by the descriptor limit); at the limit the oldest "
    "connection still sending its request is closed.",
)
@click.option(
    "--request-timeout",
    "request_timeout_s",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds a request may take to arrive whole (headers are at most 16 KiB).",
)
@click.option(
    "--watch-interval",
    "watch_s",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="With a PostgreSQL store ([store] url): seconds between looks at the database when "
    "no notification comes (the fallback to LISTEN/NOTIFY), and between retries while it is "
    "unreachable.",
)
@home_option
def serve(
    bind: str,
    port: int,
    reseal_after: float,
    drain_s: float,
    max_connections: int,
    request_timeout_s: float,
    watch_s: float,
    home: Path,
) -> None:
    """Serve GET /api/daemon/ruleset-snapshot (bearer token: <home>/keys/serve.token) until
    SIGTERM; writes to policies or org data are recompiled in the background. Also GET
    /api/daemon/routing/config (no token): this home's host cache status, as `host status
    --json` gives it. GET /metrics (bearer token): Prometheus metrics. SIGTERM stops accepting
    and lets responses in flight finish (up to --drain seconds)."""
    from ..control.listener import Limits, RunningServer
    from ..control.replicas import replica_service
    from ..control.server import ahead_of_clock, make_app
    from ..control.snapshots import (
        ensure_serve_token,
        home_jwks,
        latest_snapshot,
        snapshot_service,
    )
    from ..ops.metrics import HomeMetrics, serve_metrics
    from ..plugins.manager import snapshot_validators
    from ._store import home_of

    h = home_of(home)
    h.info()
    token = ensure_serve_token(h)
    ctx = session()
    shared = h.store_url() is not None
    if shared:
        service, watcher = replica_service(
            h,
            clock=now,
            validators=snapshot_validators(ctx.pm),
            vocabulary=ctx.vocabulary(),
            reseal_after=reseal_after,
            poll_s=watch_s,
        )
        watcher.start()
        watcher.first_step.wait(30)
        latest = service.held()
        note(
            f"a replica of the shared control database (LISTEN/NOTIFY, polling every {watch_s:g}s)"
        )
        if service.store_error is not None:
            held = (
                f"serving the held snapshot {latest.ruleset_rev}, flagged"
                if latest is not None
                else "holding no snapshot: answering 503 until it is reached"
            )
            note(f"warning: control store unreachable, {held}: {service.store_error}")
    else:
        watcher = None
        service = snapshot_service(
            h,
            clock=now,
            validators=snapshot_validators(ctx.pm),
            vocabulary=ctx.vocabulary(),
            reseal_after=reseal_after,
        )
        try:
            latest = latest_snapshot(h)
        except RenseiRoutingError:
            latest = None  # unreadable or unverifiable: the first request answers 503 saying why
    cache = host_cache(h.path)  # this home's own host cache: the daemon side's status route
    app = make_app(
        now=now,
        token=token,
        service=service,
        jwks=home_jwks(h),
        host_status=lambda: host_status_data(cache, now=now()),
        metrics=serve_metrics(service, HomeMetrics(h.path), now),
    )
    if latest is not None and (warning := ahead_of_clock(latest, now())):
        note(f"warning: {warning}")
    log_to_stderr()
    with stop_on_sigterm() as stop:
        try:
            limits = Limits(connection_limit=max_connections, request_timeout_s=request_timeout_s)
            server = RunningServer(app, host=bind, port=port, limits=limits, drain_s=drain_s)
        except OSError as e:
            raise CommandError(f"cannot listen on {bind}:{port}: {e.strerror or e}") from e
        note(f"serving http://{bind}:{server.port}/api/daemon/ruleset-snapshot")
        if server.connection_limit < max_connections:
            note(
                f"warning: at most {server.connection_limit} connections (the descriptor limit, "
                f"`ulimit -n`, is too low for --max-connections {max_connections})"
            )
        while server.alive and not stop.wait(0.5):
            pass
    if not stop.is_set():
        raise CommandError("the HTTP loop ended unexpectedly (see the log above)")
    server.stop()  # stops accepting, drains the responses in flight, then closes
    if watcher is not None:
        watcher.stop()
    service.wait_idle(10)
    note("stopped")
