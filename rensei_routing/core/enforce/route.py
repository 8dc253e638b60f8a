"""The answer an armed canary gives a spawn seam, and the value a seam plugin applies to its
spawn (hook ``apply_enforced_route``): the route policy chose, with the lineage that lets anyone
find the decision and the revision it was decided under."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ENFORCED", "LEGACY_COMPATIBLE", "ROUTE_KINDS", "EnforcedRoute"]

#: A managed policy chose the route.
ENFORCED: Final = "enforced"
#: No policy claims the spawn: it keeps its own (legacy) route, recorded as such.
LEGACY_COMPATIBLE: Final = "legacy-compatible"
ROUTE_KINDS: Final = (ENFORCED, LEGACY_COMPATIBLE)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnforcedRoute:
    """Where a governed spawn runs, and why.

    ``provider``, ``account_id`` and ``model`` are the route to apply (``model`` is the
    effective model, after any literal-family guarantee); ``policy_id`` (``None`` for a
    ``legacy-compatible`` route), ``revision`` and ``policy_hash`` name what decided it;
    ``decision_id`` is the decision's id and ``seq`` the audit record that holds it, committed
    before this value was returned.
    """

    kind: str
    provider: str
    account_id: str | None
    model: str | None
    policy_id: str | None
    revision: int
    policy_hash: str
    decision_id: str
    seq: int

    def to_dict(self) -> dict[str, Any]:
        """The route as JSON-ready data (every field, ``None`` kept)."""
        return {
            "kind": self.kind,
            "provider": self.provider,
            "account_id": self.account_id,
            "model": self.model,
            "policy_id": self.policy_id,
            "revision": self.revision,
            "policy_hash": self.policy_hash,
            "decision_id": self.decision_id,
            "seq": self.seq,
        }
