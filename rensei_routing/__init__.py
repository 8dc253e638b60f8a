"""rensei-routing: where should this agent spawn run, and why? A pure, total routing resolver,
a SQLite store of policy revisions and a hash-chained audit log, on one host."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import _moved

_moved.install()  # the module paths of before the re-layout, for plugins (docs/architecture.md)

if TYPE_CHECKING:
    from .core.canonical import canonical_bytes, digest
    from .core.enforce.bound import NotGoverned
    from .core.enforce.route import EnforcedRoute
    from .core.routing.context import RouteContext
    from .core.routing.decision import RouteDecision
    from .core.routing.explanation import ConsideredPolicy, Explanation, RejectedAccount
    from .core.routing.ids import record_decision_id
    from .core.routing.members import (
        Account,
        LegacyRoute,
        ModelRequirement,
        RepoIdentity,
        canonicalize_repo,
    )
    from .core.routing.policy import (
        PolicySnapshot,
        RequirementMapping,
        RoutingAction,
        RoutingMatch,
        RoutingPolicy,
        hash_policies,
        precedence_level,
    )
    from .core.routing.resolver import decision_id, explain, explain_batch, explain_iter
    from .core.routing.validation import ValidationIssue, validate_policies
    from .core.routing.vocabulary import (
        DEFAULT_VOCABULARY,
        LiteralFamily,
        Provenance,
        Vocabulary,
        canonical_worker_role,
    )
    from .enforce.enforcer import Enforcer
    from .errors import EnforcementRefused, RenseiRoutingError
    from .plugins.hookspecs import hookimpl

#: Public name -> the module defining it: imported on first use (PEP 562), so ``import
#: rensei_routing`` (and the CLI's start-up) costs nothing until a name is used.
_LAZY: dict[str, str] = {
    "Account": ".core.routing.members",
    "ConsideredPolicy": ".core.routing.explanation",
    "DEFAULT_VOCABULARY": ".core.routing.vocabulary",
    "EnforcedRoute": ".core.enforce.route",
    "EnforcementRefused": ".errors",
    "Enforcer": ".enforce.enforcer",
    "Explanation": ".core.routing.explanation",
    "LegacyRoute": ".core.routing.members",
    "LiteralFamily": ".core.routing.vocabulary",
    "ModelRequirement": ".core.routing.members",
    "NotGoverned": ".core.enforce.bound",
    "PolicySnapshot": ".core.routing.policy",
    "Provenance": ".core.routing.vocabulary",
    "RejectedAccount": ".core.routing.explanation",
    "RenseiRoutingError": ".errors",
    "RepoIdentity": ".core.routing.members",
    "RequirementMapping": ".core.routing.policy",
    "RouteContext": ".core.routing.context",
    "RouteDecision": ".core.routing.decision",
    "RoutingAction": ".core.routing.policy",
    "RoutingMatch": ".core.routing.policy",
    "RoutingPolicy": ".core.routing.policy",
    "ValidationIssue": ".core.routing.validation",
    "Vocabulary": ".core.routing.vocabulary",
    "canonical_bytes": ".core.canonical",
    "canonical_worker_role": ".core.routing.vocabulary",
    "canonicalize_repo": ".core.routing.members",
    "decision_id": ".core.routing.resolver",
    "digest": ".core.canonical",
    "explain": ".core.routing.resolver",
    "explain_batch": ".core.routing.resolver",
    "explain_iter": ".core.routing.resolver",
    "hash_policies": ".core.routing.policy",
    "hookimpl": ".plugins.hookspecs",
    "precedence_level": ".core.routing.policy",
    "record_decision_id": ".core.routing.ids",
    "validate_policies": ".core.routing.validation",
}

__all__ = [
    "DEFAULT_VOCABULARY",
    "Account",
    "ConsideredPolicy",
    "EnforcedRoute",
    "EnforcementRefused",
    "Enforcer",
    "Explanation",
    "LegacyRoute",
    "LiteralFamily",
    "ModelRequirement",
    "NotGoverned",
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
