"""Policy-set validation: every author mistake in a well-formed set, each with its code.

Pure: no I/O, no clock. Never raises for a set ``from_dict`` built; one run finds every issue.

Bounded: equal-precedence conflicts are found through the per-dimension index the resolver
uses (:func:`~rensei_routing.core.routing.policy.dimension_index`) and counted with bitmasks, so a
set where every pair conflicts costs bit operations, not one object per pair. The report lists at
most :data:`MAX_ISSUES_PER_POLICY` issues under one policy id and :data:`MAX_ISSUES` in all,
and counts the rest (``ValidationReport.omitted``). A set with any issue always lists at least
one, so a capped report never makes an invalid set look valid.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .members import canonicalize_repo
from .policy import (
    MATCH_DIMENSIONS,
    POLICY_ID_PATTERN,
    RoutingPolicy,
    dimension_index,
    policy_canonical,
    precedence_level,
)
from .vocabulary import DEFAULT_VOCABULARY, LITERAL_FAMILY, Vocabulary

__all__ = [
    "MAX_ISSUES",
    "MAX_ISSUES_PER_POLICY",
    "ValidationIssue",
    "ValidationReport",
    "validate",
    "validate_policies",
]

#: At most this many issues are listed under one policy id (the rest are counted).
MAX_ISSUES_PER_POLICY: Final = 20
#: At most this many issues are listed in one report (the rest are counted).
MAX_ISSUES: Final = 1_000

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


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationReport:
    """What :func:`validate` found: the listed issues, sorted (policy id, code, detail), and
    how many more it found but did not list. Truthy when the set is valid."""

    issues: tuple[ValidationIssue, ...]
    omitted: int = 0

    @property
    def total(self) -> int:
        """Every issue found, listed or not."""
        return len(self.issues) + self.omitted

    def __bool__(self) -> bool:
        return self.total == 0


def _author_issues(
    items: Sequence[RoutingPolicy], vocabulary: Vocabulary
) -> Iterator[ValidationIssue]:
    """Every issue but equal-precedence conflicts: linear in the size of the set."""
    counts: dict[str, int] = defaultdict(int)
    for pol in items:
        counts[pol.id] += 1
    for pol_id, count in counts.items():
        if count > 1:
            yield ValidationIssue(
                code=DUPLICATE_POLICY_ID,
                policy_id=pol_id,
                detail=f"{count} policies share the id {pol_id!r}",
            )
    for pol in items:
        if not POLICY_ID_PATTERN.fullmatch(pol.id):
            yield ValidationIssue(
                code=INVALID_POLICY_ID,
                policy_id=pol.id,
                detail=f"id must match ^[a-z0-9][a-z0-9._-]{{0,63}}$, got {pol.id!r}",
            )
        for repo_id in sorted(pol.match.repo_ids):
            if canonicalize_repo(repo_id) != repo_id:
                yield ValidationIssue(
                    code=NON_CANONICAL_REPO_ID,
                    policy_id=pol.id,
                    detail=f"repo id {repo_id!r} is not canonical owner/repo",
                )
        seen: set[tuple[str, str]] = set()
        for mapping in pol.action.requirement_map:
            req = mapping.requirement
            label = f"{req.kind}:{req.value}"
            if req.key in seen:
                yield ValidationIssue(
                    code=DUPLICATE_REQUIREMENT_MAPPING,
                    policy_id=pol.id,
                    detail=f"requirement {label} is mapped more than once",
                )
            seen.add(req.key)
            if req.kind == LITERAL_FAMILY and not vocabulary.satisfied_by(
                req.kind, req.value, mapping.model
            ):
                yield ValidationIssue(
                    code=LITERAL_FAMILY_MAPPED_TO_FOREIGN_MODEL,
                    policy_id=pol.id,
                    detail=f"literal family {req.value} mapped to {mapping.model!r}, "
                    "which lacks the family's provenance",
                )
            if not pol.action.allows(mapping.model):
                yield ValidationIssue(
                    code=MAPPED_MODEL_NOT_IN_ALLOWED_PATTERNS,
                    policy_id=pol.id,
                    detail=f"{label} maps to {mapping.model!r}, outside allowed_patterns "
                    f"{list(pol.action.allowed_patterns)}",
                )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Conflicts:
    """The partners of ``group[index]`` (bits of ``partners``, in group order) that overlap it
    with a different action, at one (rung, priority): each pair once, under the lower id."""

    group: Sequence[RoutingPolicy]
    index: int
    partners: int
    rung: int
    priority: int

    def issues(self, limit: int) -> list[ValidationIssue]:
        """The first ``limit`` of these conflicts as issues."""
        out: list[ValidationIssue] = []
        mask, group = self.partners, self.group
        while mask and len(out) < limit:
            low = mask & -mask
            other = group[low.bit_length() - 1]
            out.append(
                ValidationIssue(
                    code=EQUAL_PRECEDENCE_CONFLICT,
                    policy_id=group[self.index].id,
                    detail=f"overlaps {other.id!r} at rung {self.rung}, priority "
                    f"{self.priority}, with a different action",
                )
            )
            mask ^= low
        return out


def _conflicts(items: Sequence[RoutingPolicy]) -> Iterator[_Conflicts]:
    """Equal-precedence conflicts (two enabled policies, same rung and priority, overlapping
    matches, different actions), found through the per-dimension index: for each policy, the
    policies its match can meet on every dimension, minus those with the same action."""
    groups: dict[tuple[int, int], list[RoutingPolicy]] = defaultdict(list)
    for pol in items:
        if pol.enabled:
            groups[(precedence_level(pol), pol.priority)].append(pol)
    for (rung, priority), group in groups.items():
        if len(group) < 2:
            continue
        group.sort(key=lambda pol: (pol.id, policy_canonical(pol)))
        wild, lookup = dimension_index(group, MATCH_DIMENSIONS)
        same_action: dict[bytes, int] = defaultdict(int)
        for bit, pol in enumerate(group):
            same_action[pol.action.canonical()] |= 1 << bit
        everyone = (1 << len(group)) - 1
        for i, pol in enumerate(group):
            # Partners above i only (each pair once), with another action.
            mask = everyone & ~((1 << (i + 1)) - 1) & ~same_action[pol.action.canonical()]
            for d, dim in enumerate(MATCH_DIMENSIONS):
                if not mask:
                    break
                values = pol.match.dimension(dim)
                if values:  # an empty set meets everyone on this dimension
                    reach = 0
                    for value in values:
                        reach |= lookup[d].get(value, wild[d])
                    mask &= reach
            if mask:
                yield _Conflicts(group=group, index=i, partners=mask, rung=rung, priority=priority)


def validate(
    policies: Iterable[RoutingPolicy],
    *,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    max_issues: int = MAX_ISSUES,
    max_per_policy: int = MAX_ISSUES_PER_POLICY,
) -> ValidationReport:
    """Every issue in a policy set, each with its code: at most ``max_per_policy`` listed under
    one policy id and ``max_issues`` in all (both at least 1), sorted (policy id, code,
    detail); the rest are counted in ``omitted``. Which ones are listed depends only on the
    set, never on its order.

    Codes: invalid-policy-id, duplicate-policy-id, non-canonical-repo-id,
    duplicate-requirement-mapping, literal-family-mapped-to-foreign-model,
    mapped-model-not-in-allowed-patterns, equal-precedence-conflict.
    """
    max_issues, max_per_policy = max(1, max_issues), max(1, max_per_policy)
    items = tuple(policies)
    found = 0
    by_policy: dict[str, list[ValidationIssue]] = defaultdict(list)
    for issue in _author_issues(items, vocabulary):
        by_policy[issue.policy_id or ""].append(issue)
        found += 1
    conflicts: dict[str, list[_Conflicts]] = defaultdict(list)
    for entry in _conflicts(items):
        conflicts[entry.group[entry.index].id].append(entry)
        found += entry.partners.bit_count()
    listed: list[ValidationIssue] = []
    for pol_id in sorted(by_policy.keys() | conflicts.keys()):
        room = min(max_per_policy, max_issues - len(listed))
        if room <= 0:
            break
        candidates = list(by_policy.get(pol_id, ()))
        for entry in conflicts.get(pol_id, ()):
            candidates.extend(entry.issues(room))
        candidates.sort(key=lambda i: (i.code, i.detail))
        listed.extend(candidates[:room])
    return ValidationReport(issues=tuple(listed), omitted=found - len(listed))


def validate_policies(
    policies: Iterable[RoutingPolicy], *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> tuple[ValidationIssue, ...]:
    """The issues :func:`validate` lists (empty exactly when the set is valid; capped, so use
    :func:`validate` for the count of issues not listed)."""
    return validate(policies, vocabulary=vocabulary).issues
