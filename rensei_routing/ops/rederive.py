"""The full trace of a recorded decision, re-derived on demand (``rensei audit show SEQ --full``,
the console's decision page): a record carries a compact explanation by default, and the full
per-policy trace is what the resolver gives again for the stored context against the policy
revision the record cites, the same path ``rensei audit replay`` takes (:class:`.replay.Sources`
finds the revision; :func:`~rensei_routing.core.routing.resolver.explain` decides).

The trace is shown only when the replayed decision agrees with the record on everything replay
compares (outcome, reason, policy, account, model, decision id): a trace of another decision
would explain nothing. The result is what a record made with the full trace would have stored:
the stored payload, its decision's explanation replaced by the full one, redacted by the log's
redactor. Never writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..core.audit.replay import (
    DECISION,
    DECISION_FIELDS,
    ENFORCED,
    SHADOW,
    decision_of,
    decisive_redaction,
    first_difference,
)
from ..core.canonical import canonical_bytes
from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..core.routing.decision import STATE_OK, RouteDecision
from ..core.routing.resolver import explain
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..errors import InputError, TraceUnavailableError
from .replay import Sources

__all__ = ["FullTrace", "full_trace", "is_full"]

_COUNTS: Final = ("unlisted_policy_count", "unlisted_outranked_count")


@dataclass(frozen=True, slots=True, kw_only=True)
class FullTrace:
    """A recorded decision with its full trace: ``payload`` is the record's payload as a
    full-trace record stores it, ``decision`` the decision in it, ``rederived`` whether the
    trace was re-derived (``False``: the record stored it), ``revision`` the policy revision it
    was decided under."""

    payload: Any
    decision: RouteDecision
    rederived: bool
    revision: int


def is_full(explanation: Mapping[str, Any]) -> bool:
    """Whether a stored explanation lists every policy (no ``trace`` marker, nothing counted)."""
    return "trace" not in explanation and not any(explanation.get(k) for k in _COUNTS)


def full_trace(
    payload: Any,
    sources: Sources,
    *,
    where: str,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> FullTrace:
    """The full trace of the decision ``payload`` (a stored audit payload; ``where`` names it
    in messages, say ``record 12``) carries.

    Raises:
        TraceUnavailableError: the payload carries no decision, the revision it cites is not
            held here or changed, or the decision replayed from it differs from the record.
    """
    found = decision_of(payload)
    if found is None:
        raise TraceUnavailableError(f"{where} holds no routing decision: no trace to re-derive")
    kind, fields = found
    explanation = fields["explanation"]
    try:
        stored = RouteDecision.from_dict(fields, path=where, vocabulary=vocabulary, redacted=True)
    except InputError as e:
        raise TraceUnavailableError(f"{where}: {e}") from e
    if is_full(explanation):
        return FullTrace(
            payload=payload, decision=stored, rederived=False, revision=stored.policy_revision
        )
    ruleset_rev = payload.get("rulesetRev") if kind == DECISION else None
    policies = sources.policies(
        stored.policy_revision,
        stored.snapshot_hash,
        ruleset_rev if isinstance(ruleset_rev, str) else None,
        fields.get("snapshot_state", STATE_OK),
    )
    if policies.unreplayable is not None:
        raise TraceUnavailableError(f"cannot re-derive {where}'s trace: {policies.unreplayable}")
    if policies.mismatch is not None or policies.snapshot is None:
        raise TraceUnavailableError(
            f"cannot re-derive {where}'s trace: the policies it cites changed here "
            f"({policies.mismatch}); run `rensei audit replay`"
        )
    decision = explain(
        stored.explanation.context,
        policies.snapshot,
        snapshot_state=policies.state,
        vocabulary=vocabulary,
        trace="full",
        redactor=redactor,
    )
    replayed = {name: getattr(decision, name) for name in DECISION_FIELDS}
    differs = first_difference(fields, replayed, DECISION_FIELDS)
    if differs is not None:
        lost = decisive_redaction(
            explanation["context"],
            policy_source=decision.policy_source,
            applied=decision.policy_id is not None,
        )
        why = "redaction removed an input it read" if lost else f"it differs on {differs}"
        raise TraceUnavailableError(
            f"cannot re-derive {where}'s trace: the decision replayed from it is not the "
            f"recorded one ({why}); run `rensei audit replay`"
        )
    full = dict(fields)
    full["explanation"] = decision.explanation.to_dict()
    member = {SHADOW: "proposed", ENFORCED: "decision"}.get(kind)
    rebuilt: Any = full if member is None else {**payload, member: full}
    return FullTrace(
        payload=json.loads(canonical_bytes(redactor.redact(rebuilt))),  # as stored: keys sorted
        decision=decision,
        rederived=True,
        revision=stored.policy_revision,
    )
