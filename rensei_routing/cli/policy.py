"""``rensei policy ...``: validate a policy file, save it as a revision, show and list revisions.
Text output escapes every non-printable character of a policy (see :mod:`._output`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from ..control.policy_writes import rollback_policies, save_policies
from ..core.routing.structure import read_policy_document
from ..core.routing.validation import MAX_ISSUES, ValidationIssue, validate
from ..errors import InputError, MalformedError, PolicyValidationError
from ..store.control import PolicyWrite
from ._inputs import read_json, read_verified_policy_file
from ._output import emit, next_step, note, printable
from ._render import issue_line
from ._root import (
    CommandError,
    actor_option,
    cli,
    echo_json,
    home_option,
    json_option,
    unused_home_option,
)
from ._session import session
from ._store import now_rfc3339, open_policy_store

#: ``policy validate``'s codes for a file that is not JSON, or (``--json``) cannot be read.
NOT_JSON = "not-json"
UNREADABLE = "unreadable"

_EXPECTED = click.option(
    "--expected-revision",
    type=click.IntRange(min=0, max=2**63 - 1),
    default=None,
    help="Refuse (stale-revision, exit 1, nothing written) unless this is still the current "
    "revision (0: none saved yet). Never retried.",
)
_SCOPE = click.option(
    "--scope-repo",
    metavar="OWNER/NAME",
    default=None,
    help="Change only this repository's slice (policies matching exactly it, no repo class, "
    "no system safety); anything else changed or added is refused (out-of-scope).",
)


@cli.group()
def policy() -> None:
    """Policy sets: validate, save as revisions, roll back, import, export, show, history."""


@policy.command(name="validate")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@unused_home_option
@json_option
def policy_validate(file: Path, json_: bool) -> None:
    """Check a policy FILE ('-' for stdin); list every problem, structural (not JSON, a
    malformed field of any policy, a declared content_hash that is not its own) and semantic
    (the validation codes of the well-formed policies). Exit 0 when valid, 1 otherwise.

    At most 20 issues are listed per policy and 1,000 in all; the rest are counted.
    """
    vocabulary = session().vocabulary()
    structural: tuple[ValidationIssue, ...]
    try:
        doc, _ = read_json(file)
    except MalformedError as e:  # not JSON: the one problem there is to report
        read, structural = None, (ValidationIssue(code=NOT_JSON, policy_id=None, detail=str(e)),)
    except InputError as e:
        if not json_:
            raise
        read, structural = None, (ValidationIssue(code=UNREADABLE, policy_id=None, detail=str(e)),)
    else:
        read = read_policy_document(doc, vocabulary=vocabulary)
        structural = read.issues
    report = validate(() if read is None else read.policies, vocabulary=vocabulary)
    issues = [*structural[:MAX_ISSUES], *report.issues][:MAX_ISSUES]
    total = len(structural) + report.total
    omitted = total - len(issues)
    snapshot = None if read is None else read.snapshot
    if json_:
        echo_json(
            {
                "valid": total == 0,
                "policy_count": 0 if read is None else read.entries,
                "content_hash": None if snapshot is None else snapshot.content_hash,
                "issues": [i.to_dict() for i in issues],
                "issues_omitted": omitted,
            }
        )
    elif total == 0 and snapshot is not None:
        emit(f"valid: {len(snapshot.policies):,} policies, {snapshot.content_hash}")
    else:
        for issue in issues:
            emit(issue_line(issue))
    if total:
        raise CommandError(f"{_count(total, omitted)} in {file}")


def _count(total: int, omitted: int) -> str:
    more = f" ({omitted:,} not listed)" if omitted else ""
    return f"{total:,} validation issue(s){more}"


@policy.command(name="save")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option(
    "--over-corrupt",
    is_flag=True,
    help="Repair: save even though the current revision is corrupt (it is kept, as evidence; "
    "the new revision takes the next number).",
)
@_EXPECTED
@_SCOPE
@actor_option
@home_option
@json_option
def policy_save(
    file: Path,
    over_corrupt: bool,
    expected_revision: int | None,
    scope_repo: str | None,
    actor: str | None,
    home: Path,
    json_: bool,
) -> None:
    """Validate a policy FILE ('-' for stdin) and save it as the next revision, with an
    audited mutation record (actor, prior and new revision, hash, ids added, removed and
    changed) in the same transaction.

    With --expected-revision N the save is refused (exit 1, stale-revision, naming the
    revision that won) unless N is still current; with --scope-repo only that repository's
    slice may change (FILE may hold the whole set or only the slice). Nothing is written on
    any error.
    """
    snapshot = read_verified_policy_file(file, vocabulary=session().vocabulary())
    with open_policy_store(home, write=True) as store:
        written = _written(
            lambda: save_policies(
                store,
                snapshot.policies,
                saved_at=now_rfc3339(),
                actor=actor,
                expected_revision=expected_revision,
                scope=scope_repo,
                over_corrupt=over_corrupt,
                redactor=session().redactor(),
            )
        )
    _report(written, json_)


@policy.command(name="rollback")
@click.option(
    "--to",
    "target",
    required=True,
    type=click.IntRange(min=0, max=2**63 - 1),
    help="The revision whose set becomes the next revision (0: no policy).",
)
@_EXPECTED
@_SCOPE
@actor_option
@home_option
@json_option
def policy_rollback(
    target: int,
    expected_revision: int | None,
    scope_repo: str | None,
    actor: str | None,
    home: Path,
    json_: bool,
) -> None:
    """Save revision --to N's policy set as the next revision (history is never rewritten,
    so every recorded decision stays replayable; 0 is the empty set), audited like a save.

    What it brings back is checked like a save (credential-shaped values, validation); a
    revision that never existed or does not load is refused. Nothing is written on any error.
    """
    with open_policy_store(home, write=True) as store:
        written = _written(
            lambda: rollback_policies(
                store,
                to=target,
                saved_at=now_rfc3339(),
                actor=actor,
                expected_revision=expected_revision,
                scope=scope_repo,
                redactor=session().redactor(),
            )
        )
    _report(written, json_)


def _written(write: Callable[[], PolicyWrite]) -> PolicyWrite:
    """Run a policy write; its validation issues on stderr, then one Error line."""
    try:
        return write()
    except PolicyValidationError as e:
        for issue in e.issues:
            click.echo(issue_line(issue), err=True)
        total = len(e.issues) + e.omitted
        raise CommandError(f"{_count(total, e.omitted)}; nothing was saved") from e


def _report(written: PolicyWrite, json_: bool) -> None:
    saved, m = written.snapshot, written.mutation
    if json_:
        echo_json(
            {
                "revision": saved.revision,
                "content_hash": saved.content_hash,
                "policy_count": len(saved.policies),
                "prior_revision": m.prior_revision,
                "actor": m.actor,
                "added": list(m.added),
                "removed": list(m.removed),
                "changed": list(m.changed),
                "rollback_to": m.rollback_to,
                "scope_repo": m.scope,
            }
        )
        return
    what = "saved" if m.rollback_to is None else f"rolled back to revision {m.rollback_to} as"
    ids = ", ".join(
        f"{n} {name}"
        for n, name in (
            (len(m.added), "added"),
            (len(m.removed), "removed"),
            (len(m.changed), "changed"),
        )
    )
    note(
        printable(
            f"{what} revision {saved.revision}: {len(saved.policies):,} policies, "
            f"{saved.content_hash} (after revision {m.prior_revision}; {ids}; by {m.actor})"
        )
    )


@policy.command(name="show")
@click.option(
    "--rev",
    "revision",
    type=click.IntRange(min=1, max=2**63 - 1),
    help="Revision (default: current).",
)
@home_option
@json_option
def policy_show(revision: int | None, home: Path, json_: bool) -> None:
    """Show the current (or --rev N) policy revision and its load state."""
    with open_policy_store(home, write=False) as store:
        loaded = store.load_policies(revision)
    if json_:
        doc = loaded.snapshot.to_dict()
        doc["state"] = loaded.state
        doc["detail"] = loaded.detail
        echo_json(doc)
        return
    snap = loaded.snapshot
    emit(printable(f"state {loaded.state}, revision {snap.revision}, {snap.content_hash}"))
    if loaded.detail:
        emit(printable(f"detail: {loaded.detail}"))
    for pol in sorted(snap.policies, key=lambda p: p.id):
        flag = "" if pol.enabled else " (disabled)"
        emit(printable(f"  {pol.id} priority {pol.priority}{flag}"))


@policy.command(name="history")
@home_option
@json_option
def policy_history(home: Path, json_: bool) -> None:
    """List every saved revision, oldest first."""
    with open_policy_store(home, write=False) as store:
        rows = store.policy_history()
    if json_:
        echo_json([r.to_dict() for r in rows])
        return
    if not rows:
        emit("no revisions saved yet")
        next_step("nothing to show", "rensei policy save FILE")
    for r in rows:
        count = "?" if r.policy_count is None else f"{r.policy_count:,}"
        cells = (str(r.revision), str(r.saved_at), f"{count} policies", str(r.content_hash))
        emit("\t".join(printable(c) for c in cells))
