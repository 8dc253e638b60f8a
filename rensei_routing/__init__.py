"""rensei-routing: where should this agent spawn run, and why? A pure, total routing resolver,
a SQLite store of policy revisions and a hash-chained audit log, on one host."""

from __future__ import annotations

from .core.canonical import canonical_bytes, digest
from .core.context import (
    Account,
    LegacyRoute,
    ModelRequirement,
    RepoIdentity,
    RouteContext,
    canonicalize_repo,
)
from .core.decision import ConsideredPolicy, Explanation, RejectedAccount, RouteDecision
from .core.ids import record_decision_id
from .core.policy import (
    PolicySnapshot,
    RequirementMapping,
    RoutingAction,
    RoutingMatch,
    RoutingPolicy,
    hash_policies,
    precedence_level,
)
from .core.resolver import decision_id, explain, explain_batch
from .core.validation import ValidationIssue, validate_policies
from .core.vocabulary import (
    DEFAULT_VOCABULARY,
    LiteralFamily,
    Provenance,
    Vocabulary,
    canonical_worker_role,
)
from .errors import RenseiRoutingError
from .hookspecs import hookimpl

__all__ = [
    "DEFAULT_VOCABULARY",
    "Account",
    "ConsideredPolicy",
    "Explanation",
    "LegacyRoute",
    "LiteralFamily",
    "ModelRequirement",
    "PolicySnapshot",
    "Provenance",
    "RejectedAccount",
    "RenseiRoutingError",
    "RepoIdentity",
    "RequirementMapping",
    "RouteContext",
    "RouteDecision",
    "RoutingAction",
    "RoutingMatch",
    "RoutingPolicy",
    "ValidationIssue",
    "Vocabulary",
    "canonical_bytes",
    "canonical_worker_role",
    "canonicalize_repo",
    "decision_id",
    "digest",
    "explain",
    "explain_batch",
    "hash_policies",
    "hookimpl",
    "precedence_level",
    "record_decision_id",
    "validate_policies",
]
