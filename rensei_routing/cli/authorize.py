"""``rensei authorize``: explain one authorization against the host's cached snapshot (the
built-in grant check AND every plugin authorizer, ``host.claims``), and record it in the audit
log. Owns the options and the output.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..core.snapshot.authz import AuthorizationRequest, EntityRef
from ..core.snapshot.freshness import format_age
from ..host.cache import host_cache
from ..host.claims import AUTHORIZATION_RECORD, decide_cached, record
from ._clock import now
from ._inputs import SOURCE, read_document
from ._output import emit, printable
from ._render import denial, outcome_lines
from ._root import CommandError, cli, echo_json, home_option, json_option
from ._session import session
from ._store import home_of


@cli.command(name="authorize")
@click.option("--principal", required=True, help='Who asks, an entity uid: Project::"acme".')
@click.option("--action", required=True, help='What: a name (claim, spawn) or Action::"claim".')
@click.option("--resource", required=True, help='On what, an entity uid: Pool::"gpu-a".')
@click.option(
    "--context",
    "context_source",
    type=SOURCE,
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
    h = home_of(home)
    if not no_record:
        h.info()  # refuse before deciding anything if the audit log cannot be written
    moment = now()
    decision = decide_cached(host_cache(home), request, moment, session().authorization)
    payload = {"record_type": AUTHORIZATION_RECORD, **decision.to_dict()}
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
