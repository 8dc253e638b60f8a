"""Edge decisions this project made explicit where SEMANTICS.md leaves room (see README)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RouteDecision, RoutingPolicy, explain

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
    # Unique ids, so every trace entry names exactly one policy.
    unique = list({d["id"]: d for d in docs}.values())
    policies = [RoutingPolicy.from_dict(d) for d in unique]
    decision = explain(RouteContext.from_dict(ctx_doc), PolicySnapshot.of(policies), trace="full")
    enabled = {p.id: p.enabled for p in policies}
    considered = decision.explanation.considered
    assert sorted(c.policy_id for c in considered) == sorted(enabled)
    for entry in considered:
        # "policy-disabled" exactly when the policy is disabled: the index and the per-policy
        # reasons never disagree about which policies could have matched.
        assert (entry.reason == "policy-disabled") == (not enabled[entry.policy_id])


@settings(max_examples=150)
@given(
    st.text(max_size=12),
    st.text(min_size=1, max_size=12).filter(lambda s: s.strip() == s),
    st.sampled_from(["ok", "corrupt", "absent"]),
)
def test_every_decision_reads_back_whatever_the_ids(policy_id, model, state) -> None:
    """An audit record must be re-checkable: ids are verbatim, even ones validation rejects."""
    policies = [
        RoutingPolicy.from_dict(
            {"id": policy_id, "action": {"requirement_map": {"balanced": model}}}
        ),
        RoutingPolicy.from_dict({"id": policy_id + " ", "priority": 1}),
    ]
    ctx = RouteContext.from_dict(
        {
            "model_requirement": "balanced",
            "accounts": [{"account_id": " padded ", "provider_binding": "anthropic"}],
            "legacy_route": {
                "provider_binding": " Zai ",
                "account_id": " a ",
                "model": model,
            },
        }
    )
    decision = explain(ctx, PolicySnapshot.of(policies), snapshot_state=state)
    assert RouteDecision.from_dict(decision.to_dict()) == decision


def test_a_vocabulary_extends_without_touching_the_default() -> None:
    from rensei_routing import DEFAULT_VOCABULARY, LiteralFamily, Provenance
    from rensei_routing.errors import ConfigurationError, MalformedError

    gemini = Provenance(
        name="google",
        pattern=r"^gemini-",
        provider_bindings=frozenset({"vertex"}),
    )
    vocab = DEFAULT_VOCABULARY.extended(
        roles=["Triager"],
        provider_bindings=["vertex"],
        literal_families=[LiteralFamily(name="gemini-pro", token="pro", provenance=gemini)],
    )
    assert "triager" in vocab.roles and "triager" not in DEFAULT_VOCABULARY.roles
    with pytest.raises(MalformedError):
        RouteContext.from_dict(
            {
                "principal_id": "x",
                "role": "x",
                "model_requirement": {"kind": "literal_family", "value": "gemini-pro"},
            }
        )
    ctx = RouteContext.from_dict(
        {
            "principal_id": "triager",
            "model_requirement": {"kind": "literal_family", "value": "gemini-pro"},
            "accounts": [
                {"account_id": "g", "provider_binding": "vertex"},
                {"account_id": "a", "provider_binding": "anthropic"},
            ],
        },
        vocabulary=vocab,
    )
    assert ctx.role == "triager"
    policy = RoutingPolicy.from_dict({"id": "p", "match": {"roles": ["triager"]}}, vocabulary=vocab)
    decision = explain(ctx, PolicySnapshot.of([policy]), vocabulary=vocab)
    # The new family's lane rule comes from the vocabulary, not from anything hard-wired.
    assert (decision.outcome, decision.account_id) == ("selected", "g")
    assert [(r.account_id, r.reason) for r in decision.explanation.rejected_accounts] == [
        ("a", "literal-family-incompatible")
    ]
    with pytest.raises(ConfigurationError):
        vocab.extended(
            literal_families=[LiteralFamily(name="gemini-pro", token="x", provenance=gemini)]
        )
