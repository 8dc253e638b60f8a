"""A cached snapshot's three ages (document 000 "Three ages, one posture"): fresh, degraded
(served and flagged), refused (:class:`~rensei_routing.errors.ExpiredError`).

Pure: ``now`` is always an argument; the comparisons are strict (``age > bound``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from ...errors import ConfigurationError, ExpiredError, FutureSnapshotError
from .. import _parse as p
from ..canonical import canonical_bytes, json_string
from ..routing.decision import RouteDecision
from ..timestamps import format_age

__all__ = [
    "DEFAULT_DEGRADED_AFTER",
    "DEFAULT_MAX_SKEW",
    "DEFAULT_REFUSE_AFTER",
    "Freshness",
    "FreshnessPolicy",
    "StampedDecision",
    "age_of",
    "format_age",
]

DEFAULT_DEGRADED_AFTER: Final = timedelta(minutes=5)
DEFAULT_REFUSE_AFTER: Final = timedelta(minutes=30)
#: How far in the future a ``compiledAt`` may be (clock skew between control side and host)
#: before the snapshot is refused rather than treated as age 0.
DEFAULT_MAX_SKEW: Final = timedelta(seconds=60)


def _ms(delta: timedelta) -> int:
    return delta // timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class FreshnessPolicy:
    """The bounds. ``refuse_after < degraded_after`` is a configuration error.

    Raises:
        ConfigurationError: a negative bound, or ``refuse_after < degraded_after``.
    """

    degraded_after: timedelta = DEFAULT_DEGRADED_AFTER
    refuse_after: timedelta = DEFAULT_REFUSE_AFTER
    max_skew: timedelta = DEFAULT_MAX_SKEW

    def __post_init__(self) -> None:
        for name in ("degraded_after", "refuse_after", "max_skew"):
            if getattr(self, name) < timedelta(0):
                raise ConfigurationError(f"{name} must not be negative")
        if self.refuse_after < self.degraded_after:
            raise ConfigurationError(
                f"RefuseAfter ({format_age(_ms(self.refuse_after))}) is shorter than "
                f"DegradedAfter ({format_age(_ms(self.degraded_after))})"
            )

    def judge(self, ruleset_rev: str, compiled_at: datetime, now: datetime) -> Freshness:
        """The age of a snapshot compiled at ``compiled_at``, seen at ``now``.

        Raises:
            ExpiredError: ``age > refuse_after`` (carrying the revision, age and bound).
            FutureSnapshotError: ``compiled_at`` is later than ``now`` by more than the skew.
        """
        age = now - compiled_at
        if age < -self.max_skew:
            raise FutureSnapshotError(
                f"ruleset snapshot {ruleset_rev} was compiled {format_age(_ms(-age))} in the "
                f"future (allowed skew {format_age(_ms(self.max_skew))}): refusing it"
            )
        age = max(age, timedelta(0))
        if age > self.refuse_after:
            raise ExpiredError(
                ruleset_rev,
                _ms(age),
                _ms(self.refuse_after),
                ages=(format_age(_ms(age)), format_age(_ms(self.refuse_after))),
            )
        return Freshness(
            ruleset_rev=ruleset_rev, age_ms=_ms(age), degraded=age > self.degraded_after
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Freshness:
    """What a decision made through a cached snapshot carries: ``rulesetRev``,
    ``snapshotAgeMs`` and ``degraded``. A decision from the live store carries
    :meth:`live` (``rulesetRev: null, degraded: false``): a distinct, documented shape."""

    ruleset_rev: str | None
    age_ms: int | None
    degraded: bool
    #: What the cached snapshot's signatures covered (``header`` or ``hash-only``); ``None``
    #: for a live decision (and then absent from :meth:`to_dict`).
    signature_scope: str | None = None

    @classmethod
    def live(cls) -> Freshness:
        return cls(ruleset_rev=None, age_ms=None, degraded=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rulesetRev": self.ruleset_rev,
            "snapshotAgeMs": self.age_ms,
            "degraded": self.degraded,
        }
        if self.signature_scope is not None:
            out["signatureScope"] = self.signature_scope
        return out


def age_of(compiled_at: datetime, now: datetime) -> timedelta:
    """``now - compiled_at``, never negative."""
    return max(now - compiled_at, timedelta(0))


class StampedDecision:
    """A decision as the CLI shows and records it: the resolver's decision (the fields of
    SEMANTICS.md) plus document 000's snapshot stamp (``rulesetRev``, ``snapshotAgeMs``,
    ``degraded``). A decision from the live store is stamped :meth:`Freshness.live` (``null``,
    ``null``, ``false``), so the two shapes are always distinguishable. The stamp is not part
    of the decision id.
    """

    __slots__ = ("decision", "freshness")

    def __init__(self, decision: RouteDecision, freshness: Freshness) -> None:
        self.decision = decision
        self.freshness = freshness

    @classmethod
    def from_dict(cls, data: Any, **kwargs: Any) -> StampedDecision:
        """Read a recorded decision back with its stamp (``kwargs`` go to
        ``RouteDecision.from_dict``); a decision recorded without a stamp reads as live.

        Raises:
            MalformedError: naming the offending field.
        """
        decision = RouteDecision.from_dict(data, **kwargs)
        path = kwargs.get("path", "")
        rev, age = data.get("rulesetRev"), data.get("snapshotAgeMs")
        return cls(
            decision,
            Freshness(
                ruleset_rev=p.opt_string(rev, p.at(path, "rulesetRev"), max_len=256),
                age_ms=None
                if age is None
                else p.integer(age, p.at(path, "snapshotAgeMs"), lo=0, hi=2**53 - 1),
                degraded=p.boolean(data.get("degraded", False), p.at(path, "degraded")),
                signature_scope=p.opt_string(
                    data.get("signatureScope"), p.at(path, "signatureScope"), max_len=64
                ),
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.decision.to_dict()
        out.update(self.freshness.to_dict())
        return out

    def canonical(self) -> bytes:
        """RFC 8785 bytes of :meth:`to_dict`: the decision's own canonical bytes with the stamp's
        three members spliced in at their sorted places (tested equal to the encoder). A JSON
        string never holds an unescaped quote, so the member names found are top-level ones."""
        f = self.freshness
        if f.signature_scope is not None:
            return canonical_bytes(self.to_dict())
        text = self.decision.canonical().decode("utf-8")
        rev = "null" if f.ruleset_rev is None else json_string(f.ruleset_rev)
        age = "null" if f.age_ms is None else str(f.age_ms)
        head, sep, tail = text.partition(',"effective_model":')
        degraded = "true" if f.degraded else "false"
        text = f'{head},"degraded":{degraded}{sep}{tail}'
        cut = text.rfind(',"snapshot_hash":')
        text = f'{text[:cut]},"rulesetRev":{rev},"snapshotAgeMs":{age}{text[cut:]}'
        return text.encode("utf-8")
