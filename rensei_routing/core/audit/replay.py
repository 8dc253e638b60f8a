"""Replay's rules (``rensei audit replay``): which recorded payloads carry a decision that can be
decided again, which fields must agree, and the tally a replay reports.

A chain that verifies proves its bytes; a replay proves its decisions: every recorded routing
decision (``explain --record``, ``explain-batch --record``, the policy side of a shadow record)
is resolved again from its stored context against the policy revision it cites, and every
recorded claim's grant check again against the snapshot it cites. Pure: the adapter fetches the
revisions and runs the resolver; this module compares and counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..redact import MARKER_PREFIX
from ..routing.context import MATCH_FIELDS
from ..routing.decision import SOURCE_LEGACY

__all__ = [
    "CLAIM",
    "DECISION",
    "DECISION_FIELDS",
    "ENFORCED",
    "SHADOW",
    "ReplaySummary",
    "claim_of",
    "decision_of",
    "decisive_redaction",
    "first_difference",
    "quick_decision",
]

DECISION: Final = "decision"
SHADOW: Final = "shadow"
ENFORCED: Final = "enforced"
#: The record types whose payload carries a routing decision, and the member that holds it.
_CARRIERS: Final = {
    "shadow-decision": (SHADOW, "proposed"),
    "enforced-decision": (ENFORCED, "decision"),
}
CLAIM: Final = "claim"
#: What a replayed routing decision must agree on, in the order a difference is named.
DECISION_FIELDS: Final = (
    "outcome",
    "reason",
    "policy_id",
    "account_id",
    "effective_model",
    "decision_id",
)
#: What a replayed claim's grant check must agree on.
CLAIM_FIELDS: Final = ("allowed", "reason")
GRANT_CHECK: Final = "grant-check"


def decision_of(payload: Any) -> tuple[str, Mapping[str, Any]] | None:
    """``(kind, decision)`` of a payload that carries a routing decision: a plain recorded
    decision, a shadow record's ``proposed`` decision, or an enforced decision record's
    ``decision``; ``None`` for anything else."""
    if not isinstance(payload, Mapping):
        return None
    kind, decision = DECISION, payload
    decision_member: Any = payload
    if "record_type" in payload:
        carrier = _CARRIERS.get(payload.get("record_type"))  # type: ignore[arg-type]
        if carrier is None:
            return None
        kind, member = carrier
        decision_member = payload.get(member)
    decision = decision_member
    if not isinstance(decision, Mapping) or not isinstance(decision.get("decision_id"), str):
        return None
    explanation = decision.get("explanation")
    if not isinstance(explanation, Mapping) or not isinstance(explanation.get("context"), Mapping):
        return None
    return kind, decision


def claim_of(payload: Any) -> tuple[str, str | None, str, Mapping[str, Any]] | None:
    """``(pool, project, rulesetRev, recorded grant-check outcome)`` of a claim record whose
    grant check ran against a snapshot; ``None`` for anything else (an expired or missing
    snapshot decided nothing to replay)."""
    if not isinstance(payload, Mapping) or payload.get("record_type") != "claim-decision":
        return None
    pool, project, rev = payload.get("pool_id"), payload.get("project"), payload.get("rulesetRev")
    authorization = payload.get("authorization")
    if not (isinstance(pool, str) and isinstance(rev, str) and isinstance(authorization, Mapping)):
        return None
    if project is not None and not isinstance(project, str):
        return None
    outcomes = authorization.get("authorizers")
    if not isinstance(outcomes, list):
        return None
    grant = next(
        (o for o in outcomes if isinstance(o, Mapping) and o.get("name") == GRANT_CHECK), None
    )
    return None if grant is None else (pool, project, rev, grant)


_SHADOW_HEAD: Final = '"proposed":{'
_EXPLANATION: Final = ',"explanation":{'
_OUTCOME: Final = ',"outcome":'


def quick_decision(text: str) -> tuple[str, str, str] | None:
    """``(kind, head, tail)`` of a stored payload's text: the JSON texts of the decision's own
    fields before and after its explanation (the bulk of a record), found without parsing it.
    A stored payload is RFC 8785 text, so the decision's keys before ``explanation`` form a
    prefix and those after it start at the first ``,"outcome":`` past the stored context (no
    key of that name lies between; the context ends where the explanation's accounts, or a
    compact explanation's ``trace``, begin). ``None`` when the text is not a plain decision or a
    shadow record in that form (the caller parses the whole payload). Each text parses as an object
    (``head`` and ``tail`` are built to); repeated decisions repeat them exactly, so a caller
    may parse each distinct one once."""
    kind, start, end = DECISION, 0, len(text) - 1
    if text.startswith('{"actual":'):
        at = text.find(_SHADOW_HEAD)
        if at < 0:
            return None
        kind, start = SHADOW, at + len(_SHADOW_HEAD) - 1
        end = text.find('},"record_type":"shadow-decision"', start)
        if end < 0:
            return None
    elif not text.startswith('{"account_id":') or not text.endswith("}"):
        return None
    explanation = text.find(_EXPLANATION, start)
    # The member after the context: a full explanation's accounts, a compact one's marker.
    after = text.find(',"eligible_account_ids":', explanation) if explanation >= 0 else -1
    if after < 0 or after > end:
        after = text.find(',"trace":"compact",', explanation) if explanation >= 0 else -1
    outcome = text.find(_OUTCOME, after) if after >= 0 else -1
    if outcome < 0 or outcome > end:
        return None
    return kind, text[start:explanation] + "}", "{" + text[outcome + 1 : end] + "}"


def first_difference(
    recorded: Mapping[str, Any], replayed: Mapping[str, Any], fields: tuple[str, ...]
) -> str | None:
    """The first of ``fields`` on which the two disagree, or ``None``."""
    for name in fields:
        if recorded.get(name) != replayed.get(name):
            return name
    return None


#: The legacy route's fields a decision reads when no policy matched (it reports that route);
#: ``mechanism`` and ``mechanism_detail`` are never read.
LEGACY_FIELDS: Final = ("provider_binding", "account_id", "model")


def _marked(value: Any) -> bool:
    """Whether a redaction marker sits in a string of ``value`` (values only: the resolver
    reads no key of a context's objects but its fixed field names)."""
    if isinstance(value, str):
        return MARKER_PREFIX in value
    if isinstance(value, Mapping):
        return any(_marked(v) for v in value.values())
    if isinstance(value, list):
        return any(_marked(v) for v in value)
    return False


def decisive_redaction(context: Mapping[str, Any], *, policy_source: Any, applied: bool) -> bool:
    """Whether a redaction marker sits in a field of ``context`` that the decision replayed from
    it read, so the unredacted value might have decided otherwise: a match field (always read),
    an account (read when a policy won and was applied, ``applied``), or the legacy route's
    provider, account or model (read when no policy matched, ``policy_source`` legacy). A marker
    anywhere else (``legacy_route.mechanism_detail``, the accounts of a legacy decision) changes
    nothing the resolver decides: a difference there is a mismatch, not lost input.

    Sound because a clean match field makes the replay take the branch the recording took."""
    if any(_marked(context.get(name)) for name in MATCH_FIELDS):
        return True
    if applied and _marked(context.get("accounts")):
        return True
    legacy = context.get("legacy_route")
    if policy_source == SOURCE_LEGACY and isinstance(legacy, Mapping):
        return any(_marked(legacy.get(name)) for name in LEGACY_FIELDS)
    return False


@dataclass
class ReplaySummary:
    """What a replay found: replayed = matched + mismatched; unreplayable by reason; records
    that carry no decision are ``skipped`` (they count for nothing)."""

    matched: int = 0
    mismatched: int = 0
    first_mismatch: tuple[int, str] | None = None
    by_kind: dict[str, int] = field(default_factory=dict)
    unreplayable: dict[str, int] = field(default_factory=dict)
    first_unreplayable: dict[str, int] = field(default_factory=dict)
    skipped: int = 0

    @property
    def replayed(self) -> int:
        return self.matched + self.mismatched

    @property
    def ok(self) -> bool:
        """Every record that carries a decision was replayed and matched: no mismatch and
        nothing unreplayable."""
        return self.mismatched == 0 and not self.unreplayable

    @property
    def verdict(self) -> str:
        """``matched`` (:attr:`ok`), ``mismatch`` (any mismatch), or ``incomplete`` (none, but
        some records could not be replayed)."""
        if self.mismatched:
            return "mismatch"
        return "incomplete" if self.unreplayable else "matched"

    @property
    def unreplayable_count(self) -> int:
        return sum(self.unreplayable.values())

    def match(self, kind: str) -> None:
        self.matched += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1

    def mismatch(self, seq: int, kind: str, field_name: str) -> None:
        self.mismatched += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        if self.first_mismatch is None:
            self.first_mismatch = (seq, field_name)

    def cannot(self, seq: int, reason: str) -> None:
        self.unreplayable[reason] = self.unreplayable.get(reason, 0) + 1
        self.first_unreplayable.setdefault(reason, seq)

    def lines(self) -> list[str]:
        """The report: the verdict line, then one line per kind of unreplayable record."""
        head = (
            f"replayed {self.replayed:,}, matched {self.matched:,}, mismatched {self.mismatched:,}"
        )
        if self.first_mismatch is not None:
            seq, name = self.first_mismatch
            head += f" (first: seq {seq}, field {name})"
        out = [head]
        for reason in sorted(self.unreplayable):
            out.append(
                f"unreplayable: {reason}: {self.unreplayable[reason]:,} "
                f"(first: seq {self.first_unreplayable[reason]})"
            )
        if self.skipped:
            out.append(f"skipped {self.skipped:,} records that carry no decision")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "verdict": self.verdict,
            "replayed": self.replayed,
            "matched": self.matched,
            "mismatched": self.mismatched,
            "firstMismatch": None
            if self.first_mismatch is None
            else {"seq": self.first_mismatch[0], "field": self.first_mismatch[1]},
            "byKind": dict(sorted(self.by_kind.items())),
            "unreplayable": dict(sorted(self.unreplayable.items())),
            "firstUnreplayable": dict(sorted(self.first_unreplayable.items())),
            "skipped": self.skipped,
        }
