"""A decision as explanation text: the lines ``rensei explain`` prints and the console shows.

Pure: builds strings from a :class:`~.decision.RouteDecision`; escaping for a terminal or for
HTML is the caller's.
"""

from __future__ import annotations

from typing import Final

from .decision import RouteDecision
from .policy import RUNG_NAMES

__all__ = ["decision_lines"]

_MARK: Final = {"matched": "+", "outranked": "~"}


def decision_lines(
    decision: RouteDecision,
    *,
    ruleset: str | None = None,
    full_hint: str = "--trace full lists them",
) -> list[str]:
    """The lines of a readable, self-contained explanation of one decision (``rensei
    explain`` prints them, the console's decision page shows them): outcome and reason, the
    policy, the route, conflicts, the snapshot, ``ruleset`` (a cached snapshot's description,
    when the decision was made against one), the decision id, the policies considered and the
    accounts. Raw text: the caller escapes it for its medium. A compact explanation says what
    it does not list, and ``full_hint`` where the full trace is found (a recorded decision's:
    ``rensei audit show SEQ --full``)."""
    lines = [f"{decision.outcome}: {decision.reason}"]
    if decision.policy_id is not None:
        rung = decision.precedence_level
        lines.append(
            f"  policy      {decision.policy_id} (rung {rung}: {RUNG_NAMES.get(rung or 0, '?')}, "
            f"priority {decision.precedence_priority}) [{decision.policy_source}]"
        )
    else:
        lines.append(f"  source      {decision.policy_source}")
    if decision.outcome == "selected":
        model = decision.effective_model or "(account default)"
        lines.append(
            f"  route       account {decision.account_id or '-'}, "
            f"binding {decision.provider_binding or '-'}, model {model}"
        )
    ex = decision.explanation
    if ex.conflicting_policy_ids:
        lines.append(f"  conflict    tied policies: {', '.join(ex.conflicting_policy_ids)}")
    lines.append(
        f"  snapshot    revision {decision.policy_revision}, {decision.snapshot_state}, "
        f"{decision.snapshot_hash}"
    )
    if ruleset is not None:
        lines.append(f"  ruleset     {ruleset}")
    lines.append(f"  decision    {decision.decision_id}")
    if ex.considered or ex.unlisted_policy_count or ex.unlisted_outranked_count:
        lines.append("policies (best first):")
        for c in ex.considered:
            mark = _MARK.get(c.reason, "x")
            lines.append(
                f"  {mark} {c.policy_id:<28} rung {c.precedence_level} "
                f"priority {c.priority:<5} {c.reason}"
            )
        if ex.unlisted_outranked_count:
            lines.append(
                f"  ({ex.unlisted_outranked_count} more matched but were outranked; {full_hint})"
            )
        if ex.unlisted_policy_count:
            lines.append(f"  ({ex.unlisted_policy_count} more did not match; {full_hint})")
    if ex.compact and decision.policy_id is not None:
        lines.append(f"accounts: not listed in a compact explanation ({full_hint})")
    if ex.eligible_account_ids or ex.rejected_accounts:
        lines.append("accounts:")
        for i, account in enumerate(ex.eligible_account_ids):
            chosen = " (chosen)" if account == decision.account_id and i == 0 else ""
            lines.append(f"  + {account} eligible{chosen}")
        for r in ex.rejected_accounts:
            lines.append(f"  x {r.account_id}: {r.reason}")
    return lines
