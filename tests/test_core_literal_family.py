"""D4 swept over a generated matrix: no managed policy ever serves a literal family off its lane
or with a model that fails ``satisfied_by``; a legacy route that defies it is reported as it ran."""

from __future__ import annotations

import itertools
from typing import Any

from rensei_routing import (
    DEFAULT_VOCABULARY,
    PolicySnapshot,
    RouteContext,
    RoutingPolicy,
    explain_batch,
)

FAMILIES = ["claude-opus", "claude-sonnet"]
MAPPED = [
    None,
    "claude-opus-4-1",
    "claude-sonnet-4-5",
    "glm-5.3",
    "us.anthropic.claude-opus-4",
    "claude-opus-qwen-mix",
]
LOCKS = [None, "anthropic", "zai-harness"]
POOLS = [[], ["zai-a"], ["zai-a", "anthropic-a"], ["anthropic-b", "anthropic-a"]]
MATCHES: list[dict[str, Any]] = [
    {},
    {"repo_classes": ["hydraflow"]},
    {"roles": ["reviewer"]},
    {"model_requirements": [{"kind": "literal_family", "value": "claude-opus"}]},
]
ACCOUNT_SETS = [
    [("zai-a", "zai-harness")],
    [("zai-a", "zai-harness"), ("anthropic-a", "anthropic")],
    [("anthropic-a", "anthropic"), ("anthropic-b", "anthropic")],
    [("zai-a", "zai-harness"), ("anthropic-b", "anthropic")],
]
LEGACY = [
    None,
    {
        "provider_binding": "zai",
        "account_id": "zai-a",
        "model": "glm-5.1",
        "mechanism": "credit-failover",
    },
    {"provider_binding": "anthropic", "account_id": "anthropic-a", "model": "claude-opus-4-1"},
]


def _policy_sets() -> list[list[RoutingPolicy]]:
    sets = []
    for i, (match, lock, pool, mapped, posture) in enumerate(
        itertools.product(MATCHES, LOCKS, POOLS, MAPPED, ["hold", "reject"])
    ):
        mapping = (
            []
            if mapped is None
            else [
                {
                    "requirement": {"kind": "literal_family", "value": FAMILIES[i % 2]},
                    "model": mapped,
                }
            ]
        )
        sets.append(
            [
                RoutingPolicy.from_dict(
                    {
                        "id": f"p{i}",
                        "match": match,
                        "action": {
                            "provider_lock": lock,
                            "account_pool": pool,
                            "requirement_map": mapping,
                            "on_unavailable": posture,
                        },
                    }
                )
            ]
        )
    return sets


def _contexts() -> list[RouteContext]:
    out = []
    for family, repo_class, principal, accounts, legacy in itertools.product(
        FAMILIES,
        ["hydraflow", "client"],
        ["reviewer", "adr_reviewer", "implementer"],
        ACCOUNT_SETS,
        LEGACY,
    ):
        out.append(
            RouteContext.from_dict(
                {
                    "repo": "t-rav/hydraflow",
                    "repo_class": repo_class,
                    "principal_id": principal,
                    "model_requirement": {"kind": "literal_family", "value": family},
                    "accounts": [{"account_id": a, "provider_binding": b} for a, b in accounts],
                    "legacy_route": legacy,
                }
            )
        )
    return out


def test_no_managed_policy_ever_routes_a_literal_family_off_its_lane() -> None:
    contexts = _contexts()
    policy_sets = _policy_sets()
    assert len(contexts) * len(policy_sets) >= 50_000
    checked = selected_by_policy = legacy_reported = 0
    for policies in policy_sets:
        for ctx, decision in zip(
            contexts, explain_batch(contexts, PolicySnapshot.of(policies)), strict=True
        ):
            checked += 1
            req = ctx.model_requirement
            assert req is not None
            family = DEFAULT_VOCABULARY.literal_families[req.value]
            if decision.policy_source == "managed-policy" and decision.outcome == "selected":
                selected_by_policy += 1
                assert decision.provider_binding in family.provenance.provider_bindings, decision
                if decision.effective_model is not None:
                    assert family.satisfied_by(decision.effective_model), decision
            if decision.policy_source == "legacy-compatibility":
                legacy_reported += 1
                legacy = ctx.legacy_route
                assert legacy is not None
                # Reported exactly as it ran, never attributed to a policy, never rewritten.
                assert decision.policy_id is None
                assert decision.precedence_level == 9
                assert (
                    decision.provider_binding,
                    decision.account_id,
                    decision.effective_model,
                ) == (
                    legacy.provider_binding,
                    legacy.account_id,
                    legacy.model,
                )
    assert checked >= 50_000
    # The sweep must actually exercise both sides of the invariant.
    assert selected_by_policy > 5_000 and legacy_reported > 1_000


def test_a_legacy_route_that_defies_the_requirement_is_reported_not_suppressed() -> None:
    ctx = RouteContext.from_dict(
        {
            "repo": "t-rav/hydraflow",
            "principal_id": "adr_reviewer",
            "model_requirement": "claude-opus",
            "legacy_route": {
                "provider_binding": "zai",
                "account_id": "zai-a",
                "model": "glm-5.1",
                "mechanism": "credit-failover",
            },
        }
    )
    (decision,) = explain_batch([ctx], PolicySnapshot.of([]))
    assert (decision.outcome, decision.reason, decision.policy_source) == (
        "selected",
        "no-policy-applies",
        "legacy-compatibility",
    )
    assert decision.effective_model == "glm-5.1" and decision.provider_binding == "zai"


COMPETITORS: list[dict[str, Any]] = [
    # A system-safety rule that locks literal Opus to the foreign lane: it wins on rung 1, and
    # the lane rule must still stop it from serving Opus there.
    {
        "id": "safety-opus-to-zai",
        "system_safety": True,
        "match": {"model_requirements": [{"kind": "literal_family", "value": "claude-opus"}]},
        "action": {"provider_lock": "zai-harness"},
    },
    # A competitor at rung 7 / 8 with the same priority: ties, outranks or conflicts with the
    # swept policy depending on its match.
    {
        "id": "zz-role-reviewer-zai",
        "match": {"roles": ["reviewer"]},
        "action": {"provider_lock": "zai-harness", "account_pool": ["zai-a"]},
    },
]


def test_literal_families_stay_on_lane_when_policies_compete() -> None:
    contexts = _contexts()
    competitors = [RoutingPolicy.from_dict(c) for c in COMPETITORS]
    checked = conflicts = safety_wins = 0
    for (swept,) in _policy_sets()[::2]:
        for competitor in competitors:
            snapshot = PolicySnapshot.of([swept, competitor])
            for ctx, decision in zip(contexts, explain_batch(contexts, snapshot), strict=True):
                checked += 1
                conflicts += decision.reason == "policy-conflict"
                safety_wins += decision.policy_id == "safety-opus-to-zai"
                if decision.policy_source == "managed-policy" and decision.outcome == "selected":
                    req = ctx.model_requirement
                    assert req is not None
                    family = DEFAULT_VOCABULARY.literal_families[req.value]
                    assert decision.provider_binding in family.provenance.provider_bindings
                    if decision.effective_model is not None:
                        assert family.satisfied_by(decision.effective_model)
    assert checked >= 50_000
    assert conflicts > 0 and safety_wins > 0  # both competitions actually happened


# --- The Anthropic lane beyond literal families (issue 8): bare Claude CLI aliases, Claude
# concrete ids, and any requirement a policy maps to a Claude model. -------------------------

CLAUDE_ALIASES = ("opus", "sonnet", "haiku")
LANE_REQUIREMENTS: list[Any] = [
    "haiku",
    "opus",
    " Sonnet ",
    "HAIKU",
    "claude-sonnet-4-5",
    "us.anthropic.claude-opus-4",
    "gpt-5",
    "glm-4.6",
    "high-reasoning",
    "balanced",
    "claude-opus",
]
LANE_MAPPED_KEYS = (
    "haiku",
    "opus",
    "sonnet",
    "claude-sonnet-4-5",
    "gpt-5",
    "glm-4.6",
    "high-reasoning",
    "balanced",
    "us.anthropic.claude-opus-4",
)
LANE_MAPPED = [None, "claude-opus-4-8", "anthropic.claude-haiku-4-5", "opus", "glm-5.3"]


def _is_claude(model: str) -> bool:
    """The test's own reading of "Anthropic provenance, or a bare Claude alias"."""
    low = model.strip().lower()
    if low in CLAUDE_ALIASES:
        return True
    bare = low
    for prefix in ("anthropic.",):
        bare = bare.removeprefix(prefix)
    head, dot, rest = bare.partition(".")
    if dot and rest.startswith("anthropic.") and 2 <= len(head) <= 8 and head.isalpha():
        bare = rest.removeprefix("anthropic.")
    foreign = any(m in low for m in ("glm", "qwen", "deepseek", "kimi"))
    return bare.startswith("claude-") and not foreign


def _needs_lane(ctx: RouteContext, mapped: str | None) -> bool:
    req = ctx.model_requirement
    assert req is not None
    if req.kind == "literal_family":
        return True
    if mapped is not None:
        return _is_claude(mapped)
    return req.kind == "concrete_model" and _is_claude(req.value)


def _lane_policies() -> list[tuple[RoutingPolicy, str | None]]:
    out = []
    for i, (lock, pool, mapped) in enumerate(itertools.product(LOCKS, POOLS, LANE_MAPPED)):
        action: dict[str, Any] = {"provider_lock": lock, "account_pool": pool}
        if mapped is not None:
            action["requirement_map"] = [
                {"requirement": r, "model": mapped} for r in LANE_MAPPED_KEYS
            ]
        out.append((RoutingPolicy.from_dict({"id": f"lane{i}", "action": action}), mapped))
    return out


def _lane_contexts() -> list[RouteContext]:
    return [
        RouteContext.from_dict(
            {
                "model_requirement": requirement,
                "accounts": [{"account_id": a, "provider_binding": b} for a, b in accounts],
            }
        )
        for requirement, accounts in itertools.product(LANE_REQUIREMENTS, ACCOUNT_SETS)
    ]


def test_aliases_and_mapped_claude_models_never_leave_the_anthropic_lane() -> None:
    contexts = _lane_contexts()
    checked = on_lane = off_lane = 0
    for policy, mapped in _lane_policies():
        for ctx, decision in zip(
            contexts, explain_batch(contexts, PolicySnapshot.of([policy])), strict=True
        ):
            checked += 1
            if decision.outcome != "selected":
                continue
            req = ctx.model_requirement
            assert req is not None
            # Only a literal family with a dishonest mapping fails the model step, so every
            # selected decision here used the policy's mapping, if it had one for this key.
            used = policy.action.mapped_model(req.key)
            if _needs_lane(ctx, used):
                on_lane += 1
                assert decision.provider_binding == "anthropic", (ctx, policy, decision)
            elif decision.provider_binding != "anthropic":
                off_lane += 1
            if used is not None:
                assert used == mapped and decision.effective_model == mapped
    assert checked >= 2_000
    # Both sides of the rule actually happened: aliases and Claude mappings selected on the
    # Anthropic lane, and mappings off Claude served by the harness lane.
    assert on_lane > 200 and off_lane > 50
