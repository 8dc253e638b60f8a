"""Shadow records (SEMANTICS.md "Shadow records"): legacy classification, transport, divergence,
and the record's read-back, against values a wrong rule would get wrong."""

from __future__ import annotations

import pytest

from rensei_routing import PolicySnapshot, RouteContext, RouteDecision, explain
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.shadow.compare import (
    ActualRoute,
    ShadowDecision,
    Stage,
    classify_legacy_mechanism,
    compare,
    is_shadow_payload,
    provider_binding_for,
    shadow_decision,
    transport_for,
)
from rensei_routing.errors import InputError, MalformedError


def _st(mechanism: str, provider: str) -> Stage:
    return Stage(mechanism=mechanism, provider=provider, detail=f"{mechanism}={provider}")


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        ([("role-dial", "zai")], 0),
        ([("role-dial", "zai"), ("fleet-ratchet", "zai"), ("credit-failover", "zai")], 0),
        ([("default", "claude"), ("fleet-ratchet", "gateway"), ("repo-provider", "gateway")], 1),
        ([("default", "claude"), ("fleet-ratchet", "gateway"), ("credit-failover", "zai")], 2),
        # moved away and back: the last move decided it
        ([("default", "claude"), ("repo-provider", "zai"), ("credit-failover", "claude")], 2),
        # case and space do not count as a move
        ([("role-dial", "zai"), ("fleet-ratchet", " ZAI ")], 0),
    ],
    ids=["single", "none-moved", "ratchet", "failover-last", "back-again", "case"],
)
def test_classify_legacy_mechanism(stages: list[tuple[str, str]], expected: int) -> None:
    built = [_st(m, prov) for m, prov in stages]
    assert classify_legacy_mechanism(built) is built[expected]


def test_classify_refuses_no_stages() -> None:
    with pytest.raises(InputError):
        classify_legacy_mechanism([])


@pytest.mark.parametrize(
    ("provider", "face", "expected"),
    [
        ("gateway", "agentic", "gateway"),
        ("gateway", "one-shot", "gateway"),
        ("zai", "one-shot", "direct-http"),
        ("zai", "agentic", "harness-direct"),
        ("claude", "one-shot", "harness-direct"),
        (" ZAI ", "one-shot", "direct-http"),
        ("zai", "unknown", "harness-direct"),
    ],
)
def test_transport_for(provider: str, face: str, expected: str) -> None:
    assert transport_for(provider, face) == expected


@pytest.mark.parametrize(
    ("provider", "model", "expected"),
    [
        ("gateway", "glm-5.3", "zai-harness"),
        ("gateway", "claude-opus-4-1", "anthropic"),
        ("zai", "glm-5.3", "zai-harness"),
        ("claude", "claude-opus-4-1", "anthropic"),
        ("anthropic", None, "anthropic"),
    ],
)
def test_provider_binding_for(provider: str, model: str | None, expected: str) -> None:
    assert provider_binding_for(provider, model) == expected


def _actual(binding: str = "anthropic", model: str | None = "claude-opus-4-1") -> ActualRoute:
    return ActualRoute(
        provider="claude" if binding == "anthropic" else "zai",
        provider_binding=binding,
        account_id="anthropic-primary" if binding == "anthropic" else "zai-main",
        model=model,
        mechanism="default",
        mechanism_detail="default=claude",
        transport="harness-direct",
    )


_POLICY = {
    "id": "p",
    "action": {
        "provider_lock": "zai-harness",
        "requirement_map": [
            {"requirement": {"kind": "capability", "value": "balanced"}, "model": "glm-5.3"}
        ],
    },
}
_ACCOUNTS = [
    {"account_id": "anthropic-primary", "provider_binding": "anthropic"},
    {"account_id": "zai-main", "provider_binding": "zai-harness"},
]


def _decide(requirement: str | None, actual: ActualRoute, policies: list[object]) -> RouteDecision:
    ctx = RouteContext.from_dict(
        {
            "principal_id": "implementer",
            "model_requirement": requirement,
            "accounts": _ACCOUNTS,
            "legacy_route": actual.legacy_route().to_dict(),
        }
    )
    return explain(ctx, PolicySnapshot.from_dict(policies))


def test_compare_every_divergence_kind() -> None:
    legacy = _actual()
    # no policy: legacy compatibility reports the route that ran -> none
    assert compare(_decide(None, legacy, []), legacy) == "none"
    # the policy moves provider and model
    moved = _decide("balanced", legacy, [_POLICY])
    assert compare(moved, legacy) == "provider-and-model"
    # same provider binding, other model
    on_zai = _actual("zai-harness", "glm-4.6")
    assert compare(moved, on_zai) == "model"
    # same model, other provider
    on_zai_same = _actual("zai-harness", "GLM-5.3 ")
    assert compare(moved, on_zai_same) == "none"
    assert compare(moved, _actual("anthropic", "glm-5.3")) == "provider"
    # capability with no mapping -> held -> not-selected
    held = _decide("high-reasoning", legacy, [_POLICY])
    assert compare(held, legacy) == "not-selected"


def test_shadow_decision_round_trips_and_is_checked() -> None:
    legacy = _actual()
    decision = _decide("balanced", legacy, [_POLICY])
    record = shadow_decision(
        recorded_at="2026-11-30T09:00:00Z",
        seam="agentic-runner",
        principal_id="implementer",
        actual=legacy,
        proposed=decision,
    )
    assert record.divergence == "provider-and-model" and record.agreed is False
    data = record.to_dict()
    assert is_shadow_payload(data) and not is_shadow_payload(decision.to_dict())
    assert ShadowDecision.from_dict(data) == record
    assert record.canonical() == canonical_bytes(data)
    # a record whose verdict is not its routes' is refused, naming the field
    lying = dict(data, divergence="none", agreed=True)
    with pytest.raises(MalformedError, match="divergence"):
        ShadowDecision.from_dict(lying)
    inconsistent = dict(data, agreed=True)
    with pytest.raises(MalformedError, match="agreed"):
        ShadowDecision.from_dict(inconsistent)
    with pytest.raises(MalformedError, match="record_type"):
        ShadowDecision.from_dict(dict(data, record_type="decision"))
