"""Routing policies: their shape, structural precedence, and the policy-set hash.

Pure: no I/O, no clock. ``from_dict`` refuses only what cannot be a policy at all; everything an
author can get wrong in a well-formed policy (bad id, non-canonical repo id, bad or duplicate
mapping, equal-precedence conflict) constructs fine and is reported by
:func:`rensei_routing.core.routing.validation.validate_policies`, so one run lists every problem.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .. import _parse as p
from ..canonical import SHA256_PREFIX, canonical_bytes
from .members import ModelRequirement, canonicalize_repo
from .vocabulary import DEFAULT_VOCABULARY, Vocabulary

__all__ = [
    "MAX_REVISION",
    "POLICY_ID_PATTERN",
    "PolicySnapshot",
    "RequirementMapping",
    "RoutingAction",
    "RoutingMatch",
    "RoutingPolicy",
    "account_key",
    "dimension_index",
    "hash_policies",
    "precedence_level",
]

POLICY_ID_PATTERN: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
MAX_PRIORITY: Final = 10_000
#: The largest revision number: RFC 8785 (and every JSON reader that parses numbers as
#: doubles) carries integers exactly only up to 2**53 - 1.
MAX_REVISION: Final = 2**53 - 1
_MAX_ID: Final = 256

MATCH_DIMENSIONS: Final = (
    "repo_ids",
    "repo_classes",
    "roles",
    "principal_ids",
    "model_requirements",
    "request_faces",
)


def account_key(account_id: str) -> str:
    """How pools compare account ids: stripped and lowercased (SEMANTICS, explain step 5)."""
    return account_id.strip().lower()


def _str_set(value: Any, path: p.Path, *, lower: bool = True) -> frozenset[str]:
    items = p.array(value, path)
    out = set()
    for i, item in enumerate(items):
        text = p.string(item, p.at(path, i), max_len=_MAX_ID)
        out.add(text.lower() if lower else text)
    return frozenset(out)


def _choice_set(value: Any, path: p.Path, allowed: Iterable[str], what: str) -> frozenset[str]:
    allowed = frozenset(allowed)
    return frozenset(
        p.choice(item, p.at(path, i), allowed, what=what)
        for i, item in enumerate(p.array(value, path))
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingMatch:
    """Six exact sets; an empty set matches anything. Values are stored normalised.

    Repo ids are canonicalised when they can be (a non-canonical one is kept as written and
    reported by validation; it can never match), principals and requirement values are
    lowercased, because both compare case-insensitively.
    """

    repo_ids: frozenset[str] = frozenset()
    repo_classes: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    principal_ids: frozenset[str] = frozenset()
    model_requirements: frozenset[ModelRequirement] = frozenset()
    request_faces: frozenset[str] = frozenset()
    _keys: frozenset[tuple[str, str]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def match_keys(self) -> frozenset[tuple[str, str]]:
        """The ``(kind, value)`` keys of ``model_requirements``."""
        keys = self._keys
        if keys is None:
            keys = frozenset(r.key for r in self.model_requirements)
            object.__setattr__(self, "_keys", keys)
        return keys

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo_ids": sorted(self.repo_ids),
            "repo_classes": sorted(self.repo_classes),
            "roles": sorted(self.roles),
            "principal_ids": sorted(self.principal_ids),
            "model_requirements": [
                r.to_dict() for r in sorted(self.model_requirements, key=lambda r: r.key)
            ],
            "request_faces": sorted(self.request_faces),
        }

    @classmethod
    def from_dict(
        cls, data: Any, *, path: p.Path = "", vocabulary: Vocabulary = DEFAULT_VOCABULARY
    ) -> RoutingMatch:
        """Raises: MalformedError."""
        d = p.obj(data, path, optional=MATCH_DIMENSIONS)
        repo_ids = set()
        for raw in _str_set(d.get("repo_ids", []), p.at(path, "repo_ids")):
            repo_ids.add(canonicalize_repo(raw) or raw)
        req_path = p.at(path, "model_requirements")
        requirements = set()
        for i, item in enumerate(p.array(d.get("model_requirements", []), req_path)):
            req = ModelRequirement.from_dict(item, path=p.at(req_path, i), vocabulary=vocabulary)
            requirements.add(ModelRequirement(kind=req.kind, value=req.value.lower()))
        return cls(
            repo_ids=frozenset(repo_ids),
            repo_classes=_choice_set(
                d.get("repo_classes", []),
                p.at(path, "repo_classes"),
                vocabulary.repo_classes,
                "repo class",
            ),
            roles=_choice_set(d.get("roles", []), p.at(path, "roles"), vocabulary.roles, "role"),
            principal_ids=_str_set(d.get("principal_ids", []), p.at(path, "principal_ids")),
            model_requirements=frozenset(requirements),
            request_faces=_choice_set(
                d.get("request_faces", []),
                p.at(path, "request_faces"),
                vocabulary.request_faces,
                "request face",
            ),
        )

    def dimension(self, name: str) -> frozenset[Any]:
        """The set for one dimension, with requirements as their ``(kind, value)`` keys."""
        if name == "model_requirements":
            return self.match_keys()
        value: frozenset[Any] = getattr(self, name)
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RequirementMapping:
    """One ``requirement_map`` entry: this requirement resolves to this model."""

    requirement: ModelRequirement
    model: str

    def to_dict(self) -> dict[str, Any]:
        return {"requirement": self.requirement.to_dict(), "model": self.model}


def _read_requirement_map(
    value: Any, path: p.Path, vocabulary: Vocabulary
) -> tuple[RequirementMapping, ...]:
    entries: list[RequirementMapping] = []
    if isinstance(value, Mapping):
        for key, model in value.items():
            kpath = p.at(path, str(key))
            req = ModelRequirement.from_dict(key, path=kpath, vocabulary=vocabulary)
            entries.append(
                RequirementMapping(requirement=req, model=p.string(model, kpath, max_len=256))
            )
    else:
        for i, item in enumerate(p.array(value, path)):
            ipath = p.at(path, i)
            d = p.obj(item, ipath, required=("requirement", "model"))
            req = ModelRequirement.from_dict(
                d["requirement"], path=p.at(ipath, "requirement"), vocabulary=vocabulary
            )
            model = p.string(d["model"], p.at(ipath, "model"), max_len=256)
            entries.append(RequirementMapping(requirement=req, model=model))
    normalised = (
        RequirementMapping(
            requirement=ModelRequirement(
                kind=e.requirement.kind, value=e.requirement.value.lower()
            ),
            model=e.model,
        )
        for e in entries
    )
    return tuple(sorted(normalised, key=lambda e: (e.requirement.key, e.model)))


#: The members of an action document, in the order its slots are declared.
ACTION_FIELDS: Final = (
    "provider_lock",
    "account_pool",
    "requirement_map",
    "allowed_patterns",
    "forbid_direct_bypass",
    "selection",
    "on_unavailable",
    "fallback_on",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingAction:
    """What a winning policy does. ``account_pool`` is ordered; the rest are sets or scalars."""

    provider_lock: str | None = None
    account_pool: tuple[str, ...] = ()
    requirement_map: tuple[RequirementMapping, ...] = ()
    allowed_patterns: tuple[str, ...] = ()
    forbid_direct_bypass: bool = False
    selection: str = "ordered"
    on_unavailable: str = "hold"
    fallback_on: tuple[str, ...] = ()
    _canonical: bytes | None = field(default=None, init=False, repr=False, compare=False)
    _allowed: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _maps: dict[tuple[str, str], str] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _order: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider_lock": self.provider_lock,
            "account_pool": list(self.account_pool),
            "requirement_map": [m.to_dict() for m in self.requirement_map],
            "allowed_patterns": list(self.allowed_patterns),
            "forbid_direct_bypass": self.forbid_direct_bypass,
            "selection": self.selection,
            "on_unavailable": self.on_unavailable,
            "fallback_on": list(self.fallback_on),
        }

    def canonical(self) -> bytes:
        """RFC 8785 bytes of the action: two actions are the same iff these are equal."""
        cached = self._canonical
        if cached is None:
            cached = canonical_bytes(self.to_dict())
            object.__setattr__(self, "_canonical", cached)
        return cached

    def mapped_model(self, key: tuple[str, str]) -> str | None:
        """The model the first mapping for requirement ``key`` names, if any."""
        maps = self._maps
        if maps is None:
            maps = {}
            for mapping in self.requirement_map:
                maps.setdefault(mapping.requirement.key, mapping.model)
            object.__setattr__(self, "_maps", maps)
        return maps.get(key)

    def pool_order(self) -> dict[str, int]:
        """Each pool account's position in ``account_pool``, keyed by :func:`account_key`.

        Membership and order compare ids stripped and lowercased (as principal ids are); when
        two entries compare equal, the first one's position counts.
        """
        order = self._order
        if order is None:
            order = {}
            for i, account in enumerate(self.account_pool):
                order.setdefault(account_key(account), i)
            object.__setattr__(self, "_order", order)
        return order

    def allows(self, model: str) -> bool:
        """Whether ``model`` matches ``allowed_patterns`` (fnmatch, any case; empty = all)."""
        if not self.allowed_patterns:
            return True
        regex = self._allowed
        if regex is None:
            regex = re.compile("|".join(fnmatch.translate(pat) for pat in self.allowed_patterns))
            object.__setattr__(self, "_allowed", regex)
        return regex.match(model.lower()) is not None

    @classmethod
    def from_dict(
        cls, data: Any, *, path: p.Path = "", vocabulary: Vocabulary = DEFAULT_VOCABULARY
    ) -> RoutingAction:
        """Raises: MalformedError."""
        d = p.obj(data, path, optional=ACTION_FIELDS)
        lock = d.get("provider_lock")
        pool_path = p.at(path, "account_pool")
        pool: list[str] = []
        for i, item in enumerate(p.array(d.get("account_pool", []), pool_path)):
            account = p.string(item, p.at(pool_path, i), max_len=_MAX_ID)
            if account in pool:
                raise p.fail(p.at(pool_path, i), f"account {account!r} is listed twice")
            pool.append(account)
        return cls(
            provider_lock=None
            if lock is None
            else p.choice(
                lock,
                p.at(path, "provider_lock"),
                vocabulary.provider_bindings,
                what="provider binding",
            ),
            account_pool=tuple(pool),
            requirement_map=_read_requirement_map(
                d.get("requirement_map", []), p.at(path, "requirement_map"), vocabulary
            ),
            allowed_patterns=tuple(
                sorted(_str_set(d.get("allowed_patterns", []), p.at(path, "allowed_patterns")))
            ),
            forbid_direct_bypass=p.boolean(
                d.get("forbid_direct_bypass", False), p.at(path, "forbid_direct_bypass")
            ),
            selection=p.choice(
                d.get("selection", "ordered"),
                p.at(path, "selection"),
                vocabulary.selections,
                what="selection",
            ),
            on_unavailable=p.choice(
                d.get("on_unavailable", "hold"),
                p.at(path, "on_unavailable"),
                vocabulary.on_unavailable,
                what="on_unavailable",
            ),
            fallback_on=tuple(
                sorted(_str_set(d.get("fallback_on", []), p.at(path, "fallback_on")))
            ),
        )


#: The members of a policy document, in the order its slots are declared.
POLICY_FIELDS: Final = (
    "id",
    "enabled",
    "priority",
    "system_safety",
    "description",
    "match",
    "action",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingPolicy:
    """One managed routing policy."""

    id: str
    enabled: bool = True
    priority: int = 0
    system_safety: bool = False
    description: str | None = None
    match: RoutingMatch = RoutingMatch()
    action: RoutingAction = RoutingAction()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "enabled": self.enabled,
            "priority": self.priority,
            "system_safety": self.system_safety,
            "description": self.description,
            "match": self.match.to_dict(),
            "action": self.action.to_dict(),
        }

    @classmethod
    def from_dict(
        cls, data: Any, *, path: p.Path = "", vocabulary: Vocabulary = DEFAULT_VOCABULARY
    ) -> RoutingPolicy:
        """Raises: MalformedError."""
        d = p.obj(data, path, required=("id",), optional=POLICY_FIELDS)
        return cls(
            # Read verbatim: an id that breaks the pattern (empty, too long, padded) is an
            # author mistake that validation reports, not a malformed document.
            id=p.string(d["id"], p.at(path, "id"), min_len=0, max_len=4096, verbatim=True),
            enabled=p.boolean(d.get("enabled", True), p.at(path, "enabled")),
            priority=p.integer(d.get("priority", 0), p.at(path, "priority"), lo=0, hi=MAX_PRIORITY),
            system_safety=p.boolean(d.get("system_safety", False), p.at(path, "system_safety")),
            description=p.opt_string(d.get("description"), p.at(path, "description")),
            match=RoutingMatch.from_dict(
                d.get("match", {}), path=p.at(path, "match"), vocabulary=vocabulary
            ),
            action=RoutingAction.from_dict(
                d.get("action", {}), path=p.at(path, "action"), vocabulary=vocabulary
            ),
        )


RUNG_NAMES: Final = {
    1: "system safety",
    2: "repo + role + requirement",
    3: "repo + role",
    4: "repo",
    5: "repo class + role",
    6: "repo class",
    7: "role or requirement",
    8: "global default",
    9: "legacy compatibility",
}


def dimension_index(
    members: Sequence[RoutingPolicy], dimensions: Sequence[str]
) -> tuple[list[int], list[dict[Any, int]]]:
    """Per-dimension bitmasks over ``members`` (bit ``i`` is ``members[i]``): for each
    dimension, the mask of members whose set is empty (they match anything) and, per value,
    the mask of members whose set holds it *or* is empty.

    ``lookup[d].get(v, wild[d])`` is then every member a value ``v`` meets on dimension ``d``:
    the resolver intersects these for a context's keys, validation ORs them over a policy's
    set to find the policies that overlap it, so both visit candidates, never all pairs.
    """
    wilds: list[int] = []
    lookups: list[dict[Any, int]] = []
    for dim in dimensions:
        wild = 0
        by_value: dict[Any, int] = {}
        for bit, policy in enumerate(members):
            values = policy.match.dimension(dim)
            if not values:
                wild |= 1 << bit
            for value in values:
                by_value[value] = by_value.get(value, 0) | (1 << bit)
        wilds.append(wild)
        lookups.append({value: mask | wild for value, mask in by_value.items()})
    return wilds, lookups


def precedence_level(policy: RoutingPolicy) -> int:
    """The precedence rung a policy's match earns (1 best .. 8 global default).

    1 system_safety; 2 repo+role+requirement; 3 repo+role; 4 repo; 5 class+role; 6 class;
    7 role or requirement; 8 nothing. "Role" means roles or principal_ids; faces never count.
    Rung 9 (legacy compatibility) is only ever a decision's, never a policy's.
    """
    if policy.system_safety:
        return 1
    m = policy.match
    role = bool(m.roles or m.principal_ids)
    requirement = bool(m.model_requirements)
    if m.repo_ids:
        if role and requirement:
            return 2
        return 3 if role else 4
    if m.repo_classes:
        return 5 if role else 6
    return 7 if role or requirement else 8


def rank_key(policy: RoutingPolicy) -> tuple[int, int, str]:
    """``(rung, -priority, id)``: sorting by it puts the strongest policy first."""
    return (precedence_level(policy), -policy.priority, policy.id)


def policy_canonical(policy: RoutingPolicy) -> bytes:
    """RFC 8785 bytes of one policy."""
    return canonical_bytes(policy.to_dict())


def hash_policies(policies: Iterable[RoutingPolicy]) -> str:
    """``sha256:`` + hex SHA-256 of the canonical array of the policies sorted by their own bytes.

    Independent of the order of ``policies`` (and of the order of values inside each set).
    """
    encoded = sorted(policy_canonical(pol) for pol in policies)
    return SHA256_PREFIX + hashlib.sha256(b"[" + b",".join(encoded) + b"]").hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicySnapshot:
    """An immutable policy set at a revision, with its content hash."""

    revision: int
    policies: tuple[RoutingPolicy, ...]
    content_hash: str
    _compiled: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Refuse a revision a decision could not carry, so ``explain`` stays total.

        Raises:
            MalformedError: ``revision`` is not an integer in 0..2**53 - 1.
        """
        revision = self.revision
        if type(revision) is not int or not 0 <= revision <= MAX_REVISION:
            raise p.fail("revision", f"expected an integer in 0..{MAX_REVISION}, got {revision!r}")

    @classmethod
    def of(cls, policies: Iterable[RoutingPolicy], *, revision: int = 0) -> PolicySnapshot:
        """A snapshot of ``policies`` with its hash computed."""
        items = tuple(policies)
        return cls(revision=revision, policies=items, content_hash=hash_policies(items))

    @classmethod
    def empty(cls) -> PolicySnapshot:
        """The empty snapshot at revision 0 (what an absent or corrupt store yields)."""
        return cls.of((), revision=0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "content_hash": self.content_hash,
            "policies": [pol.to_dict() for pol in self.policies],
        }

    @classmethod
    def from_dict(
        cls, data: Any, *, path: p.Path = "", vocabulary: Vocabulary = DEFAULT_VOCABULARY
    ) -> PolicySnapshot:
        """Read ``{"policies": [...], "revision"?, "content_hash"?}`` or a bare array of policies.

        A missing ``content_hash`` is computed; a present one is kept as written, so a caller
        can compare it with :func:`hash_policies` (see ``snapshot_state_of``).

        Raises:
            MalformedError: naming the first offending field path.
        """
        if isinstance(data, (list, tuple)):
            data = {"policies": data}
        d = p.obj(data, path, required=("policies",), optional=("revision", "content_hash"))
        ppath = p.at(path, "policies")
        policies = tuple(
            RoutingPolicy.from_dict(item, path=p.at(ppath, i), vocabulary=vocabulary)
            for i, item in enumerate(p.array(d["policies"], ppath))
        )
        revision = p.integer(d.get("revision", 0), p.at(path, "revision"), lo=0, hi=MAX_REVISION)
        declared = d.get("content_hash")
        content_hash = (
            hash_policies(policies)
            if declared is None
            else p.string(declared, p.at(path, "content_hash"), max_len=128)
        )
        return cls(revision=revision, policies=policies, content_hash=content_hash)

    def state(self) -> str:
        """``ok`` when ``content_hash`` matches the policies, else ``corrupt``."""
        return "ok" if hash_policies(self.policies) == self.content_hash else "corrupt"
