"""Edge decisions this project made explicit where SEMANTICS.md leaves room (see README)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain

from .strategies import context_dicts, policy_dicts

ZAI_ONLY = [{"account_id": "zai-1", "provider_binding": "zai-harness"}]


@pytest.mark.parametrize(
    ("mapped", "expected"),
    [
        (None, ("held", "literal-family-unsatisfiable", None)),
        ("claude-sonnet-4-5", ("held", "literal-family-unsatisfiable", None)),
        ("Claude-Opus-4-1", ("held", "literal-family-unsatisfiable", None)),
        ("glm-5.3", ("selected", "matched-policy", "glm-5.3")),
    ],
    ids=["unmapped", "identity-mapping", "moved-within-provenance", "moved-off-provenance"],
)
def test_a_concrete_claude_id_keeps_its_lane_unless_mapped_off_its_provenance(
    mapped: str | None, expected: tuple
) -> None:
    action = {} if mapped is None else {"requirement_map": {"claude-sonnet-4-5": mapped}}
    snapshot = PolicySnapshot.of([RoutingPolicy.from_dict({"id": "p", "action": action})])
    ctx = RouteContext.from_dict(
        {
            "model_requirement": {"kind": "concrete_model", "value": "claude-sonnet-4-5"},
            "accounts": ZAI_ONLY,
        }
    )
    decision = explain(ctx, snapshot)
    assert (decision.outcome, decision.reason, decision.effective_model) == expected
    if expected[0] == "held":
        assert [(r.account_id, r.reason) for r in decision.explanation.rejected_accounts] == [
            ("zai-1", "literal-family-incompatible")
        ]


def test_a_legacy_route_is_reported_verbatim() -> None:
    ctx = RouteContext.from_dict(
        {"legacy_route": {"provider_binding": "ZAI", "account_id": "Zai Main", "model": "GLM-5.1"}}
    )
    decision = explain(ctx, PolicySnapshot.of([]))
    assert (decision.provider_binding, decision.account_id, decision.effective_model) == (
        "ZAI",
        "Zai Main",
        "GLM-5.1",
    )


@settings(max_examples=150)
@given(st.lists(policy_dicts(), max_size=7), context_dicts())
def test_full_trace_reasons_agree_with_each_policy(docs, ctx_doc) -> None:
    policies = [RoutingPolicy.from_dict(d) for d in docs]
    decision = explain(RouteContext.from_dict(ctx_doc), PolicySnapshot.of(policies), trace="full")
    enabled = {p.id: p.enabled for p in policies}
    for entry in decision.explanation.considered:
        if entry.reason == "policy-disabled":
            assert enabled[entry.policy_id] is False or not all(
                p.enabled for p in policies if p.id == entry.policy_id
            )
        if not enabled[entry.policy_id] and len({p.id for p in policies}) == len(policies):
            assert entry.reason == "policy-disabled"
