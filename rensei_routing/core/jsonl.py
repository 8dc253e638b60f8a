"""One decision as one compact JSON line, written directly: the text of
``json.dumps(decision.to_dict(), ensure_ascii=False, separators=(",", ":"))`` (keys in
``to_dict`` order, not sorted) without building the dicts. Pure: no I/O.

``explain-batch`` prints one such line per context; building the nested dicts and walking them
with the generic encoder cost more than resolving the decision. Pieces shared across a batch
(trace entries, account entries) keep their text. The tests check the text equals the generic
encoder's on generated decisions.
"""

from __future__ import annotations

from json.encoder import encode_basestring as _e
from typing import Final

from .decision import ConsideredPolicy, RouteDecision
from .freshness import Freshness

__all__ = ["decision_line"]

_LIVE: Final = ',"rulesetRev":null,"snapshotAgeMs":null,"degraded":false}'


def _s(value: str | None) -> str:
    return "null" if value is None else str(_e(value))


def _n(value: int | None) -> str:
    return "null" if value is None else str(value)


def _considered(entry: ConsideredPolicy) -> str:
    text = entry._display
    if text is None:
        text = (
            f'{{"policy_id":{_e(entry.policy_id)},"precedence_level":{entry.precedence_level},'
            f'"priority":{entry.priority},"matched":{"true" if entry.matched else "false"},'
            f'"reason":{_e(entry.reason)}}}'
        )
        object.__setattr__(entry, "_display", text)
    return text


def decision_line(decision: RouteDecision, stamp: Freshness | None = None) -> str:
    """The compact JSON of ``decision.to_dict()``, or with ``stamp`` of
    ``StampedDecision(decision, stamp).to_dict()`` (the stamp's three members last)."""
    d = decision
    ex = d.explanation
    rejected = ",".join(
        f'{{"account_id":{_e(r.account_id)},"reason":{_e(r.reason)}}}' for r in ex.rejected_accounts
    )
    text = (
        f'{{"decision_id":{_e(d.decision_id)},"outcome":{_e(d.outcome)},'
        f'"reason":{_e(d.reason)},"policy_source":{_e(d.policy_source)},'
        f'"policy_id":{_s(d.policy_id)},"policy_revision":{d.policy_revision},'
        f'"snapshot_hash":{_e(d.snapshot_hash)},"snapshot_state":{_e(d.snapshot_state)},'
        f'"precedence_level":{_n(d.precedence_level)},'
        f'"precedence_priority":{_n(d.precedence_priority)},'
        f'"account_id":{_s(d.account_id)},"provider_binding":{_s(d.provider_binding)},'
        f'"effective_model":{_s(d.effective_model)},'
        f'"explanation":{{"context":{ex.context.display_text()},'
        f'"considered":[{",".join(_considered(c) for c in ex.considered)}],'
        f'"eligible_account_ids":[{",".join(_e(i) for i in ex.eligible_account_ids)}],'
        f'"rejected_accounts":[{rejected}],'
        f'"conflicting_policy_ids":[{",".join(_e(i) for i in ex.conflicting_policy_ids)}],'
        f'"unlisted_policy_count":{ex.unlisted_policy_count}'
        + (
            f',"unlisted_outranked_count":{ex.unlisted_outranked_count}}}'
            if ex.unlisted_outranked_count
            else "}"
        )
    )
    if stamp is None:
        return text + "}"
    if stamp.ruleset_rev is None and stamp.age_ms is None and not stamp.degraded:
        return text + _LIVE
    return (
        f'{text},"rulesetRev":{_s(stamp.ruleset_rev)},"snapshotAgeMs":{_n(stamp.age_ms)},'
        f'"degraded":{"true" if stamp.degraded else "false"}}}'
    )
