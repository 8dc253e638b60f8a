"""``rensei policy whatif``: re-explain the contexts recorded in the audit chain against the
current revision and against a candidate policy set, and show what would change (the replay is
:mod:`rensei_routing.shadow.whatif`'s). Must not hold routing rules (core) or SQL (store).

The chain is not verified here (``rensei audit verify`` does that): a what-if is a forecast,
not evidence.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from ..core.routing.validation import validate_policies
from ..shadow.whatif import compare_chain
from ..store.audit import AuditLog
from ._inputs import read_verified_policy_file, since_option
from ._output import emit, next_step, note, printable
from ._render import issue_line, render_summary
from ._root import CommandError, echo_json, home_option, json_option
from ._session import session
from ._store import collector_paused, home_of, open_policy_store
from .policy import policy


class ChangeFoundError(CommandError):
    """``whatif --fail-on-change`` found a decision that would change: exit 1."""

    exit_code = 1


@policy.command(name="whatif")
@click.argument("candidate", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@since_option
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Only the N most recent recorded contexts.",
)
@click.option(
    "--examples",
    type=click.IntRange(min=0, max=50),
    default=3,
    show_default=True,
    help="Example decisions kept per matrix cell and counter.",
)
@click.option(
    "--fail-on-change", is_flag=True, help="Exit 1 when any decision would change (a CI gate)."
)
@home_option
@json_option
def policy_whatif(
    candidate: Path,
    since: dt.datetime | None,
    limit: int | None,
    examples: int,
    fail_on_change: bool,
    home: Path,
    json_: bool,
) -> None:
    """Re-explain the contexts recorded in the audit chain against the current revision and
    against the CANDIDATE policy file (validated first), and show what would change: a
    before/after matrix of outcome and reason, the routes that would move provider, model or
    account, and newly held, rejected or selected spawns, with example decision ids.
    """
    vocabulary = session().vocabulary()
    proposed = read_verified_policy_file(candidate, vocabulary=vocabulary)
    issues = validate_policies(proposed.policies, vocabulary=vocabulary)
    if issues:
        for issue in issues:
            click.echo(issue_line(issue), err=True)
        raise CommandError(f"{len(issues):,} validation issue(s) in {candidate}; nothing compared")
    where = home_of(home)
    where.info()
    with open_policy_store(home, write=False) as store, collector_paused():
        loaded = store.load_policies()
    if loaded.detail:
        note(f"warning: {loaded.detail}")
    skipped: list[int] = []
    with AuditLog.open(where) as log:
        summary = compare_chain(
            log,
            (loaded.snapshot, loaded.state),
            proposed,
            since=since,
            limit=limit,
            examples=examples,
            skipped=skipped.append,
            vocabulary=vocabulary,
        )
    current = loaded.snapshot
    if json_:
        echo_json(
            {
                "current": {
                    "revision": current.revision,
                    "content_hash": current.content_hash,
                    "state": loaded.state,
                },
                "candidate": {
                    "file": str(candidate),
                    "content_hash": proposed.content_hash,
                    "policy_count": len(proposed.policies),
                },
                "skipped_records": len(skipped),
                **summary.to_dict(),
            }
        )
    elif not summary.contexts:
        emit(printable("no recorded contexts" + ("" if since is None else " in that period")))
        if since is not None:
            next_step("the chain may hold older ones", "rensei policy whatif FILE (no --since)")
        else:
            next_step(
                "what-if replays the contexts the chain records",
                "rensei explain CONTEXT --record",
                "rensei explain-batch FILE --record",
                "rensei shadow record SPAWNS.jsonl",
            )
    else:
        emit(
            printable(
                f"what-if over {summary.contexts:,} recorded contexts: current revision "
                f"{current.revision} ({loaded.state}) -> candidate {candidate} "
                f"({len(proposed.policies):,} policies, {proposed.content_hash})"
            )
        )
        emit("\n".join(printable(line) for line in render_summary(summary).splitlines()))
    if skipped:
        note(
            f"note: {len(skipped):,} record(s) carry no readable context (first: seq "
            f"{min(skipped)}); not counted"
        )
    if fail_on_change and summary.any_change:
        raise ChangeFoundError(
            f"{summary.count('changed'):,} of {summary.contexts:,} recorded spawns would change"
        )
