"""``rensei host ...`` (the daemon side: trust, sync, run, status, claim; ``rensei serve``, the
control side's endpoint, is ``cli/serve.py``). Holds no verification rules (core) and no caching
logic (host.cache); owns the loops, signals and output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import signing
from ..core.snapshot.envelope import SCOPE_HEADER, SIGNATURE_SCOPES
from ..core.snapshot.freshness import format_age
from ..core.snapshot.receipts import DEFAULT_LEASE_MS, MAX_LEASE_MS
from ..errors import ConfigurationError, KeyFormatError, SnapshotError
from ..files import read_limited, removed_on_failure
from ..host.cache import HostCache, HostConfig, host_cache
from ..host.status import (
    SYNC_STEP,
    TRUST_STEP,
    host_status_data,
    set_aside_lines,
    summarise,
)
from ._clock import now
from ._output import emit, next_step, note, printable
from ._render import denial, outcome_lines
from ._root import CommandError, cli, echo_json, home_option, json_option
from ._session import session

_DEFAULTS = HostConfig()  # the shown defaults of `host run`

if TYPE_CHECKING:  # imported where used: `host status` starts without the store, waitress,
    # the poller, logging or the authorizers
    from ..control.server import RunningServer
    from ..host.poll import PollCounts


@cli.group(name="host")
def host() -> None:
    """The host's verified snapshot cache: trust, sync, run, status, claim; receipts and
    sessions."""


@host.command(name="trust")
@click.argument("keyfile", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option(
    "--kid",
    default=None,
    metavar="ID",
    help="Trust KEYFILE under this key id (an opaque id such as a platform's; default: the "
    "key's derived id).",
)
@click.option(
    "--jwks",
    "jwks_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Trust every Ed25519 key of this JWKS document under its kid (malformed entries are "
    "skipped and reported).",
)
@click.option(
    "--scope",
    type=click.Choice(SIGNATURE_SCOPES),
    default=SCOPE_HEADER,
    show_default=True,
    help="header: require headerSignature (compiledAt and revision signed); hash-only: accept "
    "a signer that signs only the content hash (the platform's).",
)
@click.option(
    "--from-home",
    "from_home",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    metavar="DIR",
    help="Trust the signing key of the control home DIR (its keys/host.pub), under the key id "
    "its snapshots carry (init --key-id, else the derived id).",
)
@home_option
def host_trust(
    keyfile: Path | None,
    kid: str | None,
    jwks_file: Path | None,
    from_home: Path | None,
    scope: str,
    home: Path,
) -> None:
    """Trust the public signing key in KEYFILE (ed25519:<base64>), the keys of a JWKS document
    (--jwks), or a control home's own key (--from-home DIR), for snapshots."""
    if [keyfile, jwks_file, from_home].count(None) != 2:
        raise CommandError("give exactly one of KEYFILE, --jwks FILE or --from-home DIR")
    if jwks_file is not None and kid is not None:
        raise CommandError("--kid applies to a KEYFILE; a JWKS entry carries its own kid")
    if from_home is not None and kid is not None:
        raise CommandError("--kid applies to a KEYFILE; --from-home trusts the home's own key id")
    cache = host_cache(home)
    try:
        if from_home is not None:
            from ..store.home import Home

            control = Home(from_home)
            control.info()  # an initialised home, or one line saying it is not
            key, home_kid = control.public_key(), control.snapshot_key_id()
            path = cache.trust(key, kid=home_kid, scope=scope)
            note(
                f"trusted key {home_kid} ({_scope_words(scope)}) of the home "
                f"{control.path.resolve()} ({path})"
            )
            return
        if keyfile is not None:
            key = signing.load_public_key(keyfile)
            path = cache.trust(key, kid=kid, scope=scope)
            note(f"trusted key {kid or key.key_id} ({_scope_words(scope)}) ({path})")
            return
        assert jwks_file is not None
        try:
            document = json.loads(read_limited(jwks_file, signing.MAX_JWKS_BYTES))
        except (OSError, ValueError) as e:
            raise CommandError(f"cannot read JWKS document {jwks_file}: {e}") from e
        found, skipped = signing.read_jwks(document)
        for line in skipped:
            note(f"skipped {line}")
        if not found:
            raise CommandError(f"{jwks_file}: no usable Ed25519 key")
        for jwk_kid, key in found:
            path = cache.trust(key, kid=jwk_kid, scope=scope)
            note(f"trusted key {jwk_kid} ({_scope_words(scope)}) ({path})")
    except (KeyFormatError, ConfigurationError) as e:
        raise CommandError(str(e)) from e


def _scope_words(scope: str) -> str:
    """What ``host trust``'s ``--scope`` means, in its output: the word alone said nothing."""
    if scope == SCOPE_HEADER:
        return (
            "scope header: each snapshot must carry headerSignature (its header, revision and "
            "compiledAt included, signed), not only a signature over its content hash"
        )
    return "scope hash-only: a signature over the content hash alone is accepted"


@host.command(name="sync")
@click.option(
    "--from",
    "source_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A snapshot file (as `rensei snapshot export` writes it) to verify and cache.",
)
@click.option(
    "--endpoint",
    "endpoints",
    multiple=True,
    help="Base URL of a `rensei serve` endpoint; repeat it for replicas (every one is asked "
    "and the newest verified copy any offers is held; each failure is named).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File holding the endpoint's bearer token.",
)
@click.option(
    "--degraded-after",
    "degraded_after_s",
    type=click.FloatRange(min=0, max=1e9, max_open=True),
    default=None,
    metavar="SECONDS",
    help="Flag decisions from a snapshot older than this (since its compile); remembered in "
    "<home>/host/config.json as degraded_after_s (default 300).",
)
@click.option(
    "--refuse-after",
    "refuse_after_s",
    type=click.FloatRange(min=0, max=1e9, max_open=True),
    default=None,
    metavar="SECONDS",
    help="Refuse to decide from a snapshot older than this (since its compile); remembered "
    "as refuse_after_s (default 1800). Across an air gap, at least the time between two "
    "carried files.",
)
@home_option
def host_sync(
    source_file: Path | None,
    endpoints: tuple[str, ...],
    token_file: Path | None,
    degraded_after_s: float | None,
    refuse_after_s: float | None,
    home: Path,
) -> None:
    """Fetch once (from a file or an endpoint), verify, and persist; remembers the source (and
    the snapshot age bounds given)."""
    if any("," in e for e in endpoints):
        raise click.UsageError("--endpoint takes one URL; repeat it for replicas")
    endpoint = ",".join(endpoints) or None
    if (source_file is None) == (endpoint is None):
        raise click.UsageError("give exactly one of --from FILE or --endpoint URL")
    if endpoint is not None and token_file is None:
        raise click.UsageError("--endpoint needs --token-file")
    cache = host_cache(home)
    config = cache.config()
    bounds = {
        name: value
        for name, value in (
            ("degraded_after_s", degraded_after_s),
            ("refuse_after_s", refuse_after_s),
        )
        if value is not None
    }
    config = HostConfig.from_dict(
        {
            **config.to_dict(),
            **bounds,
            "endpoint": endpoint,
            "token_file": None if token_file is None else str(token_file.resolve()),
            "source_file": None if source_file is None else str(source_file.resolve()),
        }
    )
    with removed_on_failure(cache.directory):  # a first sync that fails leaves no host state
        cache.save_config(config)
        from ..host.poll import poll_once

        result = poll_once(cache, config, now=now())
    note(result)


@host.command(name="run")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=None,
    show_default=f"the home's interval_s, else {_DEFAULTS.interval_s:g}",
    help="Seconds between polls.",
)
@click.option(
    "--jitter",
    type=click.FloatRange(min=0),
    default=None,
    show_default=f"the home's jitter_s, else {_DEFAULTS.jitter_s:g}",
    help="At most this many seconds added at random to each interval.",
)
@click.option(
    "--listen",
    default=None,
    metavar="HOST:PORT",
    help="Also serve GET /api/daemon/routing/config (the cache status) and GET /metrics "
    "(Prometheus) on this address; with no snapshot source configured, serve only those "
    "(nothing to poll).",
)
@home_option
def host_run(interval: float | None, jitter: float | None, listen: str | None, home: Path) -> None:
    """Poll the configured source until SIGTERM: fetch, verify, persist; a failure keeps the
    last known-good copy and is recorded for `rensei host status`. The source is read once, at
    start: after `rensei host sync` changes it, restart `host run`."""
    import logging

    from ..host.poll import PollCounts, run_polls
    from ._daemon import log_to_stderr, stop_on_sigterm

    cache = host_cache(home)
    config = cache.config()
    if not config.has_source and not listen:
        raise CommandError(
            "no snapshot source configured: run `rensei host sync` first (or give --listen "
            "to serve the status alone)"
        )
    period = config.interval_s if interval is None else interval
    spread = config.jitter_s if jitter is None else jitter
    log_to_stderr()
    counts = PollCounts()
    server = _status_server(cache, listen, counts, home) if listen else None
    with stop_on_sigterm() as stop:
        if config.has_source:
            run_polls(
                cache,
                config,
                period=period,
                spread=spread,
                stop=stop,
                clock=now,
                log=logging.getLogger("rensei_routing.host"),
                counts=counts,
            )
        else:
            note(
                "no snapshot source configured: nothing to poll, serving the status alone "
                "(`rensei host sync`, then restart `host run`, to poll)"
            )
            while not stop.wait(0.5):
                pass
    if server is not None:
        server.stop()
    note("stopped")


def _status_server(cache: HostCache, listen: str, counts: PollCounts, home: Path) -> RunningServer:
    from ..control.server import make_app, serve_in_thread
    from ..ops.metrics import HomeMetrics, host_metrics

    bind, _, port = listen.rpartition(":")
    if not bind or not port.isdigit():
        raise click.UsageError(f"--listen {listen!r} is not HOST:PORT")
    app = make_app(
        now=now,
        host_status=lambda: host_status_data(cache, now=now()),
        metrics=host_metrics(cache, counts, HomeMetrics(home), now),
    )
    server = serve_in_thread(app, host=bind, port=int(port))
    note(f"status on http://{bind}:{server.port}/api/daemon/routing/config")
    return server


@host.command(name="status")
@home_option
@json_option
def host_status(home: Path, json_: bool) -> None:
    """The `Ruleset snapshot:` line, the damaged copies set aside and the last fetch. Without a
    snapshot source the line is absent (not wrong), and a note on stderr says what is cached
    and what would renew it."""
    status = host_status_data(host_cache(home), now=now())
    if json_:
        echo_json(status)
        return
    summary = summarise(status)
    if not home.exists():
        next_step(f"no rensei home at {home}: nothing is cached", TRUST_STEP, SYNC_STEP, then=True)
        return
    if not summary.configured:  # the line is absent, not wrong (document 000): say what is held
        assert summary.missing is not None
        next_step(printable(summary.missing), *summary.next_steps, then=True)
        return
    emit(printable(summary.line))
    for line in set_aside_lines(status):
        emit(printable(line))
    last = status["lastFetch"]
    if last:
        result = "ok" if last.get("ok") else "FAILED"
        emit(
            printable(
                f"Last fetch: {last.get('at')} from {last.get('source')}: {result}, "
                f"{last.get('detail')}"
            )
        )
    if summary.missing is not None:  # a source, and nothing cached yet
        next_step(summary.missing, *summary.next_steps)


@host.command(name="claim")
@click.option("--pool", "pool_id", required=True, help="The pool to claim capacity in.")
@click.option("--project", default=None, help="The claiming project (checked against grants).")
@click.option(
    "--host-id",
    default=None,
    help="The claiming host's id: its row in the pool's hosts, when present, must be ready.",
)
@click.option(
    "--harness",
    default=None,
    help="The harness to run: some provider's harnessByAuthMode must name it.",
)
@click.option(
    "--lease",
    "lease_s",
    type=click.IntRange(min=1, max=MAX_LEASE_MS // 1000),
    default=DEFAULT_LEASE_MS // 1000,
    show_default=True,
    help="Seconds a session under the receipt lives without a heartbeat.",
)
@click.option(
    "--receipt",
    "receipt_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the admission receipt (signed by this host's key) to this file, off the home; "
    "one that cannot be written refuses the claim before it is recorded.",
)
@home_option
@json_option
def host_claim(
    pool_id: str,
    project: str | None,
    host_id: str | None,
    harness: str | None,
    lease_s: int,
    receipt_file: Path | None,
    home: Path,
    json_: bool,
) -> None:
    """Re-check a claim's permission against the cached snapshot (the grant check AND every
    plugin authorizer); record the decision in the audit log. An admitted claim gets an
    admission receipt, signed by this host's key, for `rensei host session start`. Exit 0
    admitted, 1 refused (not granted, not authorized, expired snapshot, ...)."""
    from ..host.claims import claim_payload, claim_request, decide_cached
    from ..host.sessions import HostSessions
    from ._store import home_of, prepared_output, refuse_inside_home, require_output_dir

    h = home_of(home)
    if receipt_file is not None:
        require_output_dir(receipt_file)
        refuse_inside_home(h, receipt_file)
    h.info()  # refuse before deciding anything if the audit log cannot be written
    # the receipt's file is made ready (and written) before the claim is recorded: an output
    # that cannot be written refuses the claim with nothing admitted, stored or left behind
    with prepared_output(receipt_file, mode=0o600) as output:
        moment = now()
        cache = host_cache(home)
        request = claim_request(pool_id, project, host=host_id, harness=harness)
        decision = decide_cached(cache, request, moment, session().authorization)
        payload = claim_payload(decision, pool_id, project)
        reason, detail = payload["reason"], payload["detail"]
        with HostSessions(h, cache, redactor=session().redactor()) as sessions:
            receipt = (
                sessions.issue(
                    decision,
                    pool=pool_id,
                    project=project,
                    admitted_at=moment,
                    lease_ms=lease_s * 1000,
                )
                if decision.allowed
                else None
            )
            if receipt is not None and output is not None:
                try:
                    output.write(receipt.to_bytes())
                except OSError as e:
                    raise CommandError(
                        f"cannot write {receipt_file}: {e.strerror or e}; the claim was not "
                        "recorded"
                    ) from e
            sessions.record_claim(payload, moment, receipt)
        if receipt is not None and output is not None:
            try:
                output.commit()
            except OSError as e:  # the same directory, just written: all but impossible
                raise CommandError(
                    f"claim admitted and recorded (receipt {receipt.receipt_id}), but "
                    f"{receipt_file} could not be renamed into place: {e.strerror or e}"
                ) from e
    if receipt is not None:
        payload = {**payload, "receipt": receipt.to_dict()}
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
        if receipt is not None:
            where = f" -> {receipt_file}" if receipt_file is not None else ""
            lease = format_age(receipt.lease_ms)
            emit(printable(f"receipt {receipt.receipt_id} (lease {lease}){where}"))
    if not decision.allowed:
        from ..core.snapshot.authz import BUILTIN_AUTHORIZER

        if decision.authorizer in (None, BUILTIN_AUTHORIZER):
            raise CommandError(f"claim refused: {reason} {detail}".rstrip())
        raise CommandError(f"claim refused: {denial(decision)}")
