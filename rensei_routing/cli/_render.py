"""Text the commands print, shared between them: verify verdicts, agreement tables, what-if
summaries, authorization outcomes, validation issues, a decision's explanation. Pure
formatting: reads nothing, prints nothing (the commands print what these return).
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING, Final

from ..core.timestamps import format_age
from ._output import printable

if TYPE_CHECKING:  # types only: `host status` imports this module and must start light
    from ..core.audit.chain import VerifyResult
    from ..core.routing.decision import RouteDecision
    from ..core.routing.validation import ValidationIssue
    from ..core.shadow.report import ReportRow
    from ..core.shadow.whatif import Example, WhatIfSummary
    from ..core.snapshot.authz import AuthorizationDecision
    from ..core.snapshot.freshness import Freshness
    from ..store.audit.chainwalk import ChainVerdict


def verdict_line(result: VerifyResult) -> str:
    if result.ok:
        return (
            f"intact: {result.records_checked:,} records, head {result.head_hash}, "
            f"{result.checkpoints_checked:,} checkpoint(s) checked"
        )
    where = "checkpoint" if result.first_broken_seq is None else f"seq {result.first_broken_seq}"
    return printable(f"broken at {where}: {result.reason}: {result.detail}")


def chain_line(verdict: ChainVerdict) -> str:
    """:func:`verdict_line`, or for a chain cut into segments (or pruned) what it proved:
    ``intact: N records in K segments, seq A..B, head H, C checkpoint(s) checked`` and, after
    a prune, ``; anchored at seq S (pruned segments ...)``."""
    result = verdict.result
    if not result.ok or (not verdict.sealed and not verdict.pruned):
        return verdict_line(result)
    first, last = verdict.first_seq, result.records_checked - 1
    span = f"seq {first:,}..{last:,}" if last >= first else f"no records from seq {first:,}"
    line = (
        f"intact: {verdict.records:,} records in {verdict.segments} segments, {span}, "
        f"head {result.head_hash}, {result.checkpoints_checked:,} checkpoint(s) checked"
    )
    if verdict.anchor is not None:
        names = ", ".join(s.name for s in verdict.pruned)
        line += f"; anchored at seq {first:,} (pruned segments {names})"
    return line


def tally_line(row: ReportRow) -> str:
    div = ", ".join(f"{k} {v:,}" for k, v in row.divergence if k != "none" and v)
    return (
        f"agreed {row.agreed:,} ({_pct(row.agreement_rate)}); divergence: {div or 'none'}; "
        f"held {row.held:,}, rejected {row.rejected:,}; direct-http {row.direct_http:,} "
        f"({_pct(row.direct_http_share)})"
    )


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


#: The label spanning the divergence columns: they count kinds of disagreement.
SPAN_LABEL: Final = "disagreed with the legacy route, by kind"


def _divergences() -> tuple[str, ...]:
    """The divergence kinds a report counts (the shadow comparison, imported where a report
    is rendered: ``rensei explain`` shows none)."""
    from ..core.shadow.compare import DIVERGENCES

    return tuple(k for k in DIVERGENCES if k != "none")


def _header(divergences: tuple[str, ...]) -> tuple[str, ...]:
    return (
        "spawns",
        "agreed",
        "rate",
        *divergences,
        "direct-http",
        "share",
        "held",
        "rejected",
    )


def _span_line(widths: list[int], divergences: tuple[str, ...]) -> str:
    """A line over the header naming what the divergence columns count, as wide as they are."""
    first = _header(divergences).index("provider") + 1  # + the group column
    columns = len(divergences)
    start = sum(widths[:first]) + 2 * first
    end = first + columns
    width = sum(widths[first:end]) + 2 * (columns - 1)
    label = f" {SPAN_LABEL} "
    return " " * start + (label.center(width, "-") if len(label) < width else label.strip())


def render_report(by: str | None, rows: tuple[ReportRow, ...], total: ReportRow) -> str:
    """The report as an aligned text table: a line naming the divergence columns as kinds of
    disagreement, the header, one row per group and a total row."""
    divergences = _divergences()
    table: list[tuple[str, ...]] = [(by or "group", *_header(divergences))]

    def cells(row: ReportRow) -> tuple[str, ...]:
        div = dict(row.divergence)
        return (
            printable(row.group),
            f"{row.spawns:,}",
            f"{row.agreed:,}",
            _pct(row.agreement_rate),
            *(f"{div[k]:,}" for k in divergences),
            f"{row.direct_http:,}",
            _pct(row.direct_http_share),
            f"{row.held:,}",
            f"{row.rejected:,}",
        )

    table.extend(cells(r) for r in rows)
    if by is not None:
        table.append(cells(total))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = [_span_line(widths, divergences)]
    for r in table:
        first = r[0].ljust(widths[0])
        lines.append(
            "  ".join([first, *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))])
        )
    return "\n".join(lines)


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


def _short(decision_id: str) -> str:
    return decision_id.removeprefix("sha256:")[:12]


def _example_text(examples: tuple[Example, ...]) -> str:
    return ", ".join(f"seq {e.seq} {_short(e.before_id)}->{_short(e.after_id)}" for e in examples)


def render_summary(summary: WhatIfSummary) -> str:
    """The comparison as text: counters, the before/after matrix, the changed cells."""
    from ..core.shadow.whatif import COUNTERS

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


def issue_line(issue: ValidationIssue) -> str:
    cells = (issue.code, issue.policy_id or "-", issue.detail)
    return "\t".join(printable(c) for c in cells)


def render_decision(decision: RouteDecision, stamp: Freshness | None = None) -> str:
    """A readable, self-contained explanation of one decision
    (:func:`~rensei_routing.core.routing.explain_text.decision_lines`, which the console shows
    too). Each line is made printable on its own, so a value holding a newline, carriage return
    or escape sequence can neither drive the terminal nor forge a line."""
    from ..core.routing.explain_text import decision_lines

    ruleset = None
    if stamp is not None and stamp.ruleset_rev is not None:
        flag = ", degraded" if stamp.degraded else ""
        ruleset = (
            f"{stamp.ruleset_rev} (cached snapshot, age {format_age(stamp.age_ms or 0)}{flag})"
        )
    return "\n".join(printable(line) for line in decision_lines(decision, ruleset=ruleset))
