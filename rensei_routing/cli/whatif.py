"""``rensei policy whatif``: re-explain the contexts recorded in the audit chain against the
current revision and against a candidate policy set, and show what would change. Must not hold
routing rules (core) or SQL (store).

Contexts come from shadow records (``proposed.explanation.context``) and from plain recorded
decisions (``explanation.context``); every recorded spawn counts, duplicates included (a
context recorded twice is two spawns). The chain is streamed in chunks, so memory stays flat
beyond the matrix. The chain is not verified here (``rensei audit verify`` does that): a
what-if is a forecast, not evidence.
"""

from __future__ import annotations

import datetime as dt
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import click

from ..core.context import RouteContext
from ..core.policy import PolicySnapshot
from ..core.resolver import explain_batch
from ..core.validation import validate_policies
from ..core.whatif import COUNTERS, Example, WhatIf, WhatIfSummary
from ..errors import InputError
from ..store.audit import AuditLog
from ..store.home import Home
from ._inputs import read_verified_policy_file
from ._root import CommandError, echo_json, home_option, json_option
from ._store import open_policy_store
from .policy import policy
from .shadow import recorded_since, since_option

#: Contexts explained per chunk (two ``explain_batch`` calls each).
CHUNK: Final = 2_000
_NAMES: Final = {
    "changed": "changed",
    "moved_provider": "would move provider",
    "moved_model": "would move model",
    "moved_account": "would move account",
    "policy_changed": "winning policy changes",
    "newly_held": "newly held",
    "newly_rejected": "newly rejected",
    "newly_selected": "newly selected",
}


class ChangeFoundError(CommandError):
    """``whatif --fail-on-change`` found a decision that would change: exit 1."""

    exit_code = 1


def context_of(payload: Any) -> Any | None:
    """The context document a recorded payload carries (a shadow record's proposed decision's,
    or a plain decision's), or ``None`` for a payload that carries none."""
    if not isinstance(payload, dict):
        return None
    decision = payload.get("proposed") if payload.get("record_type") else payload
    if not isinstance(decision, dict) or "decision_id" not in decision:
        return None
    explanation = decision.get("explanation")
    return explanation.get("context") if isinstance(explanation, dict) else None


def recorded_contexts(
    log: AuditLog,
    *,
    since: dt.datetime | None,
    limit: int | None,
    skipped: list[int],
) -> Iterator[tuple[int, RouteContext]]:
    """``(seq, context)`` of every recorded context at or after ``since``; with ``limit``, the
    ``limit`` most recent, newest first. Records that carry none, or whose context no longer
    reads, are appended to ``skipped``."""
    taken = 0
    for record in log.records(newest_first=limit is not None):
        if limit is not None and taken >= limit:
            return
        if not recorded_since(record, since):
            continue
        try:
            doc = context_of(record.payload)
            if doc is None:
                skipped.append(record.seq)
                continue
            context = RouteContext.from_dict(doc, path=f"audit[{record.seq}].context")
        except InputError:
            skipped.append(record.seq)
            continue
        taken += 1
        yield record.seq, context


def compare_chain(
    log: AuditLog,
    current: tuple[PolicySnapshot, str],
    candidate: PolicySnapshot,
    *,
    since: dt.datetime | None = None,
    limit: int | None = None,
    examples: int = 3,
    skipped: list[int] | None = None,
) -> WhatIfSummary:
    """Explain every recorded context against ``current`` and ``candidate``, in chunks."""
    acc = WhatIf(examples=examples)
    snapshot, state = current
    chunk: list[tuple[int, RouteContext]] = []
    out = [] if skipped is None else skipped

    def flush() -> None:
        contexts = [c for _, c in chunk]
        before = explain_batch(contexts, snapshot, snapshot_state=state)
        after = explain_batch(contexts, candidate, snapshot_state="ok")
        for (seq, _), b, a in zip(chunk, before, after, strict=True):
            acc.add(seq, b, a)
        chunk.clear()

    for item in recorded_contexts(log, since=since, limit=limit, skipped=out):
        chunk.append(item)
        if len(chunk) >= CHUNK:
            flush()
    if chunk:
        flush()
    return acc.summary()


def _short(decision_id: str) -> str:
    return decision_id.removeprefix("sha256:")[:12]


def _example_text(examples: tuple[Example, ...]) -> str:
    return ", ".join(f"seq {e.seq} {_short(e.before_id)}->{_short(e.after_id)}" for e in examples)


def render_summary(summary: WhatIfSummary) -> str:
    """The comparison as text: counters, the before/after matrix, the changed cells."""
    total = summary.contexts
    lines = []
    width = max(len(v) for v in _NAMES.values())
    ex = dict(summary.examples)
    for name in COUNTERS:
        n = summary.count(name)
        share = f" ({n / total * 100:.1f}%)" if name == "changed" and total else ""
        tail = f"   e.g. {_example_text(ex[name])}" if n and ex[name] else ""
        lines.append(f"  {_NAMES[name]:<{width}}  {n:>9,}{share}{tail}")
    labels = sorted({c.before for c in summary.cells} | {c.after for c in summary.cells})
    codes = {lab: string.ascii_uppercase[i] if i < 26 else str(i) for i, lab in enumerate(labels)}
    lines.append("")
    lines.append("outcome/reason:")
    lines.extend(f"  {codes[lab]}  {lab}" for lab in labels)
    grid = {(c.before, c.after): c for c in summary.cells}
    counts = [f"{c.count:,}" for c in summary.cells]
    cw = max([len(x) for x in counts] + [1]) + 1
    lines.append("")
    lines.append("before \\ after " + "".join(codes[a].rjust(cw) for a in labels))
    for b in labels:
        row = []
        for a in labels:
            cell = grid.get((b, a))
            row.append(("." if cell is None else f"{cell.count:,}").rjust(cw))
        lines.append(f"{codes[b]:<14} " + "".join(row))
    changed = [c for c in summary.cells if c.changed]
    if changed:
        lines.append("")
        lines.append(
            "changed cells (before -> after: changed of count; examples seq before->after):"
        )
        for c in changed:
            lines.append(
                f"  {codes[c.before]} -> {codes[c.after]}  {c.changed:,} of {c.count:,}   "
                f"{_example_text(c.examples)}"
            )
    return "\n".join(lines)


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
    proposed = read_verified_policy_file(candidate)
    issues = validate_policies(proposed.policies)
    if issues:
        for issue in issues:
            click.echo(f"{issue.code}\t{issue.policy_id or '-'}\t{issue.detail}", err=True)
        raise CommandError(f"{len(issues)} validation issue(s) in {candidate}; nothing compared")
    where = Home(home)
    where.info()
    with open_policy_store(home, write=False) as store:
        loaded = store.load()
    if loaded.detail:
        click.echo(f"warning: {loaded.detail}", err=True)
    skipped: list[int] = []
    with AuditLog.open(where) as log:
        summary = compare_chain(
            log,
            (loaded.snapshot, loaded.state),
            proposed,
            since=since,
            limit=limit,
            examples=examples,
            skipped=skipped,
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
        click.echo("no recorded contexts" + ("" if since is None else " in that period"))
    else:
        click.echo(
            f"what-if over {summary.contexts:,} recorded contexts: current revision "
            f"{current.revision} ({loaded.state}) -> candidate {candidate} "
            f"({len(proposed.policies)} policies, {proposed.content_hash})"
        )
        click.echo(render_summary(summary))
    if skipped:
        click.echo(
            f"note: {len(skipped):,} record(s) carry no readable context (first: seq "
            f"{min(skipped)}); not counted",
            err=True,
        )
    if fail_on_change and summary.any_change:
        raise ChangeFoundError(
            f"{summary.count('changed'):,} of {summary.contexts:,} recorded spawns would change"
        )
