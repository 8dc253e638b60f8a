"""Realistic, deterministic inputs for the benchmarks: valid policy sets, contexts, payloads.

Policy sets look like an organisation's: mostly repo-scoped policies (repo, repo + role,
repo + role + requirement, now and then a principal- or face-specific one) over many distinct
repositories, a bounded number of class-, role-, principal- and requirement-scoped policies,
one system-safety rule, one global default, a few disabled policies, account pools, provider
locks and requirement maps. Every set is checked with ``validate_policies``: a benchmark over an
invalid set would measure a configuration nobody can save.

Contexts are drawn over the same repositories, roles, classes and requirements, each with a few
accounts (some draining, disabled or unconfigured) and, usually, the legacy route the spawn took.
Everything is seeded, so two runs build the same inputs.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any, Final

from rensei_routing import (
    Account,
    LegacyRoute,
    ModelRequirement,
    PolicySnapshot,
    RepoIdentity,
    RouteContext,
    RouteDecision,
    RoutingPolicy,
    explain_batch,
    validate_policies,
)

__all__ = [
    "HOST_ACCOUNTS",
    "PolicySet",
    "build_contexts",
    "build_policy_set",
    "decision_payloads",
    "policy_set",
]

ROLES: Final = (
    "explorer",
    "planner",
    "architect",
    "implementer",
    "debugger",
    "test_adequacy",
    "reviewer",
)
CLASSES: Final = ("hydraflow", "client", "personal")
FACES: Final = ("agentic", "one-shot", "unknown")
LOOP_PRINCIPALS: Final = ("adr_reviewer", "triage_bot", "hitl_loop")
CAPABILITIES: Final = ("high-reasoning", "balanced")
FAMILIES: Final = ("claude-opus", "claude-sonnet")
CONCRETE_MODELS: Final = ("claude-opus-4-1", "claude-sonnet-4-5", "glm-5.3", "glm-4.6")

#: The accounts a host can route to: (account id, provider binding).
HOST_ACCOUNTS: Final = (
    ("anthropic-primary", "anthropic"),
    ("anthropic-backup", "anthropic"),
    ("anthropic-team-1", "anthropic"),
    ("anthropic-team-2", "anthropic"),
    ("anthropic-team-3", "anthropic"),
    ("zai-main", "zai-harness"),
    ("zai-backup", "zai-harness"),
)

_ANTHROPIC_MAP: Final = [
    {"requirement": {"kind": "capability", "value": "high-reasoning"}, "model": "claude-opus-4-1"},
    {"requirement": {"kind": "capability", "value": "balanced"}, "model": "claude-sonnet-4-5"},
]
_FAMILY_MAP: Final = [
    {"requirement": {"kind": "literal_family", "value": "claude-opus"}, "model": "claude-opus-4-1"},
    {
        "requirement": {"kind": "literal_family", "value": "claude-sonnet"},
        "model": "claude-sonnet-4-5",
    },
]
_ZAI_MAP: Final = [
    {"requirement": {"kind": "capability", "value": "high-reasoning"}, "model": "glm-5.3"},
    {"requirement": {"kind": "capability", "value": "balanced"}, "model": "glm-4.6"},
]


def _action(rng: random.Random) -> dict[str, Any]:
    """One of the action shapes an operator writes: pools, locks, maps, allowed patterns."""
    shape = rng.randrange(6)
    if shape == 0:  # anthropic, a preferred pool order
        pool = rng.sample([a for a, b in HOST_ACCOUNTS if b == "anthropic"], rng.randint(1, 3))
        return {"account_pool": pool, "requirement_map": _ANTHROPIC_MAP + _FAMILY_MAP}
    if shape == 1:  # locked to anthropic, claude models only
        return {
            "provider_lock": "anthropic",
            "requirement_map": _ANTHROPIC_MAP,
            "allowed_patterns": ["claude-*"],
        }
    if shape == 2:  # locked to the z.ai harness, GLM only
        return {
            "provider_lock": "zai-harness",
            "account_pool": rng.sample(["zai-main", "zai-backup"], 2),
            "requirement_map": _ZAI_MAP,
            "allowed_patterns": ["glm-*"],
        }
    if shape == 3:  # mixed pool, reject rather than hold when nothing is eligible
        return {
            "account_pool": ["anthropic-primary", "zai-main"],
            "requirement_map": _ANTHROPIC_MAP,
            "on_unavailable": "reject",
        }
    if shape == 4:  # z.ai lock without a pool
        return {"provider_lock": "zai-harness", "requirement_map": _ZAI_MAP[:1]}
    return {"requirement_map": _ANTHROPIC_MAP, "fallback_on": ["no-eligible-account"]}


def _bounded_policies(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """Up to ``count`` non-repo policies: safety, class, class + role, role, principal,
    requirement; each at its own priority so no two of one rung can tie."""
    out: list[dict[str, Any]] = [
        {
            "id": "safety-opus-stays-anthropic",
            "system_safety": True,
            "priority": 9_000,
            "match": {"model_requirements": [{"kind": "literal_family", "value": "claude-opus"}]},
            "action": {
                "provider_lock": "anthropic",
                "account_pool": ["anthropic-primary", "anthropic-backup"],
                "requirement_map": _FAMILY_MAP[:1],
            },
        },
        {
            "id": "class-client-anthropic",
            "match": {"repo_classes": ["client"]},
            "action": {"provider_lock": "anthropic", "requirement_map": _ANTHROPIC_MAP},
        },
        {
            "id": "class-hydraflow-reviewer-zai",
            "match": {"repo_classes": ["hydraflow"], "roles": ["reviewer"]},
            "action": {
                "provider_lock": "zai-harness",
                "requirement_map": _ZAI_MAP,
                "allowed_patterns": ["glm-*"],
            },
        },
        {
            "id": "principal-adr-reviewer",
            "match": {"principal_ids": ["adr_reviewer"]},
            "action": {"provider_lock": "zai-harness", "requirement_map": _ZAI_MAP[:1]},
        },
        {
            "id": "experiment-personal-zai",
            "enabled": False,
            "match": {"repo_classes": ["personal"]},
            "action": {"provider_lock": "zai-harness"},
        },
    ]
    for cls in CLASSES:
        out.append({"id": f"class-{cls}", "match": {"repo_classes": [cls]}, "action": _action(rng)})
        for role in ROLES:
            out.append(
                {
                    "id": f"class-{cls}-{role.replace('_', '-')}",
                    "match": {"repo_classes": [cls], "roles": [role]},
                    "action": _action(rng),
                }
            )
    for role in ROLES:
        out.append(
            {
                "id": f"role-{role.replace('_', '-')}",
                "match": {"roles": [role]},
                "action": _action(rng),
            }
        )
    for principal in LOOP_PRINCIPALS[1:]:
        out.append(
            {
                "id": f"principal-{principal.replace('_', '-')}",
                "match": {"principal_ids": [principal]},
                "action": _action(rng),
            }
        )
    for cap in CAPABILITIES:
        out.append(
            {
                "id": f"requirement-{cap}",
                "match": {"model_requirements": [{"kind": "capability", "value": cap}]},
                "action": _action(rng),
            }
        )
    out.append(
        {
            "id": "requirement-glm-direct",
            "match": {"model_requirements": [{"kind": "concrete_model", "value": "glm-5.3"}]},
            "action": {"provider_lock": "zai-harness", "allowed_patterns": ["glm-*"]},
        }
    )
    # The five named policies always come first; the rest are a seeded sample.
    head, rest = out[:5], out[5:]
    rng.shuffle(rest)
    chosen = (head + rest)[:count]
    for i, doc in enumerate(chosen):
        doc.setdefault("priority", 1_000 - 10 * i)
        if i >= 5 and rng.random() < 0.05:
            doc["enabled"] = False
    return chosen


def _cluster(index: int, repos: list[str], rng: random.Random) -> list[dict[str, Any]]:
    """The policies of one repository group: repo, repo + role, repo + role + requirement."""
    stem = f"repo-{index:05d}"
    match_repos = {"repo_ids": repos}
    out: list[dict[str, Any]] = [
        {"id": stem, "priority": 10, "match": dict(match_repos), "action": _action(rng)}
    ]
    roles = rng.sample(ROLES, rng.choice((0, 1, 1, 2, 2, 3)))
    for role in roles:
        out.append(
            {
                "id": f"{stem}-{role.replace('_', '-')}",
                "priority": 10,
                "match": {**match_repos, "roles": [role]},
                "action": _action(rng),
            }
        )
    if roles and rng.random() < 0.08:  # a face-specific override, above the role policy
        out.append(
            {
                "id": f"{stem}-{roles[0].replace('_', '-')}-agentic",
                "priority": 15,
                "match": {**match_repos, "roles": [roles[0]], "request_faces": ["agentic"]},
                "action": _action(rng),
            }
        )
    if rng.random() < 0.05:  # a loop principal on this repo, above every role policy
        out.append(
            {
                "id": f"{stem}-adr-reviewer",
                "priority": 20,
                "match": {**match_repos, "principal_ids": ["adr_reviewer"]},
                "action": _action(rng),
            }
        )
    pairs = {
        (rng.choice(roles or ROLES), rng.choice(CAPABILITIES)) for _ in range(rng.randint(0, 2))
    }
    for role, cap in sorted(pairs):
        out.append(
            {
                "id": f"{stem}-{role.replace('_', '-')}-{cap}",
                "priority": 10,
                "match": {
                    **match_repos,
                    "roles": [role],
                    "model_requirements": [{"kind": "capability", "value": cap}],
                },
                "action": _action(rng),
            }
        )
    for doc in out:
        if rng.random() < 0.04:
            doc["enabled"] = False
    return out


@dataclass(frozen=True, slots=True)
class PolicySet:
    """A valid policy set and the repositories (with their classes) its policies name."""

    policies: tuple[RoutingPolicy, ...]
    documents: tuple[dict[str, Any], ...]
    repos: tuple[tuple[str, str], ...]


def _broad_policies(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """``count`` class-, class + role-, role- and requirement-scoped policies, each at its own
    priority (so none can tie): the shape of an org whose contexts each match ~80 policies."""
    requirements = [
        {"kind": "capability", "value": "high-reasoning"},
        {"kind": "capability", "value": "balanced"},
        {"kind": "literal_family", "value": "claude-opus"},
        {"kind": "literal_family", "value": "claude-sonnet"},
    ]
    out: list[dict[str, Any]] = []
    for i in range(count):
        kind = i % 8
        match: dict[str, Any]
        if kind in (0, 1):
            match = {"repo_classes": [rng.choice(CLASSES)]}
        elif kind in (2, 3):
            match = {"repo_classes": [rng.choice(CLASSES)], "roles": [rng.choice(ROLES)]}
        elif kind in (4, 5):
            match = {"roles": [rng.choice(ROLES)]}
        else:
            match = {"model_requirements": [rng.choice(requirements[:2])]}
        out.append(
            {"id": f"broad-{i:04d}", "priority": 5_000 - i, "match": match, "action": _action(rng)}
        )
    return out


def build_policy_set(size: int, *, seed: int = 4, shape: str = "repo") -> PolicySet:
    """Exactly ``size`` valid policies (``size`` >= 2).

    ``shape="repo"`` (the default) is mostly repo-scoped with a bounded (up to 40) set of
    broader rules; ``shape="broad"`` gives 45% of the set to class-, class + role-, role- and
    requirement-scoped rules, so a context matches ~80 of 1,000 policies.

    Raises:
        AssertionError: the generated set does not validate (a bug in this generator).
    """
    rng = random.Random(f"policies-{seed}-{size}" + ("" if shape == "repo" else f"-{shape}"))
    docs: list[dict[str, Any]] = [
        {
            "id": "global-default",
            "priority": 0,
            "match": {},
            "action": {
                "account_pool": ["anthropic-primary", "anthropic-backup"],
                "requirement_map": _ANTHROPIC_MAP + _FAMILY_MAP,
            },
        }
    ]
    bounded = min(40, max(4, size // 6), size - 2)
    docs.extend(_bounded_policies(bounded, rng))
    if shape == "broad":
        docs.extend(_broad_policies(size * 45 // 100 - len(docs), rng))
    repos: list[tuple[str, str]] = []
    index = 0
    while len(docs) < size:
        owner = f"org{rng.randrange(max(2, size // 40)):03d}"
        group = [f"{owner}/svc-{index:05d}-{k}" for k in range(rng.choice((1, 1, 1, 1, 2, 3)))]
        cls = rng.choice(CLASSES)
        repos.extend((repo, cls) for repo in group)
        docs.extend(_cluster(index, group, rng)[: size - len(docs)])
        index += 1
    policies = tuple(RoutingPolicy.from_dict(d, path=f"policies[{i}]") for i, d in enumerate(docs))
    issues = validate_policies(policies)
    assert not issues, f"generated policy set of {size} is invalid: {issues[:3]}"
    assert len(policies) == size
    return PolicySet(policies=policies, documents=tuple(docs), repos=tuple(repos))


def _account_templates(rng: random.Random) -> list[tuple[tuple[str, str, bool, str], ...]]:
    """Account lists a host reports: 2 to 4 accounts, a few unconfigured, draining or disabled."""
    out = []
    for _ in range(256):
        chosen = rng.sample(HOST_ACCOUNTS, rng.randint(2, 4))
        accounts = []
        for account_id, binding in chosen:
            roll = rng.random()
            if roll < 0.03:
                accounts.append((account_id, binding, False, "active"))
            elif roll < 0.06:
                accounts.append((account_id, binding, True, "draining"))
            elif roll < 0.08:
                accounts.append((account_id, binding, True, "disabled"))
            else:
                accounts.append((account_id, binding, True, "active"))
        out.append(tuple(accounts))
    return out


#: Model requirements by weight: half capability classes, a fifth literal families, some
#: concrete model ids, and some spawns that ask for nothing in particular.
_REQUIREMENTS: Final = (
    *[("capability", "high-reasoning")] * 6,
    *[("capability", "balanced")] * 4,
    *[("literal_family", "claude-opus")] * 2,
    *[("literal_family", "claude-sonnet")] * 2,
    ("concrete_model", "claude-opus-4-1"),
    ("concrete_model", "claude-sonnet-4-5"),
    ("concrete_model", "glm-5.3"),
    None,
    None,
    None,
)
_PRINCIPALS: Final = (*ROLES * 5, *ROLES[:3], *LOOP_PRINCIPALS * 2, None, None, None, None)
_MECHANISMS: Final = ("default", "role-dial", "repo-provider")


def build_contexts(policy_set: PolicySet, count: int, *, seed: int = 4) -> list[RouteContext]:
    """``count`` contexts over the set's repositories, every one built from fresh objects (no
    value shares a cache with another context, as when each is parsed from its own line).

    85% name a repository the policies know (5% of those without a class), 8% a canonical
    repository no policy names, 4% a lossy runtime slug, 3% none; ~80% carry a canonical role,
    ~12% a loop principal that is not a role; 70% carry the legacy route.
    """
    rng = random.Random(f"contexts-{seed}-{len(policy_set.policies)}-{count}")
    r = rng.random
    repos = policy_set.repos or (("acme/widgets", "client"),)
    outside = [f"outside/project-{i}" for i in range(500)]
    templates = _account_templates(rng)
    classes = (*CLASSES, None)
    out = []
    for _ in range(count):
        roll = r()
        if roll < 0.85:
            name, cls = repos[int(r() * len(repos))]
            repo: RepoIdentity | None = RepoIdentity.from_canonical(name)
            repo_class: str | None = cls if r() < 0.95 else None
        elif roll < 0.93:
            repo = RepoIdentity.from_canonical(outside[int(r() * 500)])
            repo_class = classes[int(r() * 4)]
        elif roll < 0.97:
            name, cls = repos[int(r() * len(repos))]
            repo = RepoIdentity.from_runtime_slug(name.replace("/", "-"))
            repo_class = cls
        else:
            repo, repo_class = None, None
        principal = _PRINCIPALS[int(r() * len(_PRINCIPALS))]
        requirement = _REQUIREMENTS[int(r() * len(_REQUIREMENTS))]
        legacy = None
        if r() < 0.7:
            legacy = LegacyRoute(
                provider_binding="anthropic",
                account_id="anthropic-primary",
                model="claude-sonnet-4-5",
                mechanism=_MECHANISMS[int(r() * 3)],
            )
        out.append(
            RouteContext(
                repo=repo,
                repo_class=repo_class,
                principal_id=principal,
                role=principal if principal in ROLES else None,
                model_requirement=None
                if requirement is None
                else ModelRequirement(kind=requirement[0], value=requirement[1]),
                request_face=FACES[int(r() * 3)],
                legacy_route=legacy,
                accounts=tuple(
                    Account(
                        account_id=a,
                        provider_binding=b,
                        configured=c,
                        administrative_state=s,
                    )
                    for a, b, c, s in templates[int(r() * 256)]
                ),
            )
        )
    return out


@functools.cache
def policy_set(size: int, shape: str = "repo") -> PolicySet:
    """:func:`build_policy_set`, built once per process for each size and shape."""
    return build_policy_set(size, shape=shape)


@functools.cache
def decisions(count: int, policies: int = 1_000, seed: int = 11) -> tuple[RouteDecision, ...]:
    """``count`` decisions over a ``policies``-policy set (default trace)."""
    chosen = policy_set(policies)
    snapshot = PolicySnapshot.of(chosen.policies, revision=7)
    return tuple(explain_batch(build_contexts(chosen, count, seed=seed), snapshot))


def decision_payloads(count: int, policies: int = 1_000) -> tuple[dict[str, Any], ...]:
    """``count`` audit payloads shaped like real ones: ``RouteDecision.to_dict()`` of decisions
    over a ``policies``-policy set (default trace), the JSON form of what ``--record`` stores."""
    return tuple(d.to_dict() for d in decisions(count, policies))


def decision_dicts(count: int, seed: int = 21) -> tuple[dict[str, Any], ...]:
    """``count`` plain decision-shaped dicts: 15 fields, ~465 canonical bytes each,
    no explanation trace; what an integration that logs its own summary of a decision writes."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        out.append(
            {
                "decision_id": f"dec_{rng.getrandbits(96):024x}",
                "outcome": rng.choice(("selected", "fallback", "denied")),
                "reason": rng.choice(("policy-match", "default", "no-eligible-account")),
                "policy_id": f"pol-{rng.randrange(1_000):04d}",
                "policy_revision": rng.randrange(1, 500),
                "account": f"acct-{rng.randrange(40)}",
                "model": rng.choice(("claude-sonnet-4", "claude-opus-4", "claude-haiku-4")),
                "provider": "anthropic",
                "project": f"proj-{rng.randrange(200)}",
                "repo": f"org/repo-{rng.randrange(5_000)}",
                "pool": rng.choice(("default", "batch", "interactive")),
                "ruleset_rev": f"r-{rng.randrange(10_000):06d}",
                "snapshot_hash": f"sha256:{rng.getrandbits(256):064x}",
                "recorded_by": f"host-{rng.randrange(64):02d}.example",
                "context": {"task": "build", "priority": rng.randrange(5), "labels": ["ci"]},
            }
        )
    return tuple(out)
