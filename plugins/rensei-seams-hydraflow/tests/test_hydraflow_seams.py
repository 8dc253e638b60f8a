"""The four HydraFlow seams: faces, stages, classifiers and transports, through the host's own
plugin manager and record types (document 001 §D7)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rensei_seams_hydraflow import SEAMS

from rensei_routing import PolicySnapshot, RouteContext, explain
from rensei_routing.core.shadow.compare import (
    ActualRoute,
    Stage,
    provider_binding_for,
    shadow_decision,
    stored_actual,
)
from rensei_routing.plugins.manager import (
    UNCLASSIFIED,
    RenseiPluginManager,
    safe_classify,
    seam_registry,
)
from rensei_routing.plugins.testing import (
    assert_classifier_total,
    assert_plugin_ok,
    stage_sequences_strategy,
)

_RUNNER = ("default", "role-dial", "fleet-ratchet", "repo-provider", "credit-failover")
_DIALLED = ("maintenance-default", "role-dial", "fleet-ratchet")
EXPECTED = {
    "agentic-runner": ("agentic", _RUNNER),
    "subprocess-runner": ("agentic", _RUNNER),
    "lightweight-agent": ("one-shot", _DIALLED),
    "streaming-agent": ("agentic", _DIALLED),
}


def test_the_plugin_passes_every_host_check(rensei_pm: RenseiPluginManager) -> None:
    assert_plugin_ok(rensei_pm, "hydraflow", count=1000)


def test_four_seams_with_their_faces_and_ordered_stages(rensei_pm: RenseiPluginManager) -> None:
    registry = seam_registry(rensei_pm)
    mine = {n for n, owner in registry.owners.items() if owner == "hydraflow"}
    assert mine == set(EXPECTED)
    for name, (face, stages) in EXPECTED.items():
        seam = registry.get(name)
        assert seam.request_face == face
        # the default first: a route-only spawn that names no mechanism ran on the default
        assert seam.stages == stages


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_classifier_is_total_seeded(name: str) -> None:
    assert_classifier_total(SEAMS[name], count=2000, seed=7)


@pytest.mark.parametrize("name", sorted(EXPECTED))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_classifier_names_the_last_move(name: str, data: st.DataObject) -> None:
    stages = data.draw(stage_sequences_strategy(SEAMS[name]))
    got = SEAMS[name].classifier(stages)
    lanes = [s.provider.strip().lower() for s in stages]
    moves = [i for i in range(1, len(stages)) if lanes[i] != lanes[i - 1]]
    expected = stages[moves[-1]] if moves else stages[0]
    assert (got.mechanism, got.provider) == (expected.mechanism, expected.provider)
    assert got.detail == (expected.detail or f"provider={expected.provider.strip().lower()}")


def _zai_dialled(seam: str) -> ActualRoute:
    registry_seam = SEAMS[seam]
    stages = [Stage(mechanism=name, provider="zai") for name in registry_seam.stages[1:]]
    decided = registry_seam.classifier(stages)
    return ActualRoute(
        provider="zai",
        provider_binding=provider_binding_for("zai", "glm-5.3"),
        account_id="zai-main",
        model="glm-5.3",
        mechanism=decided.mechanism,
        mechanism_detail=decided.detail,
        transport=registry_seam.transport("zai"),
    )


@pytest.mark.parametrize(
    ("seam", "transport"),
    [
        ("agentic-runner", "harness-direct"),
        ("subprocess-runner", "harness-direct"),
        ("streaming-agent", "harness-direct"),
        ("lightweight-agent", "direct-http"),
    ],
)
def test_a_role_dial_pinned_to_zai_is_named_not_laundered(seam: str, transport: str) -> None:
    actual = _zai_dialled(seam)
    ctx = RouteContext.from_dict(
        {"principal_id": "reviewer", "legacy_route": actual.legacy_route().to_dict()}
    )
    decision = explain(ctx, PolicySnapshot.empty())
    record = shadow_decision(
        recorded_at="2026-01-01T00:00:00Z",
        seam=seam,
        principal_id="reviewer",
        actual=actual,
        proposed=decision,
    ).to_dict()
    stored = stored_actual(record)  # the rest of the route is the context's legacy route
    assert stored["mechanism"] == "role-dial"
    assert stored["mechanism_detail"] == "provider=zai"
    assert stored["transport"] == transport
    assert record["proposed"]["policy_source"] == "legacy-compatibility"
    assert record["agreed"] is True


def test_the_streaming_seams_ratchet_traffic_is_gateway_transport() -> None:
    seam = SEAMS["streaming-agent"]
    stages = [
        Stage(mechanism="maintenance-default", provider="claude"),
        Stage(mechanism="fleet-ratchet", provider="gateway"),
    ]
    decided = seam.classifier(stages)
    assert (decided.mechanism, decided.detail) == ("fleet-ratchet", "provider=gateway")
    assert seam.transport(decided.provider) == "gateway"


@pytest.mark.parametrize(
    ("stages", "why"),
    [
        ([("maintenance-default", "zai")], "does not apply stage 'maintenance-default'"),
        ([("credit-failover", "zai"), ("role-dial", "zai")], "'role-dial' is out of order"),
        ([("role-dial", "zai"), ("role-dial", "claude")], "'role-dial' is out of order"),
    ],
    ids=["foreign-stage", "reversed", "repeated"],
)
def test_an_impossible_stage_list_is_recorded_unclassified(
    rensei_pm: RenseiPluginManager, stages: list[tuple[str, str]], why: str
) -> None:
    built = [Stage(mechanism=m, provider=p) for m, p in stages]
    got = safe_classify(seam_registry(rensei_pm), "agentic-runner", built)
    assert got.mechanism == UNCLASSIFIED
    assert got.detail.startswith("ValueError in plugin 'hydraflow': ")
    assert why in got.detail


# The stage lists HydraFlow's own recorders build at each seam (document 001 §D7): the dial when
# one is set, else the seam's default, then what the seam applies after it, in order.
_RECORDED = [
    (
        "streaming-agent",
        [("maintenance-default", "claude"), ("fleet-ratchet", "gateway")],
        ("fleet-ratchet", "gateway"),
    ),
    (
        "streaming-agent",
        [("maintenance-default", "claude"), ("fleet-ratchet", "claude")],
        ("maintenance-default", "claude"),
    ),
    ("streaming-agent", [("role-dial", "zai"), ("fleet-ratchet", "zai")], ("role-dial", "zai")),
    (
        "lightweight-agent",
        [("maintenance-default", "claude"), ("fleet-ratchet", "claude")],
        ("maintenance-default", "claude"),
    ),
    ("lightweight-agent", [("role-dial", "zai"), ("fleet-ratchet", "zai")], ("role-dial", "zai")),
    *[
        (
            seam,
            [
                ("default", "claude"),
                ("fleet-ratchet", "claude"),
                ("repo-provider", "zai"),
                ("credit-failover", "zai"),
            ],
            ("repo-provider", "zai"),
        )
        for seam in ("agentic-runner", "subprocess-runner")
    ],
    *[
        (
            seam,
            [
                ("role-dial", "claude"),
                ("fleet-ratchet", "claude"),
                ("repo-provider", "claude"),
                ("credit-failover", "zai"),
            ],
            ("credit-failover", "zai"),
        )
        for seam in ("agentic-runner", "subprocess-runner")
    ],
]


@pytest.mark.parametrize(
    ("seam", "stages", "decided"),
    _RECORDED,
    ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(_RECORDED)],
)
def test_each_seam_accepts_the_stage_lists_hydraflow_records(
    rensei_pm: RenseiPluginManager,
    seam: str,
    stages: list[tuple[str, str]],
    decided: tuple[str, str],
) -> None:
    built = [Stage(mechanism=m, provider=p) for m, p in stages]
    got = safe_classify(seam_registry(rensei_pm), seam, built)
    assert (got.mechanism, got.provider) == decided
    assert got.detail == f"provider={decided[1]}"


@pytest.mark.parametrize(
    ("seam", "stage"),
    [
        ("streaming-agent", "default"),
        ("streaming-agent", "repo-provider"),
        ("streaming-agent", "credit-failover"),
        ("lightweight-agent", "credit-failover"),
        ("agentic-runner", "maintenance-default"),
        ("subprocess-runner", "maintenance-default"),
    ],
)
def test_a_stage_the_seam_does_not_wire_is_unclassified(
    rensei_pm: RenseiPluginManager, seam: str, stage: str
) -> None:
    got = safe_classify(seam_registry(rensei_pm), seam, [Stage(mechanism=stage, provider="zai")])
    assert got.mechanism == UNCLASSIFIED
    assert f"does not apply stage {stage!r}" in got.detail
