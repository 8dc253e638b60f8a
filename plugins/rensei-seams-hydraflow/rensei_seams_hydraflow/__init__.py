"""The four HydraFlow spawn seams of document 001, as a rensei-routing plugin.

Each seam names its request face, the legacy stages it applies in order, and its classifier:

========================  ==================================================  =========
seam                      spawn site                                          face
========================  ==================================================  =========
``agentic-runner``        ``base_runner._execute``                            agentic
``subprocess-runner``     ``BaseSubprocessRunner.run``                        agentic
``lightweight-agent``     ``runner_utils.run_lightweight_agent``              one-shot
``streaming-agent``       ``runner_utils.stream_claude_with_telemetry``       agentic
========================  ==================================================  =========

Stages, in the order a seam applies them, as HydraFlow wires its four seams:

* the *dialled* seams (``lightweight-agent``, ``streaming-agent``): the per-role dial
  (``role-dial``) or, when no dial is set, ``maintenance-default``, then ``fleet-ratchet``;
* the *agentic runners* (``agentic-runner``, ``subprocess-runner``): ``role-dial`` or, when no
  dial is set, ``default``, then ``fleet-ratchet``, ``repo-provider`` and ``credit-failover``.

A spawn reports the stages that ran; the dial and the default are alternatives, either may open
the list (the default is listed first: a route-only spawn that names no mechanism ran on it).

The classifier applies the rule of SEMANTICS.md (the last stage that moved the provider, else
the first stage) after checking the stages are ones this seam applies, in its order; a stage it
does not apply, or one out of order, raises ``ValueError`` (the shadow record then says
``unclassified`` and why, rather than naming a mechanism that cannot have run). When the
deciding stage carries no detail, the classifier fills in ``provider=<provider>``, so a spawn
pinned by a role dial to ``zai`` records ``mechanism=role-dial``,
``mechanism_detail=provider=zai``.

The transport follows from the face (core ``transport_for``): ``zai`` at the one-shot seam is a
direct OpenAI-compatible HTTP call (``direct-http``, ungoverned bypass traffic), at an agentic
seam the Claude CLI pointed at GLM (``harness-direct``); a spawn the fleet ratchet moved to
``gateway`` (the streaming seam's ratchet traffic) is ``gateway``.

An enforced route (hook ``apply_enforced_route``, :mod:`.routes`) is applied at the agentic seams
by rewriting the child's ``--model`` in its argv, at the one-shot seam by setting the request
mapping's ``model``; the request is never changed in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Final

from rensei_routing.plugin import (
    Classifier,
    EnforcedRoute,
    Seam,
    Stage,
    classify_legacy_mechanism,
    hookimpl,
)

from .routes import apply_model

__all__ = [
    "AGENTIC_STAGES",
    "DIALLED_STAGES",
    "SEAMS",
    "apply_enforced_route",
    "ordered_classifier",
    "register_seams",
]

#: The agentic runners' stages: the dial or the default, the ratchet, the repo override, failover.
AGENTIC_STAGES: Final = (
    "default",
    "role-dial",
    "fleet-ratchet",
    "repo-provider",
    "credit-failover",
)
#: The dialled seams' stages (one-shot and streaming): the dial or the maintenance default, then
#: the fleet ratchet.
DIALLED_STAGES: Final = ("maintenance-default", "role-dial", "fleet-ratchet")
#: The old name of :data:`DIALLED_STAGES` (the lightweight seam's stages).
LIGHTWEIGHT_STAGES: Final = DIALLED_STAGES


def ordered_classifier(seam: str, order: Sequence[str]) -> Classifier:
    """A classifier for a seam applying the stages ``order``: refuses a stage the seam does not
    apply or one out of order (``ValueError``), then names the deciding stage."""
    position = {name: i for i, name in enumerate(order)}

    def classify(stages: Sequence[Stage]) -> Stage:
        last = -1
        for stage in stages:
            at = position.get(stage.mechanism)
            if at is None:
                raise ValueError(f"seam {seam} does not apply stage {stage.mechanism!r}")
            if at <= last:
                raise ValueError(f"stage {stage.mechanism!r} is out of order at seam {seam}")
            last = at
        decided = classify_legacy_mechanism(stages)
        if decided.detail:
            return decided
        return replace(decided, detail=f"provider={decided.provider.strip().lower()}")

    return classify


def _seam(name: str, face: str, stages: tuple[str, ...], site: str) -> Seam:
    return Seam(
        name=name,
        request_face=face,
        stages=stages,
        classifier=ordered_classifier(name, stages),
        description=site,
    )


#: The four seams, by name.
SEAMS: Final = {
    s.name: s
    for s in (
        _seam("agentic-runner", "agentic", AGENTIC_STAGES, "base_runner._execute"),
        _seam("subprocess-runner", "agentic", AGENTIC_STAGES, "BaseSubprocessRunner.run"),
        _seam(
            "lightweight-agent",
            "one-shot",
            DIALLED_STAGES,
            "runner_utils.run_lightweight_agent (one-shot: zai, kimi, openrouter are direct HTTP)",
        ),
        _seam(
            "streaming-agent",
            "agentic",
            DIALLED_STAGES,
            "runner_utils.stream_claude_with_telemetry (fleet ratchet on: gateway transport)",
        ),
    )
}


@hookimpl
def register_seams(register: Callable[[Seam], None]) -> None:
    for name in sorted(SEAMS):
        register(SEAMS[name])


@hookimpl
def apply_enforced_route(seam: str, route: EnforcedRoute, request: Any) -> Any:
    """The request of a spawn at one of the four seams, rewritten for ``route``
    (:func:`.routes.apply_model`); ``None`` for any other seam."""
    if seam not in SEAMS:
        return None
    return apply_model(seam, route, request)
