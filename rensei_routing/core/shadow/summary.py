"""One line of what an audit record says (``rensei audit tail``): its kind, outcome, policy and
route, read from the stored payload of every kind of record the chain holds.

Pure and total: any payload (a kind this module does not know, a damaged or partial one) gets a
summary; a field that is absent reads ``-``. The record types are named by their wire values
(``claim-decision``, ``session-transition``, ...) because their constants live in the layers that
write them. It lives in the shadow domain because a shadow record's stored route is completed from
its context there (``compare.stored_actual``), and the audit domain may not read shadow records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .compare import stored_actual

__all__ = ["NONE", "RecordSummary", "summarize"]

#: What an absent field reads.
NONE: Final = "-"


@dataclass(frozen=True, slots=True)
class RecordSummary:
    """What one record says, each field one short text."""

    kind: str
    outcome: str
    policy: str
    route: str


def _text(value: Any) -> str:
    return NONE if value is None or value == "" else str(value)


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _route(model: Any, account: Any) -> str:
    if model is None and account is None:
        return NONE
    return f"{_text(model)} via {_text(account)}"


def _with_reason(outcome: Any, reason: Any) -> str:
    return _text(outcome) + ("" if reason in (None, "") else f"/{reason}")


def _decision(d: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        _with_reason(d.get("outcome"), d.get("reason")),
        _text(d.get("policy_id")),
        _route(d.get("effective_model"), d.get("account_id")),
    )


def _pool(payload: Mapping[str, Any], key: str) -> str:
    project = payload.get("project")
    return f"pool {_text(payload.get(key))}" + ("" if project is None else f" project {project}")


def _summary(payload: Any) -> RecordSummary:
    if not isinstance(payload, Mapping):
        return RecordSummary("record", NONE, NONE, NONE)
    kind = payload.get("record_type")
    if kind is None and "decision_id" in payload:
        return RecordSummary("decision", *_decision(payload))
    if kind == "shadow-decision":
        proposed = payload.get("proposed")
        outcome, policy, route = _decision(proposed if isinstance(proposed, Mapping) else {})
        agreed = (
            "agreed"
            if payload.get("agreed") is True
            else f"diverged:{_text(payload.get('divergence'))}"
        )
        actual = stored_actual(payload)
        legacy = _route(_get(actual, "model"), _get(actual, "account_id"))
        mechanism = _get(actual, "mechanism")
        legacy += "" if mechanism is None else f" ({mechanism})"
        return RecordSummary("shadow", f"{agreed} {outcome}", policy, f"{route}; legacy {legacy}")
    if kind == "claim-decision":
        outcome = "admitted" if payload.get("admitted") is True else "refused"
        return RecordSummary(
            "claim",
            _with_reason(outcome, payload.get("reason")),
            _text(payload.get("rulesetRev")),
            _pool(payload, "pool_id"),
        )
    if kind == "authorization-decision":
        outcome = "allowed" if payload.get("allowed") is True else "denied"
        ids = payload.get("policy_ids")
        policy = ", ".join(map(str, ids)) if isinstance(ids, list) and ids else NONE
        return RecordSummary(
            "authorization",
            _with_reason(outcome, payload.get("reason")),
            policy if policy != NONE else _text(_get(payload, "context", "rulesetRev")),
            f"{_text(payload.get('action'))} on {_text(payload.get('resource'))}",
        )
    if kind == "session-transition":
        return RecordSummary(
            "session",
            _with_reason(
                f"{_text(payload.get('from'))}->{_text(payload.get('to'))}", payload.get("reason")
            ),
            _text(payload.get("rulesetRev")),
            f"{_pool(payload, 'pool')} session {_text(payload.get('session_id'))}",
        )
    if kind == "policy-mutation":
        counts = (_get(payload, k) for k in ("added", "removed", "changed"))
        ids = "/".join(
            f"{sign}{len(n) if isinstance(n, list) else NONE}"
            for sign, n in zip("+-~", counts, strict=True)
        )
        target = payload.get("rollback_to")
        action = _text(payload.get("action")) + ("" if target is None else f"@{target}")
        revisions = f"{_text(payload.get('prior_revision'))}->{_text(payload.get('revision'))}"
        return RecordSummary(
            "policy", f"{action}:{revisions}", ids, f"by {_text(payload.get('actor'))}"
        )
    if kind == "hydraflow-import":
        inner = _summary(payload.get("payload"))
        chain, seq = _get(payload, "origin", "chain"), _get(payload, "origin", "seq")
        origin = f"{_text(chain)}#{_text(seq)}"
        return RecordSummary(
            f"import ({inner.kind})", inner.outcome, inner.policy, f"{inner.route}; from {origin}"
        )
    return RecordSummary(_text(kind or payload.get("decision_class") or "record"), NONE, NONE, NONE)


def summarize(payload: Any, *, error: str | None = None) -> RecordSummary:
    """The summary of a record's payload; ``error`` (the payload did not parse) makes it an
    ``UNPARSEABLE`` record whose outcome says why."""
    if error is not None:
        return RecordSummary("UNPARSEABLE", error, NONE, NONE)
    return _summary(payload)
