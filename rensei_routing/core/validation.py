"""Policy-set validation: every author mistake in a well-formed set, each with its code.

Pure: no I/O, no clock. Never raises for a set ``from_dict`` built; one run reports every issue.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .context import canonicalize_repo
from .policy import (
    MATCH_DIMENSIONS,
    POLICY_ID_PATTERN,
    RoutingPolicy,
    policy_canonical,
    precedence_level,
)
from .vocabulary import DEFAULT_VOCABULARY, LITERAL_FAMILY, Vocabulary

__all__ = ["ValidationIssue", "validate_policies"]

# Validation codes (SEMANTICS.md, "Validation").
INVALID_POLICY_ID: Final = "invalid-policy-id"
DUPLICATE_POLICY_ID: Final = "duplicate-policy-id"
NON_CANONICAL_REPO_ID: Final = "non-canonical-repo-id"
DUPLICATE_REQUIREMENT_MAPPING: Final = "duplicate-requirement-mapping"
LITERAL_FAMILY_MAPPED_TO_FOREIGN_MODEL: Final = "literal-family-mapped-to-foreign-model"
MAPPED_MODEL_NOT_IN_ALLOWED_PATTERNS: Final = "mapped-model-not-in-allowed-patterns"
EQUAL_PRECEDENCE_CONFLICT: Final = "equal-precedence-conflict"


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationIssue:
    """One problem found by :func:`validate_policies`."""

    code: str
    policy_id: str | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "policy_id": self.policy_id, "detail": self.detail}


def _conflict_pairs(
    group: Sequence[RoutingPolicy],
) -> Iterable[tuple[RoutingPolicy, RoutingPolicy]]:
    """Pairs in one (rung, priority) group whose matches overlap: on every dimension, one side
    is empty or the two intersect. Indexed by value, so disjoint repo-scoped policies cost
    nothing."""
    everyone = (1 << len(group)) - 1
    wild: dict[str, int] = {}
    index: dict[str, dict[Any, int]] = {}
    sets = [{dim: pol.match.dimension(dim) for dim in MATCH_DIMENSIONS} for pol in group]
    for dim in MATCH_DIMENSIONS:
        wild[dim] = 0
        index[dim] = defaultdict(int)
        for i, dims in enumerate(sets):
            if not dims[dim]:
                wild[dim] |= 1 << i
            for value in dims[dim]:
                index[dim][value] |= 1 << i
    for i, dims in enumerate(sets):
        mask = everyone & ~((1 << (i + 1)) - 1)
        for dim in MATCH_DIMENSIONS:
            if not mask:
                break
            if dims[dim]:
                reach = wild[dim]
                for value in dims[dim]:
                    reach |= index[dim].get(value, 0)
                mask &= reach
        while mask:
            low = mask & -mask
            yield group[i], group[low.bit_length() - 1]
            mask ^= low


def validate_policies(
    policies: Iterable[RoutingPolicy], *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> tuple[ValidationIssue, ...]:
    """Every issue in a policy set, each with its code, sorted (policy id, code, detail).

    Codes: invalid-policy-id, duplicate-policy-id, non-canonical-repo-id,
    duplicate-requirement-mapping, literal-family-mapped-to-foreign-model,
    mapped-model-not-in-allowed-patterns, equal-precedence-conflict.
    """
    items = tuple(policies)
    issues: list[ValidationIssue] = []
    counts: dict[str, int] = defaultdict(int)
    for pol in items:
        counts[pol.id] += 1
    for pol_id, count in counts.items():
        if count > 1:
            issues.append(
                ValidationIssue(
                    code=DUPLICATE_POLICY_ID,
                    policy_id=pol_id,
                    detail=f"{count} policies share the id {pol_id!r}",
                )
            )
    for pol in items:
        if not POLICY_ID_PATTERN.fullmatch(pol.id):
            issues.append(
                ValidationIssue(
                    code=INVALID_POLICY_ID,
                    policy_id=pol.id,
                    detail=f"id must match ^[a-z0-9][a-z0-9._-]{{0,63}}$, got {pol.id!r}",
                )
            )
        for repo_id in sorted(pol.match.repo_ids):
            if canonicalize_repo(repo_id) != repo_id:
                issues.append(
                    ValidationIssue(
                        code=NON_CANONICAL_REPO_ID,
                        policy_id=pol.id,
                        detail=f"repo id {repo_id!r} is not canonical owner/repo",
                    )
                )
        seen: set[tuple[str, str]] = set()
        for mapping in pol.action.requirement_map:
            req = mapping.requirement
            label = f"{req.kind}:{req.value}"
            if req.key in seen:
                issues.append(
                    ValidationIssue(
                        code=DUPLICATE_REQUIREMENT_MAPPING,
                        policy_id=pol.id,
                        detail=f"requirement {label} is mapped more than once",
                    )
                )
            seen.add(req.key)
            if req.kind == LITERAL_FAMILY and not vocabulary.satisfied_by(
                req.kind, req.value, mapping.model
            ):
                issues.append(
                    ValidationIssue(
                        code=LITERAL_FAMILY_MAPPED_TO_FOREIGN_MODEL,
                        policy_id=pol.id,
                        detail=f"literal family {req.value} mapped to {mapping.model!r}, "
                        "which lacks the family's provenance",
                    )
                )
            if not pol.action.allows(mapping.model):
                issues.append(
                    ValidationIssue(
                        code=MAPPED_MODEL_NOT_IN_ALLOWED_PATTERNS,
                        policy_id=pol.id,
                        detail=f"{label} maps to {mapping.model!r}, outside allowed_patterns "
                        f"{list(pol.action.allowed_patterns)}",
                    )
                )
    groups: dict[tuple[int, int], list[RoutingPolicy]] = defaultdict(list)
    for pol in items:
        if pol.enabled:
            groups[(precedence_level(pol), pol.priority)].append(pol)
    for (rung, priority), group in groups.items():
        if len(group) < 2:
            continue
        group.sort(key=lambda pol: (pol.id, policy_canonical(pol)))
        for a, b in _conflict_pairs(group):
            if a.action.canonical() != b.action.canonical():
                issues.append(
                    ValidationIssue(
                        code=EQUAL_PRECEDENCE_CONFLICT,
                        policy_id=a.id,
                        detail=f"overlaps {b.id!r} at rung {rung}, priority {priority}, "
                        "with a different action",
                    )
                )
    issues.sort(key=lambda i: (i.policy_id or "", i.code, i.detail))
    return tuple(issues)
