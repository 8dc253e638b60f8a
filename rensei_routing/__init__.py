"""rensei-routing: where should this agent spawn run, and why? A pure, total routing resolver,
a SQLite store of policy revisions and a hash-chained audit log, on one host."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from .core.resolver import decision_id, explain, explain_batch, explain_iter
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

#: Public name -> the module defining it: imported on first use (PEP 562), so ``import
#: rensei_routing`` (and the CLI's start-up) costs nothing until a name is used.
_LAZY: dict[str, str] = {
    "Account": ".core.context",
    "ConsideredPolicy": ".core.decision",
    "DEFAULT_VOCABULARY": ".core.vocabulary",
    "Explanation": ".core.decision",
    "LegacyRoute": ".core.context",
    "LiteralFamily": ".core.vocabulary",
    "ModelRequirement": ".core.context",
    "PolicySnapshot": ".core.policy",
    "Provenance": ".core.vocabulary",
    "RejectedAccount": ".core.decision",
    "RenseiRoutingError": ".errors",
    "RepoIdentity": ".core.context",
    "RequirementMapping": ".core.policy",
    "RouteContext": ".core.context",
    "RouteDecision": ".core.decision",
    "RoutingAction": ".core.policy",
    "RoutingMatch": ".core.policy",
    "RoutingPolicy": ".core.policy",
    "ValidationIssue": ".core.validation",
    "Vocabulary": ".core.vocabulary",
    "canonical_bytes": ".core.canonical",
    "canonical_worker_role": ".core.vocabulary",
    "canonicalize_repo": ".core.context",
    "decision_id": ".core.resolver",
    "digest": ".core.canonical",
    "explain": ".core.resolver",
    "explain_batch": ".core.resolver",
    "explain_iter": ".core.resolver",
    "hash_policies": ".core.policy",
    "hookimpl": ".hookspecs",
    "precedence_level": ".core.policy",
    "record_decision_id": ".core.ids",
    "validate_policies": ".core.validation",
}

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
    "explain_iter",
    "hash_policies",
    "hookimpl",
    "precedence_level",
    "record_decision_id",
    "validate_policies",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
