"""``rensei policy ...``: validate a policy file, save it as a revision, show and list revisions.
Text output escapes every non-printable character of a policy (see :mod:`._output`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..control.policy_writes import rollback_policies, save_policies
from ..core.routing.decision import STATE_OK
from ..core.routing.matrix import CELL_COLUMNS, MatrixCell
from ..core.routing.policy import PolicySnapshot
from ..core.routing.structure import read_policy_document
from ..core.routing.validation import MAX_ISSUES, ValidationIssue, validate
from ..errors import (
    InputError,
    MalformedError,
    MatrixError,
    PolicyValidationError,
    StoreError,
)
from ..ops.matrix import MatrixRequest, blast_radius, compare, load_set, matrix_of
from ..store.control import ControlStore, PolicyWrite
from ..store.policies import SnapshotLoad
from ._inputs import POLICY_REVISION, read_json, read_verified_policy_file
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
    """Policy sets: validate, save as revisions, roll back, the route matrix and blast radius,
    import, export, show, history."""


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
    _write(
        home,
        json_,
        lambda store: save_policies(
            store,
            snapshot.policies,
            saved_at=now_rfc3339(),
            actor=actor,
            expected_revision=expected_revision,
            scope=scope_repo,
            over_corrupt=over_corrupt,
            redactor=session().redactor(),
        ),
    )


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
    _write(
        home,
        json_,
        lambda store: rollback_policies(
            store,
            to=target,
            saved_at=now_rfc3339(),
            actor=actor,
            expected_revision=expected_revision,
            scope=scope_repo,
            redactor=session().redactor(),
        ),
    )


def _write(home: Path, json_: bool, write: Callable[[ControlStore], PolicyWrite]) -> None:
    """Run a policy write (``save``, ``rollback``) on the home's store and report it with its
    blast radius; validation issues go to stderr, then one Error line."""
    with open_policy_store(home, write=True) as store:
        try:
            written = write(store)
        except PolicyValidationError as e:
            for issue in e.issues:
                click.echo(issue_line(issue), err=True)
            total = len(e.issues) + e.omitted
            raise CommandError(f"{_count(total, e.omitted)}; nothing was saved") from e
        radius = save_blast_radius(
            store, written.mutation.prior_revision, written.snapshot.revision
        )
    _report(written, json_, radius)


def _report(written: PolicyWrite, json_: bool, radius: dict[str, Any]) -> None:
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
                "blast_radius": radius,
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
    note(str(radius["summary"]))


@policy.command(name="show")
@POLICY_REVISION
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


# -- the route matrix and the blast radius (docs/route-matrix.md) -------------------------------


def save_blast_radius(store: ControlStore, before: int, after: int) -> dict[str, Any]:
    """What ``policy save`` reports about the revision it saved: the blast radius of moving
    from ``before`` to ``after`` (``summary`` one line, the rest the cells), or why there is
    none (``not_computed``: the revision it replaced is corrupt or cannot be read, or the cells
    pass the bound). Never raises a refusal: the save is already committed."""
    try:
        radius = blast_radius(store.load_policies, before, after, vocabulary=session().vocabulary())
    except (StoreError, MatrixError) as e:
        why = str(e)
        return {"summary": f"blast radius not computed: {why}", "not_computed": why}
    return {"summary": radius.summary(), **radius.to_dict()}


def _cell_row(cell: MatrixCell) -> tuple[str, ...]:
    d = cell.to_dict()
    req = cell.requirement
    return (
        cell.repo or "-",
        str(d["repo_class"]),
        cell.role,
        cell.face,
        f"{req.kind}:{req.value}",
        cell.outcome,
        cell.reason,
        cell.provider or "-",
        cell.account or "-",
        cell.model or "-",
        cell.policy_id or "-",
        "-" if cell.rung is None else str(cell.rung),
    )


def _against_set(against: str) -> PolicySnapshot | int:
    """``--against``: a revision number, or a candidate policy FILE (validated)."""
    if against.isdigit():
        return int(against)
    vocabulary = session().vocabulary()
    snapshot = read_verified_policy_file(Path(against), vocabulary=vocabulary)
    report = validate(snapshot.policies, vocabulary=vocabulary)
    if not report:
        first = report.issues[0]
        raise CommandError(
            f"{against}: {_count(report.total, report.omitted)}, first: "
            f"{first.code} [{first.policy_id or '-'}]: {first.detail}"
        )
    return snapshot


@policy.command(name="matrix")
@click.option(
    "--rev",
    "revision",
    type=click.IntRange(min=0, max=2**53 - 1),
    help="Revision to show (default: current; 0 is the empty set).",
)
@click.option("--repo", default=None, help="One repository, owner/name (default: none).")
@click.option("--repo-class", "repo_classes", multiple=True, help="Repo class axis (repeat).")
@click.option("--role", "roles", multiple=True, help="Role axis (repeat; default: every role).")
@click.option(
    "--face", "faces", multiple=True, help="Request face axis (repeat; default: agentic, one-shot)."
)
@click.option(
    "--requirement",
    "requirements",
    multiple=True,
    help="Requirement axis, a family or class name or KIND:VALUE (repeat).",
)
@click.option(
    "--against",
    default=None,
    metavar="M|FILE",
    help="Diff: before = revision M (after = the shown one), or after = FILE (before = shown).",
)
@home_option
@json_option
def policy_matrix(
    revision: int | None,
    repo: str | None,
    repo_classes: tuple[str, ...],
    roles: tuple[str, ...],
    faces: tuple[str, ...],
    requirements: tuple[str, ...],
    against: str | None,
    home: Path,
    json_: bool,
) -> None:
    """The effective-route matrix: every repo class x role x face x requirement cell of one
    revision, resolved against it in one batch; with --against, the cells that move (the
    blast radius).

    A cell no policy claims is 'unmanaged' (legacy routing decides it). At most 5,000 cells;
    narrow a larger one with the axis options. Reads only (docs/route-matrix.md).
    """
    request = MatrixRequest(
        repo=repo,
        roles=roles,
        faces=faces,
        requirements=requirements,
        repo_classes=repo_classes,
    )
    vocabulary = session().vocabulary()
    other = None if against is None else _against_set(against)
    with open_policy_store(home, write=False) as store:
        shown = load_set(store.load_policies, revision)
        before = load_set(store.load_policies, other) if isinstance(other, int) else shown
    radius = None
    if other is None:
        matrix = matrix_of(lambda _: _as_ok(shown), None, request, vocabulary=vocabulary)
    elif isinstance(other, int):
        matrix, radius = compare(before, shown, request, vocabulary=vocabulary)
    else:
        matrix, radius = compare(shown, other, request, vocabulary=vocabulary)
    if json_:
        doc = matrix.to_dict()
        if radius is not None:
            doc = {"matrix": doc, "blast_radius": radius.to_dict()}
        echo_json(doc)
        return
    if radius is None:
        emit("\t".join(CELL_COLUMNS))
        for cell in matrix.cells:
            emit("\t".join(printable(c) for c in _cell_row(cell)))
        counts = ", ".join(f"{n} {o}" for o, n in matrix.counts().items())
        emit(printable(f"revision {matrix.revision}: {len(matrix.cells)} cells ({counts})"))
        return
    for change in radius.changes:
        emit(
            printable(
                f"{change.after.label()}: {change.before.summary()} -> {change.after.summary()}"
            )
        )
    emit(printable(radius.summary()))


def _as_ok(snapshot: PolicySnapshot) -> SnapshotLoad:
    return SnapshotLoad(state=STATE_OK, snapshot=snapshot)
