"""The explanation a decision carries: every policy considered (with its match reason), the
accounts the winner could not use (with their rejection reasons), the conflicting policy ids, and
the fast builder the resolver fills it with (:func:`explanation_of`).

Pure: frozen values with ``to_dict`` and their RFC 8785 text; the JSON field names and every code
string are those of SEMANTICS.md. Owns no decision field and must not import :mod:`.decision`
(which reads an explanation back, in ``RouteDecision.from_dict``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from json.encoder import encode_basestring as _e
from typing import Any, Final, Protocol

from .. import _parse as p
from .context import RouteContext
from .members import KeptTexts

__all__ = ["ConsideredPolicy", "Explanation", "RejectedAccount"]

# Match reasons, in evaluation order (the first failing dimension wins).
POLICY_DISABLED: Final = "policy-disabled"
REPO_IDENTITY_NOT_CANONICAL: Final = "repo-identity-not-canonical"
REPO_NOT_IN_SET: Final = "repo-not-in-set"
REPO_CLASS_NOT_IN_SET: Final = "repo-class-not-in-set"
ROLE_NOT_CANONICAL: Final = "role-not-canonical"
ROLE_NOT_IN_SET: Final = "role-not-in-set"
PRINCIPAL_NOT_IN_SET: Final = "principal-not-in-set"
REQUIREMENT_NOT_IN_SET: Final = "requirement-not-in-set"
REQUEST_FACE_NOT_IN_SET: Final = "request-face-not-in-set"
MATCHED: Final = "matched"
OUTRANKED: Final = "outranked"
MATCH_REASONS: Final = (
    POLICY_DISABLED,
    REPO_IDENTITY_NOT_CANONICAL,
    REPO_NOT_IN_SET,
    REPO_CLASS_NOT_IN_SET,
    ROLE_NOT_CANONICAL,
    ROLE_NOT_IN_SET,
    PRINCIPAL_NOT_IN_SET,
    REQUIREMENT_NOT_IN_SET,
    REQUEST_FACE_NOT_IN_SET,
    MATCHED,
    OUTRANKED,
)

# Account rejection reasons, in the order they are checked.
NOT_CONFIGURED: Final = "not-configured"
ADMINISTRATIVE_DISABLED: Final = "administrative-disabled"
ADMINISTRATIVE_DRAINING: Final = "administrative-draining"
PROVIDER_LOCK_MISMATCH: Final = "provider-lock-mismatch"
NOT_IN_POOL: Final = "not-in-pool"
LITERAL_FAMILY_INCOMPATIBLE: Final = "literal-family-incompatible"
ACCOUNT_REASONS: Final = (
    NOT_CONFIGURED,
    ADMINISTRATIVE_DISABLED,
    ADMINISTRATIVE_DRAINING,
    PROVIDER_LOCK_MISMATCH,
    NOT_IN_POOL,
    LITERAL_FAMILY_INCOMPATIBLE,
)

#: The outranked rivals a compact trace lists after the winner and its ties (see Explanation):
#: none, they are counted.
COMPACT_RIVALS: Final = 0
#: The ``trace`` member a compact explanation's JSON carries (a full one has none).
COMPACT: Final = "compact"
#: The keys of a compact explanation as records store it (see :meth:`Explanation.to_dict`):
#: the rivals outranked, the policies that did not match (counted), and the winners listed when
#: they are not just the decision's own policy.
OUTRANKED_COUNT: Final = "outranked"
UNMATCHED: Final = "unmatched"
WINNERS: Final = "winners"

#: The members an explanation's JSON may hold besides its ``context``, in every form it was
#: written in (full, compact, compact stored by ids).
EXPLANATION_MEMBERS: Final = (
    "considered",
    "eligible_account_ids",
    "rejected_accounts",
    "conflicting_policy_ids",
    "unlisted_policy_count",
    "unlisted_outranked_count",
    "trace",
    OUTRANKED_COUNT,
    UNMATCHED,
    WINNERS,
)

#: What a compact explanation needs of its decision to store its winners by id only: the
#: decision's policy id, rung, priority, and whether it is a policy conflict (see
#: :meth:`Explanation.to_dict`).
Owner = tuple[str | None, int | None, int | None, bool]

# Account members at their defaults, and the legacy route's null members, as a context's
# canonical text writes them: a compact explanation's context leaves them out (readers put the
# defaults back). In RFC 8785 text a quote inside a string is escaped, so these can only be
# members, never part of a string; no other member of a context has these names.
_ACCOUNT_DEFAULTS: Final = ('"administrative_state":"active",', '"configured":true,')
_LEGACY_NULLS: Final = (
    '"account_id":null,',
    '"mechanism":null,',
    '"mechanism_detail":null,',
    '"model":null,',
)
_LEGACY_OPTIONAL: Final = ("account_id", "mechanism", "mechanism_detail", "model")


def listed_winners(winners: list[str], owner: Owner) -> str:
    """A compact explanation's ``winners`` member (with its leading comma), or nothing when
    the winners are exactly the decision's own policy (the reader puts them back)."""
    if winners == ([] if owner[0] is None else [owner[0]]):
        return ""
    return f',"{WINNERS}":[{",".join([_e(i) for i in winners])}]'


def compact_context_text(text: str) -> str:
    """A context's canonical text without its default members (see :func:`full_context`)."""
    for member in _ACCOUNT_DEFAULTS:
        text = text.replace(member, "")
    if "null," in text:
        for member in _LEGACY_NULLS:
            text = text.replace(member, "")
    return text


def compact_context(data: dict[str, Any]) -> dict[str, Any]:
    """:func:`compact_context_text` for a context's :meth:`~RouteContext.to_dict`."""
    out = dict(data)
    out["accounts"] = [
        {
            k: v
            for k, v in a.items()
            if not (k == "configured" and v is True)
            and not (k == "administrative_state" and v == "active")
        }
        for a in data["accounts"]
    ]
    legacy = data.get("legacy_route")
    if isinstance(legacy, dict):
        out["legacy_route"] = {
            k: v for k, v in legacy.items() if not (k in _LEGACY_OPTIONAL and v is None)
        }
    return out


def full_context(data: Any) -> Any:
    """A stored context document with the members a compact explanation leaves out put back
    (an account's ``configured: true`` and ``administrative_state: "active"``, the legacy
    route's null members): what ``RouteContext.to_dict`` gives for it. Anything else is
    returned as it is (a reader refuses it)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    accounts = data.get("accounts")
    if isinstance(accounts, list):
        out["accounts"] = [
            {"configured": True, "administrative_state": "active", **a}
            if isinstance(a, dict)
            else a
            for a in accounts
        ]
    legacy = data.get("legacy_route")
    if isinstance(legacy, dict):
        out["legacy_route"] = {**dict.fromkeys(_LEGACY_OPTIONAL), **legacy}
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsideredPolicy(KeptTexts):
    """One policy as the resolver saw it for this context (an entry is shared by every decision
    of a call, so its texts are kept)."""

    policy_id: str
    precedence_level: int
    priority: int
    matched: bool
    reason: str
    _json: str | None = field(default=None, init=False, repr=False, compare=False)
    _display: str | None = field(default=None, init=False, repr=False, compare=False)

    def _write_json(self) -> str:
        return (
            f'{{"matched":{"true" if self.matched else "false"},'
            f'"policy_id":{_e(self.policy_id)},"precedence_level":{self.precedence_level},'
            f'"priority":{self.priority},"reason":{_e(self.reason)}}}'
        )

    def _write_display(self) -> str:
        return (
            f'{{"policy_id":{_e(self.policy_id)},"precedence_level":{self.precedence_level},'
            f'"priority":{self.priority},"matched":{"true" if self.matched else "false"},'
            f'"reason":{_e(self.reason)}}}'
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy_id": self.policy_id,
            "precedence_level": self.precedence_level,
            "priority": self.priority,
            "matched": self.matched,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectedAccount:
    """An account the winning policy could not use, with the first rule that excluded it."""

    account_id: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"account_id": self.account_id, "reason": self.reason}


class TraceSource(Protocol):
    """Builds an explanation's ``considered`` list on first read, from what the resolver kept
    of the decision (one source is shared by every decision of a call)."""

    def considered(
        self, context: RouteContext, keys: tuple[Any, ...], matched: tuple[int, ...], last: int
    ) -> tuple[ConsideredPolicy, ...]: ...


class _ExplanationFields:
    """An :class:`Explanation`'s storage, assignable: see :func:`explanation_of`."""

    __slots__ = (
        "_considered",
        "_keys",
        "_last",
        "_matched",
        "_source",
        "compact",
        "conflicting_policy_ids",
        "context",
        "eligible_account_ids",
        "rejected_accounts",
        "unlisted_outranked_count",
        "unlisted_policy_count",
    )

    context: RouteContext
    eligible_account_ids: tuple[str, ...]
    rejected_accounts: tuple[RejectedAccount, ...]
    conflicting_policy_ids: tuple[str, ...]
    unlisted_policy_count: int
    unlisted_outranked_count: int
    compact: bool
    _considered: tuple[ConsideredPolicy, ...] | None
    _source: TraceSource | None
    _keys: tuple[Any, ...]
    _matched: tuple[int, ...]
    _last: int


class Explanation(_ExplanationFields):
    """Everything needed to re-check a decision without the resolver's process.

    ``considered`` lists every policy in rank order under a full trace, with the accounts the
    winner could use (``eligible_account_ids``) and could not (``rejected_accounts``).

    A compact explanation (``compact``; what a record carries by default, see
    docs/formats.md) lists the winner and every policy tied with it, each with its rung and
    priority (why it won); ``unlisted_outranked_count`` counts the other matched policies (the
    rivals it outranked), ``unlisted_policy_count`` the policies that did not match, and the
    accounts are not listed. Nothing is lost: the full trace is the same resolver run again on
    the stored context against the revision the decision cites (``rensei audit show SEQ
    --full``). Its JSON says ``"trace": "compact"``. An explanation without that member and
    with ``unlisted_outranked_count`` (written before compact records) listed up to eight
    rivals and the accounts; it reads back as it was written.

    The resolver keeps what the trace needs at decision time (:func:`explanation_of`) and
    ``considered`` is built on first read, so a batch that only routes never pays for listing
    every policy; the value read is the same either way. Immutable: attributes cannot be set
    after construction.
    """

    __slots__ = ()

    def __init__(
        self,
        *,
        context: RouteContext,
        considered: tuple[ConsideredPolicy, ...] = (),
        eligible_account_ids: tuple[str, ...] = (),
        rejected_accounts: tuple[RejectedAccount, ...] = (),
        conflicting_policy_ids: tuple[str, ...] = (),
        unlisted_policy_count: int = 0,
        unlisted_outranked_count: int = 0,
        compact: bool = False,
    ) -> None:
        init = object.__setattr__
        init(self, "context", context)
        init(self, "compact", compact)
        init(self, "_considered", considered)
        init(self, "_source", None)
        init(self, "_keys", ())
        init(self, "_matched", ())
        init(self, "_last", -1)
        init(self, "eligible_account_ids", eligible_account_ids)
        init(self, "rejected_accounts", rejected_accounts)
        init(self, "conflicting_policy_ids", conflicting_policy_ids)
        init(self, "unlisted_policy_count", unlisted_policy_count)
        init(self, "unlisted_outranked_count", unlisted_outranked_count)

    @property
    def considered(self) -> tuple[ConsideredPolicy, ...]:
        """The policies as the resolver saw them, best first."""
        considered = self._considered
        if considered is None:
            source = self._source
            if source is None:  # another thread built it between the two reads
                considered = self._considered
                assert considered is not None
                return considered
            considered = source.considered(self.context, self._keys, self._matched, self._last)
            # ``_considered`` first: a reader that then finds no source finds the list.
            object.__setattr__(self, "_considered", considered)
            object.__setattr__(self, "_source", None)
        return considered

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Explanation is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Explanation is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_explanation_from_fields, self._key())

    def _key(self) -> tuple[Any, ...]:
        return (
            self.context,
            self.considered,
            self.eligible_account_ids,
            self.rejected_accounts,
            self.conflicting_policy_ids,
            self.unlisted_policy_count,
            self.unlisted_outranked_count,
            self.compact,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Explanation):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Explanation(context={self.context!r}, considered={self.considered!r}, "
            f"eligible_account_ids={self.eligible_account_ids!r}, "
            f"rejected_accounts={self.rejected_accounts!r}, "
            f"conflicting_policy_ids={self.conflicting_policy_ids!r}, "
            f"unlisted_policy_count={self.unlisted_policy_count!r}, "
            f"unlisted_outranked_count={self.unlisted_outranked_count!r}, "
            f"compact={self.compact!r})"
        )

    def _winners(self, owner: Owner | None) -> list[str] | None:
        """The winners' ids when this compact explanation can be stored by ids alone (every
        listed policy matched at its decision's rung and priority, and the conflicting ids are
        those a conflict among them gives), else ``None``."""
        if owner is None:
            return None
        policy_id, level, priority, conflict = owner
        ids = []
        for c in self.considered:
            if not (
                c.matched
                and c.reason == MATCHED
                and c.precedence_level == level
                and c.priority == priority
            ):
                return None
            ids.append(c.policy_id)
        expected = tuple(sorted(set(ids))) if conflict else ()
        if self.conflicting_policy_ids != expected:
            return None
        if policy_id is not None and ids[:1] != [policy_id]:
            return None
        return ids

    def canonical_json(self, owner: Owner | None = None) -> str:
        """RFC 8785 text of :meth:`to_dict`, written directly (tested equal to the encoder)."""
        if self.compact:
            winners = self._winners(owner)
            if winners is not None:
                assert owner is not None
                return (
                    f'{{"context":{compact_context_text(self.context.canonical_text())},'
                    f'"{OUTRANKED_COUNT}":{self.unlisted_outranked_count},"trace":"{COMPACT}",'
                    f'"{UNMATCHED}":{self.unlisted_policy_count}'
                    f"{listed_winners(winners, owner)}}}"
                )
        conflicting = ",".join(_e(i) for i in self.conflicting_policy_ids)
        considered = ",".join(c.canonical_json() for c in self.considered)
        if self.compact:
            return (
                (f'{{"conflicting_policy_ids":[{conflicting}],' if conflicting else "{")
                + f'"considered":[{considered}],"context":{self.context.canonical_text()},'
                f'"trace":"{COMPACT}",'
                f'"unlisted_outranked_count":{self.unlisted_outranked_count},'
                f'"unlisted_policy_count":{self.unlisted_policy_count}}}'
            )
        eligible = ",".join(_e(i) for i in self.eligible_account_ids)
        rejected = ",".join(
            f'{{"account_id":{_e(r.account_id)},"reason":{_e(r.reason)}}}'
            for r in self.rejected_accounts
        )
        return (
            f'{{"conflicting_policy_ids":[{conflicting}],"considered":[{considered}],'
            f'"context":{self.context.canonical_text()},'
            f'"eligible_account_ids":[{eligible}],"rejected_accounts":[{rejected}],'
            + (
                f'"unlisted_outranked_count":{self.unlisted_outranked_count},'
                if self.unlisted_outranked_count
                else ""
            )
            + f'"unlisted_policy_count":{self.unlisted_policy_count}}}'
        )

    def to_dict(self, owner: Owner | None = None) -> dict[str, Any]:
        """The explanation's JSON. A compact one inside a decision (``owner``: what it needs of
        the decision, see :data:`Owner`) is stored by ids: its context without default members
        (:func:`compact_context`), ``outranked`` and ``unmatched`` counted, and ``winners``
        listed only when they are not just the decision's policy (each winner matched at the
        decision's rung and priority, so nothing else about it needs storing; a conflict's ids
        are its winners'). A compact explanation these rules cannot state (or read alone)
        keeps the earlier compact form: ``considered``, ``unlisted_outranked_count``,
        ``unlisted_policy_count``."""
        if self.compact:
            winners = self._winners(owner)
            if winners is not None:
                assert owner is not None
                brief: dict[str, Any] = {
                    "context": compact_context(self.context.to_dict()),
                    OUTRANKED_COUNT: self.unlisted_outranked_count,
                    "trace": COMPACT,
                    UNMATCHED: self.unlisted_policy_count,
                }
                if winners != ([] if owner[0] is None else [owner[0]]):
                    brief[WINNERS] = winners
                return brief
            compact: dict[str, Any] = {
                "context": self.context.to_dict(),
                "considered": [c.to_dict() for c in self.considered],
                "trace": COMPACT,
                "unlisted_outranked_count": self.unlisted_outranked_count,
                "unlisted_policy_count": self.unlisted_policy_count,
            }
            if self.conflicting_policy_ids:
                compact["conflicting_policy_ids"] = list(self.conflicting_policy_ids)
            return compact
        out = {
            "context": self.context.to_dict(),
            "considered": [c.to_dict() for c in self.considered],
            "eligible_account_ids": list(self.eligible_account_ids),
            "rejected_accounts": [r.to_dict() for r in self.rejected_accounts],
            "conflicting_policy_ids": list(self.conflicting_policy_ids),
            "unlisted_policy_count": self.unlisted_policy_count,
        }
        if self.unlisted_outranked_count:
            out["unlisted_outranked_count"] = self.unlisted_outranked_count
        return out


def earlier_form(
    e: dict[str, Any], d: dict[str, Any], epath: p.Path, *, conflict: bool
) -> dict[str, Any]:
    """A compact explanation stored by ids (see :meth:`Explanation.to_dict`) in the earlier
    compact form, which the reader reads: each winner listed at the decision's rung and
    priority (``d``: the decision's members), the conflicting ids a conflict's winners give,
    the counts under their earlier names.

    Raises:
        MalformedError: not such an explanation.
    """
    if "trace" not in e:
        raise p.fail(p.at(epath, "trace"), "required field is missing")
    for key in ("considered", "conflicting_policy_ids", *_EARLIER_COUNTS):
        if key in e:
            raise p.fail(p.at(epath, key), f"not a member of an explanation with {UNMATCHED!r}")
    policy_id = d.get("policy_id")
    wpath = p.at(epath, WINNERS)
    winners = [
        p.string(v, p.at(wpath, i), min_len=0, verbatim=True)
        for i, v in enumerate(
            p.array(e[WINNERS], wpath) if WINNERS in e else [] if policy_id is None else [policy_id]
        )
    ]
    level, priority = d.get("precedence_level"), d.get("precedence_priority")
    if winners and (level is None or priority is None):
        raise p.fail(wpath, "winners need the decision's precedence_level and priority")
    out = {
        "context": e["context"],
        "trace": e["trace"],
        "considered": [
            {
                "policy_id": i,
                "precedence_level": level,
                "priority": priority,
                "matched": True,
                "reason": MATCHED,
            }
            for i in winners
        ],
        "unlisted_outranked_count": e.get(OUTRANKED_COUNT, 0),
        "unlisted_policy_count": e[UNMATCHED],
    }
    if conflict:
        out["conflicting_policy_ids"] = sorted(set(winners))
    return out


_EARLIER_COUNTS: Final = ("unlisted_outranked_count", "unlisted_policy_count")


# -- fast construction --------------------------------------------------------------------------
#
# The resolver makes one explanation per decision it builds, and the public constructor pays one
# ``object.__setattr__`` call per field (the class refuses assignment). The builder below fills
# the assignable storage class with plain stores and then retypes the object to its immutable
# subclass, which adds no slots (CPython allows ``__class__`` to be assigned between such
# layouts): the same object, about a sixth of the cost (see docs/performance.md). Nothing else
# ever sees the storage class (``decision.decision_of`` does the same for a decision).


def explanation_of(
    context: RouteContext,
    eligible_account_ids: tuple[str, ...],
    rejected_accounts: tuple[RejectedAccount, ...],
    conflicting_policy_ids: tuple[str, ...],
    unlisted_policy_count: int,
    unlisted_outranked_count: int,
    considered: tuple[ConsideredPolicy, ...] | None,
    source: TraceSource | None = None,
    keys: tuple[Any, ...] = (),
    matched: tuple[int, ...] = (),
    last: int = -1,
    compact: bool = False,
) -> Explanation:
    """An explanation whose ``considered`` is given, or (``None``) built on first read by
    ``source.considered(context, keys, matched, last)``; ``compact``: see :class:`Explanation`
    (its accounts are not listed, whatever is given)."""
    if considered is None and source is None:
        raise ValueError("an explanation needs considered policies or a source to build them")
    e = _ExplanationFields()
    e.context = context
    e.compact = compact
    e.eligible_account_ids = () if compact else eligible_account_ids
    e.rejected_accounts = () if compact else rejected_accounts
    e.conflicting_policy_ids = conflicting_policy_ids
    e.unlisted_policy_count = unlisted_policy_count
    e.unlisted_outranked_count = unlisted_outranked_count
    e._considered = considered
    e._source = None if considered is not None else source
    e._keys = keys
    e._matched = matched
    e._last = last
    e.__class__ = Explanation
    assert isinstance(e, Explanation)
    return e


def _explanation_from_fields(
    context: RouteContext,
    considered: tuple[ConsideredPolicy, ...],
    eligible_account_ids: tuple[str, ...],
    rejected_accounts: tuple[RejectedAccount, ...],
    conflicting_policy_ids: tuple[str, ...],
    unlisted_policy_count: int,
    unlisted_outranked_count: int,
    compact: bool = False,
) -> Explanation:
    """Unpickling: the arguments in ``Explanation._key`` order."""
    return Explanation(
        context=context,
        considered=considered,
        eligible_account_ids=eligible_account_ids,
        rejected_accounts=rejected_accounts,
        conflicting_policy_ids=conflicting_policy_ids,
        unlisted_policy_count=unlisted_policy_count,
        unlisted_outranked_count=unlisted_outranked_count,
        compact=compact,
    )
