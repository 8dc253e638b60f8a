"""A spawn and the routing question it becomes (core/spawn.py), and the shadow record's own
canonical bytes: values a wrong rule would get wrong."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, explain
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.shadow.compare import (
    UNCLASSIFIED,
    ActualRoute,
    Seam,
    ShadowDecision,
    Stage,
    shadow_decision,
)
from rensei_routing.core.shadow.spawn import Spawn, check_spawn, requirement_for_model, spawn_route
from rensei_routing.errors import MalformedError

from .plugins.hydraflow_seams import SEAMS
from .shadow_support import spawn
from .strategies import context_dicts

SEAM = {s.name: s for s in SEAMS}
UNKNOWN_FACE = Seam(name="default", request_face="unknown", stages=("default",))


@pytest.mark.parametrize(
    ("model", "kind", "value"),
    [
        ("opus", "literal_family", "claude-opus"),
        (" Sonnet ", "literal_family", "claude-sonnet"),
        (None, "capability", "balanced"),
        ("  ", "capability", "balanced"),
        ("haiku", "concrete_model", "haiku"),
        ("claude-opus-4-1", "concrete_model", "claude-opus-4-1"),
        ("glm-5.3", "concrete_model", "glm-5.3"),
    ],
    ids=["opus", "sonnet-padded", "none", "blank", "haiku-is-concrete", "claude-id", "glm"],
)
def test_requirement_for_model(model: str | None, kind: str, value: str) -> None:
    req = requirement_for_model(model)
    assert (req.kind, req.value) == (kind, value)


def test_spawn_route_builds_the_context_and_the_actual_route() -> None:
    s = Spawn.from_dict(
        spawn(
            seam="streaming-agent",
            principal_id="Reviewer",
            stages=[
                {"mechanism": "maintenance-default", "provider": "claude"},
                {"mechanism": "fleet-ratchet", "provider": "gateway", "detail": "ratchet=on"},
            ],
            model="glm-5.3",
            account_id="zai-main",
        )
    )
    seam = SEAM["streaming-agent"]
    ctx, actual = spawn_route(s, seam, seam.classifier(s.resolved_stages(seam)))
    assert actual == ActualRoute(
        provider="gateway",
        provider_binding="zai-harness",  # the gateway binds a glm model to z.ai
        account_id="zai-main",
        model="glm-5.3",
        mechanism="fleet-ratchet",
        mechanism_detail="ratchet=on",
        transport="gateway",
    )
    assert ctx.role == "reviewer" and ctx.principal_id == "Reviewer"
    assert ctx.request_face == "agentic"
    assert ctx.model_requirement is not None
    assert ctx.model_requirement.to_dict() == {"kind": "concrete_model", "value": "glm-5.3"}
    assert ctx.legacy_route is not None
    assert ctx.legacy_route.to_dict() == {
        "account_id": "zai-main",
        "provider_binding": "zai-harness",
        "model": "glm-5.3",
        "mechanism": "fleet-ratchet",
        "mechanism_detail": "ratchet=on",
    }
    assert [a.account_id for a in ctx.accounts] == ["anthropic-primary", "zai-main"]


def test_one_shot_zai_is_direct_http_and_names_the_provider_when_the_stage_gives_no_detail() -> (
    None
):
    s = Spawn.from_dict(
        spawn(
            seam="lightweight-agent",
            principal_id="adr_reviewer",
            stages=[{"mechanism": "role-dial", "provider": "zai"}],
            model=None,
            account_id=None,
        )
    )
    seam = SEAM["lightweight-agent"]
    ctx, actual = spawn_route(s, seam, s.stages[0])
    assert (actual.transport, actual.mechanism, actual.mechanism_detail) == (
        "direct-http",
        "role-dial",
        "provider=zai",
    )
    assert ctx.role is None  # a loop name is never guessed into a role
    assert ctx.model_requirement is not None
    assert ctx.model_requirement.to_dict() == {"kind": "capability", "value": "balanced"}
    # the same provider at an agentic seam is the harness pointed at GLM
    _, agentic = spawn_route(s, SEAM["agentic-runner"], s.stages[0])
    assert agentic.transport == "harness-direct"


def test_a_given_requirement_wins_over_the_model() -> None:
    s = Spawn.from_dict(spawn(model_requirement="high-reasoning", model="opus"))
    ctx, _ = spawn_route(s, SEAM["agentic-runner"], s.stages[0])
    assert ctx.model_requirement is not None
    assert ctx.model_requirement.to_dict() == {"kind": "capability", "value": "high-reasoning"}


def test_route_only_spawn_uses_the_named_mechanism_or_the_seams_first_stage() -> None:
    doc = spawn(
        stages=None,
        model=None,
        account_id=None,
        route={"provider": "zai", "model": "glm-4.6", "account_id": "zai-main"},
    )
    s = Spawn.from_dict(doc)
    assert s.route_only
    assert s.resolved_stages(SEAM["agentic-runner"])[0].mechanism == "default"
    assert s.resolved_stages(SEAM["lightweight-agent"])[0].mechanism == "maintenance-default"
    named = Spawn.from_dict({**doc, "route": {**doc["route"], "mechanism": "credit-failover"}})
    assert named.resolved_stages(SEAM["agentic-runner"])[0].mechanism == "credit-failover"
    _, actual = spawn_route(
        named, SEAM["agentic-runner"], named.resolved_stages(SEAM["agentic-runner"])[0]
    )
    assert (actual.model, actual.account_id, actual.provider_binding) == (
        "glm-4.6",
        "zai-main",
        "zai-harness",
    )
    for value in (s, named):
        assert Spawn.from_dict(value.to_dict()) == value


def test_stages_spawn_round_trips() -> None:
    s = Spawn.from_dict(spawn(face="agentic", role="debugger", model_requirement="opus"))
    assert Spawn.from_dict(s.to_dict()) == s


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"route": {"provider": "zai"}}, "$"),  # both stages and route
        ({"stages": None}, "$"),  # neither
        ({"seam": None}, "seam"),
        ({"stages": []}, "stages"),
        ({"stages": [{"mechanism": "vibes", "provider": "zai"}]}, "stages[0].mechanism"),
        ({"face": "sideways"}, "face"),
        ({"accounts": [{"account_id": "a", "provider_binding": "openai"}]}, "accounts[0]"),
        ({"colour": "blue"}, "colour"),
    ],
    ids=[
        "both",
        "neither",
        "no-seam",
        "no-stages",
        "bad-mechanism",
        "bad-face",
        "bad-binding",
        "unknown",
    ],
)
def test_malformed_spawns_name_the_field(fields: dict[str, Any], path: str) -> None:
    doc = spawn()
    doc.update(fields)
    doc = {k: v for k, v in doc.items() if v is not None}
    with pytest.raises(MalformedError) as e:
        Spawn.from_dict(doc)
    assert e.value.path.startswith(path)


def test_a_default_seam_fills_a_missing_one() -> None:
    doc = spawn(seam=None)
    assert Spawn.from_dict(doc, default_seam="subprocess-runner").seam == "subprocess-runner"


def test_check_spawn_refuses_what_the_seam_could_not_produce() -> None:
    light = SEAM["lightweight-agent"]
    with pytest.raises(MalformedError, match="contradicts"):
        check_spawn(Spawn.from_dict(spawn(face="agentic")), light)
    with pytest.raises(MalformedError, match="does not apply 'default'") as e:
        check_spawn(Spawn.from_dict(spawn()), light)  # lightweight has no plain default
    assert e.value.path == "stages[0]"
    check_spawn(
        Spawn.from_dict(
            spawn(face="one-shot", stages=[{"mechanism": "maintenance-default", "provider": "zai"}])
        ),
        light,
    )
    # a seam whose face is unknown accepts any face, and the context carries the spawn's own
    s = Spawn.from_dict(spawn(face="one-shot", seam="default"))
    check_spawn(s, UNKNOWN_FACE)
    ctx, _ = spawn_route(s, UNKNOWN_FACE, s.stages[0])
    assert ctx.request_face == "one-shot"


def test_an_unclassified_route_reads_back_with_no_mechanism_in_its_context() -> None:
    s = Spawn.from_dict(spawn())
    broken = Stage(mechanism=UNCLASSIFIED, provider="claude", detail="KeyError in the classifier")
    ctx, actual = spawn_route(s, SEAM["agentic-runner"], broken)
    assert actual.mechanism == UNCLASSIFIED
    assert ctx.legacy_route is not None and ctx.legacy_route.mechanism is None
    decision = explain(ctx, PolicySnapshot.empty(), snapshot_state="absent")
    record = shadow_decision(
        recorded_at="2026-01-01T00:00:00.000000Z",
        seam="agentic-runner",
        principal_id=s.principal_id,
        actual=actual,
        proposed=decision,
    )
    back = ShadowDecision.from_dict(record.to_dict())
    assert back.actual.mechanism == UNCLASSIFIED
    assert back.proposed.explanation.context == ctx


@settings(max_examples=60, deadline=None)
@given(context_dicts(), st.sampled_from(SEAMS), st.text(max_size=20), st.booleans())
def test_shadow_record_canonical_bytes_equal_the_encoder(
    ctx_doc: dict[str, Any], seam: Seam, detail: str, moved: bool
) -> None:
    ctx = RouteContext.from_dict(ctx_doc)
    actual = ActualRoute(
        provider="zai" if moved else "claude",
        provider_binding="zai-harness" if moved else "anthropic",
        account_id=None if moved else "anthropic-primary",
        model="glm-5.3" if moved else None,
        mechanism="credit-failover",
        mechanism_detail=detail or None,
        transport=seam.transport("zai"),
    )
    record = shadow_decision(
        recorded_at="2026-01-01T00:00:00.5Z",
        seam=seam.name,
        principal_id=ctx.principal_id,
        actual=actual,
        proposed=explain(ctx, PolicySnapshot.empty()),
    )
    assert record.canonical() == canonical_bytes(record.to_dict())
