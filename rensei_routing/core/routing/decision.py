"""A resolved route: the decision, its outcome and reason codes, and the fast builder the
resolver fills it with (:func:`decision_of`). The explanation it carries is
:mod:`.explanation`'s; reading one back (``RouteDecision.from_dict``) is here.

Pure: frozen values with ``to_dict`` / ``from_dict``; the JSON field names and every code string
are those of SEMANTICS.md.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from json.encoder import encode_basestring as _e
from typing import TYPE_CHECKING, Any, Final

from .. import _parse as p
from ..canonical import canonical_bytes
from ..canonical import json_string as _s
from .context import RouteContext
from .explanation import (
    ACCOUNT_REASONS,
    COMPACT,
    EXPLANATION_MEMBERS,
    MATCH_REASONS,
    OUTRANKED_COUNT,
    UNMATCHED,
    WINNERS,
    ConsideredPolicy,
    Explanation,
    Owner,
    RejectedAccount,
    TraceSource,
    earlier_form,
    explanation_of,
    full_context,
)
from .vocabulary import DEFAULT_VOCABULARY, Vocabulary

if TYPE_CHECKING:  # ids imports this module
    from .ids import ScanMemo

__all__ = ["RouteDecision"]

#: The stamp members a recorded decision may carry besides the decision's own fields.
STAMP_FIELDS: Final = ("rulesetRev", "snapshotAgeMs", "degraded", "signatureScope")

# Outcomes.
SELECTED: Final = "selected"
HELD: Final = "held"
REJECTED: Final = "rejected"
OUTCOMES: Final = (SELECTED, HELD, REJECTED)

# Policy sources.
SOURCE_MANAGED: Final = "managed-policy"
SOURCE_LEGACY: Final = "legacy-compatibility"
SOURCE_NONE: Final = "none"
POLICY_SOURCES: Final = (SOURCE_MANAGED, SOURCE_LEGACY, SOURCE_NONE)

# Snapshot load states.
STATE_OK: Final = "ok"
STATE_ABSENT: Final = "absent"
STATE_CORRUPT: Final = "corrupt"
SNAPSHOT_STATES: Final = (STATE_OK, STATE_ABSENT, STATE_CORRUPT)

# Decision reasons.
SNAPSHOT_UNAVAILABLE: Final = "snapshot-unavailable"
NO_LEGACY_ROUTE: Final = "no-legacy-route"
NO_POLICY_APPLIES: Final = "no-policy-applies"
POLICY_CONFLICT: Final = "policy-conflict"
LITERAL_FAMILY_UNSATISFIABLE: Final = "literal-family-unsatisfiable"
MODEL_NOT_ALLOWED: Final = "model-not-allowed"
CAPABILITY_UNMAPPED: Final = "capability-unmapped"
NO_ELIGIBLE_ACCOUNT: Final = "no-eligible-account"
MATCHED_POLICY: Final = "matched-policy"
DECISION_REASONS: Final = (
    SNAPSHOT_UNAVAILABLE,
    NO_LEGACY_ROUTE,
    NO_POLICY_APPLIES,
    POLICY_CONFLICT,
    LITERAL_FAMILY_UNSATISFIABLE,
    MODEL_NOT_ALLOWED,
    CAPABILITY_UNMAPPED,
    NO_ELIGIBLE_ACCOUNT,
    MATCHED_POLICY,
)

LEGACY_RUNG: Final = 9
_MAX_SAFE_INT: Final = 2**53 - 1


#: A decision's fields (and its JSON keys), in declaration (and ``to_dict``) order.
DECISION_FIELDS: Final = (
    "decision_id",
    "outcome",
    "reason",
    "policy_source",
    "policy_id",
    "policy_revision",
    "snapshot_hash",
    "snapshot_state",
    "precedence_level",
    "precedence_priority",
    "account_id",
    "provider_binding",
    "effective_model",
    "explanation",
)


class _DecisionFields:
    """A :class:`RouteDecision`'s storage, assignable: see :func:`decision_of`. Besides the
    fields, it keeps what the explanation is made of until the explanation is first read."""

    __slots__ = (
        *DECISION_FIELDS[:-1],
        "_explanation",
        "_context",
        "_eligible",
        "_rejected",
        "_conflicting",
        "_unlisted",
        "_beyond",
        "_source",
        "_keys",
        "_matched",
        "_last",
        "_compact",
    )

    decision_id: str
    outcome: str
    reason: str
    policy_source: str
    policy_id: str | None
    policy_revision: int
    snapshot_hash: str
    snapshot_state: str
    precedence_level: int | None
    precedence_priority: int | None
    account_id: str | None
    provider_binding: str | None
    effective_model: str | None
    _explanation: Explanation | None
    _context: RouteContext
    _eligible: tuple[str, ...]
    _rejected: tuple[RejectedAccount, ...]
    _conflicting: tuple[str, ...]
    _unlisted: int
    _beyond: int
    _source: TraceSource | None
    _keys: tuple[Any, ...]
    _matched: tuple[int, ...]
    _last: int
    _compact: bool


class RouteDecision(_DecisionFields):
    """Exactly one outcome for one context against one snapshot. Immutable, compared and
    hashed by value (as a frozen dataclass is).

    A decision from the resolver builds its :class:`Explanation` on first read of
    ``explanation``: a batch keeps one object per decision until then, which is what CPython's
    cyclic collector has to walk (docs/performance.md).
    """

    __slots__ = ()

    def __init__(
        self,
        *,
        decision_id: str,
        outcome: str,
        reason: str,
        policy_source: str,
        policy_id: str | None,
        policy_revision: int,
        snapshot_hash: str,
        snapshot_state: str,
        precedence_level: int | None,
        precedence_priority: int | None,
        account_id: str | None,
        provider_binding: str | None,
        effective_model: str | None,
        explanation: Explanation,
    ) -> None:
        values = (
            decision_id,
            outcome,
            reason,
            policy_source,
            policy_id,
            policy_revision,
            snapshot_hash,
            snapshot_state,
            precedence_level,
            precedence_priority,
            account_id,
            provider_binding,
            effective_model,
            explanation,
        )
        for name, value in zip(DECISION_FIELDS, values, strict=True):
            object.__setattr__(self, "_explanation" if name == "explanation" else name, value)

    @property
    def explanation(self) -> Explanation:
        """Everything needed to re-check this decision (built on first read, then kept)."""
        explanation = self._explanation
        if explanation is None:
            explanation = explanation_of(
                self._context,
                self._eligible,
                self._rejected,
                self._conflicting,
                self._unlisted,
                self._beyond,
                None if self._source is not None else (),
                self._source,
                self._keys,
                self._matched,
                self._last,
                self._compact,
            )
            # The parts stay: a thread reading them while another builds must see them whole
            # (both build the same value; the last store wins, and either is correct).
            object.__setattr__(self, "_explanation", explanation)
        return explanation

    def _values(self) -> tuple[Any, ...]:
        return (self.decision_id, *self._answer_fields(), self.explanation)

    def _answer_fields(self) -> tuple[Any, ...]:
        """The decision's own fields but its id, context and explanation, in field order: what
        a batch writer keys the repeated text of its lines and records by."""
        return (
            self.outcome,
            self.reason,
            self.policy_source,
            self.policy_id,
            self.policy_revision,
            self.snapshot_hash,
            self.snapshot_state,
            self.precedence_level,
            self.precedence_priority,
            self.account_id,
            self.provider_binding,
            self.effective_model,
        )

    def compact_parts(self) -> tuple[Any, ...] | None:
        """What this decision's compact explanation is built from but its context, for a
        decision from the resolver: ``(source, matched, last, unlisted, beyond, conflicting)``
        (as :func:`~.explanation.explanation_of` takes them). Its winners, counts and listed
        policies are a function of these (the source by identity), so a batch writer keys
        what repeats of a line by them (with :meth:`_answer_fields`) and never builds the
        explanation. ``None`` for a full explanation, or a decision built another way (read
        ``explanation`` instead)."""
        try:
            if not self._compact:
                return None
        except AttributeError:  # the keyword constructor: the explanation was given whole
            return None
        return (
            self._source,
            self._matched,
            self._last,
            self._unlisted,
            self._beyond,
            self._conflicting,
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, RouteDecision)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={value!r}" for name, value in zip(DECISION_FIELDS, self._values(), strict=True)
        )
        return f"RouteDecision({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_decision_from_fields, self._values())

    def stored_may_redact(self, scan: ScanMemo) -> bool:
        """Whether the redactor behind ``scan`` might change this decision's record (any
        string or key of :meth:`to_dict`); ``False``: its stored form is :meth:`canonical`
        (see :func:`rensei_routing.core.audit.chain.encode_payloads`)."""
        return scan.record_may_redact(self, None)

    def canonical(self) -> bytes:
        """RFC 8785 bytes of :meth:`to_dict`, written directly: what the audit log stores for a
        recorded decision. The tests check it equals ``canonical_bytes(self.to_dict())``."""
        if not 0 <= self.policy_revision <= _MAX_SAFE_INT:
            return canonical_bytes(self.to_dict())  # outside the fast path's integer domain

        def num(value: int | None) -> str:
            return "null" if value is None else str(value)

        text = (
            f'{{"account_id":{_s(self.account_id)},"decision_id":{_e(self.decision_id)},'
            f'"effective_model":{_s(self.effective_model)},'
            f'"explanation":{self.explanation.canonical_json(self._owner())},'
            f'"outcome":{_e(self.outcome)},"policy_id":{_s(self.policy_id)},'
            f'"policy_revision":{self.policy_revision},"policy_source":{_e(self.policy_source)},'
            f'"precedence_level":{num(self.precedence_level)},'
            f'"precedence_priority":{num(self.precedence_priority)},'
            f'"provider_binding":{_s(self.provider_binding)},"reason":{_e(self.reason)},'
            f'"snapshot_hash":{_e(self.snapshot_hash)},"snapshot_state":{_e(self.snapshot_state)}}}'
        )
        return text.encode("utf-8")

    def _owner(self) -> Owner:
        """What a compact explanation needs of this decision to store its winners by id."""
        return (
            self.policy_id,
            self.precedence_level,
            self.precedence_priority,
            self.reason == POLICY_CONFLICT,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision_id": self.decision_id,
            "outcome": self.outcome,
            "reason": self.reason,
            "policy_source": self.policy_source,
            "policy_id": self.policy_id,
            "policy_revision": self.policy_revision,
            "snapshot_hash": self.snapshot_hash,
            "snapshot_state": self.snapshot_state,
            "precedence_level": self.precedence_level,
            "precedence_priority": self.precedence_priority,
            "account_id": self.account_id,
            "provider_binding": self.provider_binding,
            "effective_model": self.effective_model,
            "explanation": self.explanation.to_dict(self._owner()),
        }

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        path: p.Path = "",
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        redacted: bool = False,
    ) -> RouteDecision:
        """Read a decision back. An audit record's payload is read with ``redacted=True``: the
        stored decision was redacted before it was hashed, so its context may hold redaction
        markers where input rules would refuse them (see :mod:`.context`); the decision's own
        fields are read verbatim either way.

        Raises:
            MalformedError: naming the first offending field path.
        """
        d = p.obj(
            data,
            path,
            required=(
                "decision_id",
                "outcome",
                "reason",
                "policy_source",
                "policy_revision",
                "snapshot_hash",
                "snapshot_state",
                "explanation",
            ),
            optional=(
                "policy_id",
                "precedence_level",
                "precedence_priority",
                "account_id",
                "provider_binding",
                "effective_model",
                # document 000's snapshot stamp, on a decision as the CLI records it; read by
                # ``core.freshness.StampedDecision.from_dict``, not part of a RouteDecision
                *STAMP_FIELDS,
            ),
        )
        epath = p.at(path, "explanation")
        e = p.obj(
            d["explanation"],
            epath,
            required=("context",),
            optional=EXPLANATION_MEMBERS,
        )
        compact = "trace" in e
        if compact:
            p.choice(e["trace"], p.at(epath, "trace"), (COMPACT,), what="trace")
            for listed in ("eligible_account_ids", "rejected_accounts"):
                if listed in e:
                    raise p.fail(p.at(epath, listed), "a compact explanation lists no accounts")
        brief = UNMATCHED in e
        if brief:
            e = earlier_form(dict(e), dict(d), epath, conflict=d.get("reason") == POLICY_CONFLICT)
        elif any(key in e for key in (OUTRANKED_COUNT, WINNERS)):
            raise p.fail(p.at(epath, UNMATCHED), "required field is missing")
        cpath = p.at(epath, "considered")
        considered = []
        for i, item in enumerate(p.array(e.get("considered", []), cpath)):
            ipath = p.at(cpath, i)
            c = p.obj(
                item,
                ipath,
                required=("policy_id", "precedence_level", "priority", "matched", "reason"),
            )
            considered.append(
                ConsideredPolicy(
                    policy_id=p.string(
                        c["policy_id"], p.at(ipath, "policy_id"), min_len=0, verbatim=True
                    ),
                    precedence_level=p.integer(
                        c["precedence_level"], p.at(ipath, "precedence_level"), lo=1, hi=9
                    ),
                    priority=p.integer(c["priority"], p.at(ipath, "priority"), lo=0, hi=10_000),
                    matched=p.boolean(c["matched"], p.at(ipath, "matched")),
                    reason=p.choice(
                        c["reason"], p.at(ipath, "reason"), MATCH_REASONS, what="reason"
                    ),
                )
            )
        rpath = p.at(epath, "rejected_accounts")
        rejected = []
        for i, item in enumerate(p.array(e.get("rejected_accounts", []), rpath)):
            ipath = p.at(rpath, i)
            r = p.obj(item, ipath, required=("account_id", "reason"))
            rejected.append(
                RejectedAccount(
                    account_id=p.string(
                        r["account_id"], p.at(ipath, "account_id"), min_len=0, verbatim=True
                    ),
                    reason=p.choice(
                        r["reason"], p.at(ipath, "reason"), ACCOUNT_REASONS, what="reason"
                    ),
                )
            )

        def strings(value: Any, where: p.Path) -> tuple[str, ...]:
            return tuple(
                p.string(v, p.at(where, i), min_len=0, verbatim=True)
                for i, v in enumerate(p.array(value, where))
            )

        def opt_int(key: str, lo: int, hi: int) -> int | None:
            value = d.get(key)
            return None if value is None else p.integer(value, p.at(path, key), lo=lo, hi=hi)

        return cls(
            decision_id=p.string(
                d["decision_id"], p.at(path, "decision_id"), min_len=0, verbatim=True
            ),
            outcome=p.choice(d["outcome"], p.at(path, "outcome"), OUTCOMES, what="outcome"),
            reason=p.choice(d["reason"], p.at(path, "reason"), DECISION_REASONS, what="reason"),
            policy_source=p.choice(
                d["policy_source"], p.at(path, "policy_source"), POLICY_SOURCES, what="source"
            ),
            policy_id=p.opt_string(
                d.get("policy_id"), p.at(path, "policy_id"), min_len=0, verbatim=True
            ),
            policy_revision=p.integer(
                d["policy_revision"], p.at(path, "policy_revision"), lo=0, hi=2**53 - 1
            ),
            snapshot_hash=p.string(
                d["snapshot_hash"], p.at(path, "snapshot_hash"), min_len=0, verbatim=True
            ),
            snapshot_state=p.choice(
                d["snapshot_state"], p.at(path, "snapshot_state"), SNAPSHOT_STATES, what="state"
            ),
            precedence_level=opt_int("precedence_level", 1, 9),
            precedence_priority=opt_int("precedence_priority", 0, 10_000),
            account_id=p.opt_string(
                d.get("account_id"), p.at(path, "account_id"), min_len=0, verbatim=True
            ),
            provider_binding=p.opt_string(
                d.get("provider_binding"), p.at(path, "provider_binding"), verbatim=True
            ),
            effective_model=p.opt_string(
                d.get("effective_model"), p.at(path, "effective_model"), min_len=0, verbatim=True
            ),
            explanation=Explanation(
                context=RouteContext.from_dict(
                    full_context(e["context"]) if brief else e["context"],
                    path=p.at(epath, "context"),
                    vocabulary=vocabulary,
                    redacted=redacted,
                ),
                considered=tuple(considered),
                eligible_account_ids=strings(
                    e.get("eligible_account_ids", []), p.at(epath, "eligible_account_ids")
                ),
                rejected_accounts=tuple(rejected),
                conflicting_policy_ids=strings(
                    e.get("conflicting_policy_ids", []), p.at(epath, "conflicting_policy_ids")
                ),
                unlisted_policy_count=p.integer(
                    e.get("unlisted_policy_count", 0),
                    p.at(epath, "unlisted_policy_count"),
                    lo=0,
                    hi=2**53 - 1,
                ),
                unlisted_outranked_count=p.integer(
                    e.get("unlisted_outranked_count", 0),
                    p.at(epath, "unlisted_outranked_count"),
                    lo=0,
                    hi=2**53 - 1,
                ),
                compact=compact,
            ),
        )


# -- fast construction --------------------------------------------------------------------------
#
# The resolver makes one decision per context, and the public constructor pays one
# ``object.__setattr__`` call per field (the class refuses assignment). :func:`decision_of`
# fills the assignable storage class with plain stores and then retypes the object to its
# immutable subclass, which adds no slots (CPython allows ``__class__`` to be assigned between
# such layouts): the same object, about a sixth of the cost (see docs/performance.md). Nothing
# else ever sees the storage class (``explanation.explanation_of`` does the same for an
# explanation).


def decision_of(
    decision_id: str,
    outcome: str,
    reason: str,
    policy_source: str,
    policy_id: str | None,
    policy_revision: int,
    snapshot_hash: str,
    snapshot_state: str,
    precedence_level: int | None,
    precedence_priority: int | None,
    account_id: str | None,
    provider_binding: str | None,
    effective_model: str | None,
    context: RouteContext,
    eligible_account_ids: tuple[str, ...],
    rejected_accounts: tuple[RejectedAccount, ...],
    conflicting_policy_ids: tuple[str, ...],
    unlisted_policy_count: int,
    unlisted_outranked_count: int,
    source: TraceSource | None,
    keys: tuple[Any, ...] = (),
    matched: tuple[int, ...] = (),
    last: int = -1,
    compact: bool = False,
) -> RouteDecision:
    """A decision with the fields in declaration order, whose explanation (the arguments from
    ``context`` on, as :func:`explanation_of` takes them; no ``source``: nothing considered)
    is built when first read."""
    d = _DecisionFields()
    d.decision_id = decision_id
    d.outcome = outcome
    d.reason = reason
    d.policy_source = policy_source
    d.policy_id = policy_id
    d.policy_revision = policy_revision
    d.snapshot_hash = snapshot_hash
    d.snapshot_state = snapshot_state
    d.precedence_level = precedence_level
    d.precedence_priority = precedence_priority
    d.account_id = account_id
    d.provider_binding = provider_binding
    d.effective_model = effective_model
    d._explanation = None
    d._context = context
    d._eligible = eligible_account_ids
    d._rejected = rejected_accounts
    d._conflicting = conflicting_policy_ids
    d._unlisted = unlisted_policy_count
    d._beyond = unlisted_outranked_count
    d._source = source
    d._keys = keys
    d._matched = matched
    d._last = last
    d._compact = compact
    d.__class__ = RouteDecision
    assert isinstance(d, RouteDecision)
    return d


def _decision_from_fields(*values: Any) -> RouteDecision:
    """Unpickling: the fields in declaration order."""
    return RouteDecision(**dict(zip(DECISION_FIELDS, values, strict=True)))
