"""``rensei authorize``: explain one authorization against the host's cached snapshot (the
built-in grant check AND every plugin authorizer), and record it in the audit log; and the
helper ``host claim`` decides through. Holds no authorization rules (core.authz) and no
caching logic (host.cache); owns the options, the output and the record.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import click

from ..core.audit.chain import format_timestamp
from ..core.snapshot.authz import AuthorizationDecision, AuthorizationRequest, EntityRef
from ..core.snapshot.freshness import Freshness, format_age
from ..errors import ExpiredError, SnapshotError
from ..host.cache import HostCache
from ..store.audit import AuditLog
from ..store.home import Home
from ._clock import now
from ._inputs import read_document
from ._output import emit, printable
from ._root import CommandError, cli, echo_json, home_option, json_option
from ._session import session

RECORD_TYPE = "authorization-decision"


def decide_cached(
    home: Path, request: AuthorizationRequest, moment: datetime
) -> AuthorizationDecision:
    """``request`` decided against the host cache of ``home`` at ``moment``: a snapshot past
    RefuseAfter is ``snapshot-expired``, none (or one that no longer verifies)
    ``snapshot-unavailable``; both deny.

    Raises:
        PluginError: a plugin cannot be loaded or registers a bad authorizer.
        ConfigurationError: the host configuration is unreadable.
    """
    cache = HostCache(Path(home) / "host")
    try:
        snap, fresh = cache.current(now=moment, config=cache.config())
    except ExpiredError as e:
        expired = Freshness(ruleset_rev=e.ruleset_rev, age_ms=e.age_ms, degraded=True)
        return AuthorizationDecision.refused(request, "snapshot-expired", str(e), expired)
    except SnapshotError as e:
        none = Freshness(ruleset_rev=None, age_ms=None, degraded=False)
        return AuthorizationDecision.refused(request, "snapshot-unavailable", str(e), none)
    engine = session().authorization()
    return engine.decide(
        [request],
        ruleset_rev=snap.ruleset_rev,
        content_hash=snap.content_hash,
        sections=snap.sections,
        freshness=fresh,
    )[0]


def record(h: Home, payload: dict[str, Any], moment: datetime) -> None:
    """Append ``payload`` to the audit log of ``h``.

    Raises:
        StoreError, HomeError: the log cannot be written.
    """
    with AuditLog.open(h) as audit_log:
        audit_log.append(payload, recorded_at=format_timestamp(moment))


def outcome_lines(decision: AuthorizationDecision) -> list[str]:
    """One line per authorizer: name, verdict, reason, determining policies, detail."""
    lines = []
    for o in decision.outcomes:
        r = o.result
        line = f"  {o.name:<14} {'allowed' if r.allowed else 'denied':<8} {r.reason}"
        if r.policy_ids:
            line += f"  policies: {', '.join(r.policy_ids)}"
        if r.detail:
            line += f"  ({r.detail})"
        lines.append(line)
    return lines


def denial(decision: AuthorizationDecision) -> str:
    """The one-line refusal: reason, who denied, the determining policies, the detail."""
    text = f"not authorized: {decision.reason}"
    if decision.authorizer:
        text += f" by {decision.authorizer}"
    if decision.policy_ids:
        text += f" (policies: {', '.join(decision.policy_ids)})"
    if decision.detail:
        text += f": {decision.detail}"
    return text


@cli.command(name="authorize")
@click.option("--principal", required=True, help='Who asks, an entity uid: Project::"acme".')
@click.option("--action", required=True, help='What: a name (claim, spawn) or Action::"claim".')
@click.option("--resource", required=True, help='On what, an entity uid: Pool::"gpu-a".')
@click.option(
    "--context",
    "context_source",
    default=None,
    metavar="JSON",
    help="The context object (pool, project, repo, role, ...): inline JSON, a file or -.",
)
@click.option("--no-record", is_flag=True, help="Do not append the decision to the audit log.")
@home_option
@json_option
def authorize_command(
    principal: str,
    action: str,
    resource: str,
    context_source: str | None,
    no_record: bool,
    home: Path,
    json_: bool,
) -> None:
    """Explain one authorization against the host's cached snapshot: the snapshot grant check
    AND every plugin authorizer must allow. Exit 0 allowed, 1 denied."""
    context = None if context_source is None else read_document(context_source)[0]
    request = AuthorizationRequest.build(
        EntityRef.parse(principal, what="--principal"),
        EntityRef.action(action),
        EntityRef.parse(resource, what="--resource"),
        context,
    )
    h = Home(home)
    if not no_record:
        h.info()  # refuse before deciding anything if the audit log cannot be written
    moment = now()
    decision = decide_cached(home, request, moment)
    payload = {"record_type": RECORD_TYPE, **decision.to_dict()}
    if not no_record:
        record(h, payload, moment)
    if json_:
        echo_json(payload)
    else:
        fresh = decision.freshness
        against = fresh.ruleset_rev or "no snapshot"
        age = "" if fresh.age_ms is None else f", age {format_age(fresh.age_ms)}"
        flag = " (degraded)" if fresh.degraded else ""
        verdict = "allowed" if decision.allowed else "denied"
        emit(
            printable(
                f"{verdict}: {request.principal} {request.action} {request.resource} "
                f"({decision.reason}) against {against}{age}{flag}"
            )
        )
        for line in outcome_lines(decision):
            emit(printable(line))
    if not decision.allowed:
        raise CommandError(denial(decision))
