"""``rensei explain`` and ``rensei explain-batch``: resolve contexts and show why. Text output
escapes every non-printable character of a context (see :mod:`._output`)."""

from __future__ import annotations

from pathlib import Path

import click

from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import explain, record_trace
from ..core.snapshot.freshness import Freshness, StampedDecision, format_age
from ..errors import InputError, SnapshotError
from ._clock import now
from ._inputs import SOURCE, read_context, read_policy_file
from ._output import emit, held_notes, note, release_notes
from ._render import render_decision
from ._root import F, cli, echo_json, home_option, json_option
from ._session import session
from ._store import home_of, load_current_snapshot, record_decisions


def _refuse_unsaved_record(policies: Path | None, record: bool) -> None:
    """A recorded decision must cite what ``audit replay`` can find in this home (a policy
    revision it holds, or its cached snapshot): one resolved against an unsaved file could
    not be told from a forged one.

    Raises:
        click.UsageError: ``--record`` with ``--policies``.
    """
    if record and policies is not None:
        raise click.UsageError(
            "--record records decisions against this home's own policy revision or its cached "
            "snapshot (audit replay checks each against what it cites): save the file first "
            "(rensei policy save FILE), or drop --record for a dry run"
        )


def _snapshot(
    policies: Path | None, home: Path, cached: bool = False
) -> tuple[PolicySnapshot, str, Freshness]:
    """The snapshot to resolve against and its stamp: ``--snapshot`` (the host's cached ruleset
    snapshot, aged now), else ``--policies FILE``, else the store's current revision (live).

    Raises:
        ExpiredError: the cached snapshot is past RefuseAfter (a typed refusal, never a guess).
        SnapshotError: no cached snapshot, or it does not verify.
    """
    if cached:
        if policies is not None:
            raise click.UsageError("--snapshot and --policies are exclusive")
        # the host cache (and its signature checks) only where it is read
        from ..host.cache import host_cache
        from ..host.status import cached_snapshot

        snap, fresh = cached_snapshot(host_cache(home), now=now())
        bundle = snap.sections.get("policyBundle")
        try:
            policy_set = PolicySnapshot.from_dict(
                bundle, path="policyBundle", vocabulary=session().vocabulary()
            )
        except InputError as e:
            raise SnapshotError(f"cached snapshot {snap.ruleset_rev}: {e}") from e
        if fresh.degraded:
            note(
                f"warning: ruleset snapshot {snap.ruleset_rev} is degraded "
                f"(age {format_age(fresh.age_ms or 0)})"
            )
        return policy_set, policy_set.state(), fresh
    snapshot, state = _snapshot_live(policies, home)
    return snapshot, state, Freshness.live()


def _snapshot_live(policies: Path | None, home: Path) -> tuple[PolicySnapshot, str]:
    """``--policies FILE``, else the store's current revision."""
    if policies is not None:
        from ..core.routing.validation import validate_policies  # a file's: a store's is valid

        vocabulary = session().vocabulary()
        snapshot = read_policy_file(policies, vocabulary=vocabulary)
        state = snapshot.state()
        issues = (
            validate_policies(snapshot.policies, vocabulary=vocabulary) if state == "ok" else ()
        )
        if issues:
            note(
                f"warning: {policies} has {len(issues):,} validation issue(s) "
                f"(see rensei policy validate); resolving anyway"
            )
        return snapshot, state
    return load_current_snapshot(home)


def _trace_option(f: F) -> F:
    return click.option(
        "--trace",
        type=click.Choice(["auto", "full", "compact"]),
        default="auto",
        show_default=True,
        help="Explanation detail: every policy and account (full), the winner and its ties with "
        "the rest counted (compact), or full up to 256 policies (auto). With --record, auto "
        "is compact: a record carries the compact explanation and `rensei audit show SEQ "
        "--full` re-derives the full trace; --trace full stores it.",
    )(f)


def _policies_option(f: F) -> F:
    return click.option(
        "--policies",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Policy file to resolve against (default: the store's current revision); a dry "
        "run: not with --record.",
    )(f)


def _cached_option(f: F) -> F:
    return click.option(
        "--snapshot",
        "cached",
        is_flag=True,
        help="Resolve against the host's cached ruleset snapshot (rensei host sync); each "
        "decision then carries rulesetRev, snapshotAgeMs and degraded.",
    )(f)


def _record_option(f: F) -> F:
    return click.option(
        "--record",
        is_flag=True,
        help="Append each decision to the home's audit log (against the store's revision or "
        "the cached snapshot, never --policies).",
    )(f)


@cli.command(name="explain")
@click.argument("context", type=SOURCE, metavar="CONTEXT")
@_policies_option
@_cached_option
@_trace_option
@_record_option
@home_option
@json_option
def explain_cmd(
    context: str,
    policies: Path | None,
    cached: bool,
    trace: str,
    record: bool,
    home: Path,
    json_: bool,
) -> None:
    """Resolve one CONTEXT (a file, '-' for stdin, or inline JSON) and explain the decision."""
    _refuse_unsaved_record(policies, record)
    if record:
        # refuse before resolving: a decision that cannot be recorded is not shown
        home_of(home).info()
    vocabulary = session().vocabulary()
    ctx = read_context(context, vocabulary=vocabulary)
    snapshot, state, stamp = _snapshot(policies, home, cached)
    decision = explain(
        ctx,
        snapshot,
        snapshot_state=state,
        # What is shown is what is recorded: with --record, auto is the record's (compact).
        trace=record_trace(trace) if record else trace,  # type: ignore[arg-type]
        vocabulary=vocabulary,
        redactor=session().redactor(),  # the audit log's own: a stored id is over what is stored
    )
    stamped = StampedDecision(decision, stamp)
    if record:
        record_decisions(home, [stamped])
    if json_:
        echo_json(stamped.to_dict())
    else:
        emit(render_decision(decision, stamp))


@cli.command(name="explain-batch")
@click.argument("contexts", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@_policies_option
@_cached_option
@_trace_option
@_record_option
@home_option
def explain_batch_cmd(
    contexts: Path, policies: Path | None, cached: bool, trace: str, record: bool, home: Path
) -> None:
    """Resolve every context of a JSON Lines file against ONE snapshot; one JSON decision a line.

    Every line is read and checked before any decision is printed or recorded: the batch
    streams through temporary files and is published (recorded, then printed) only once the
    last line has been resolved, in constant memory at any size.
    """
    from ._batch import run_batch  # the streaming machinery, only where a batch runs

    _refuse_unsaved_record(policies, record)
    if record:
        home_of(home).info()
    vocabulary = session().vocabulary()
    # Notes about the snapshot wait until the input has been read: a bad line stays the one
    # line on stderr, as when the whole input was read before the snapshot was loaded.
    with held_notes() as held:
        snapshot, state, stamp = _snapshot(policies, home, cached)
    run_batch(
        str(contexts),
        snapshot=snapshot,
        state=state,
        stamp=stamp,
        trace=record_trace(trace) if record else trace,  # type: ignore[arg-type]
        vocabulary=vocabulary,
        home=home if record else None,
    )
    release_notes(held)
