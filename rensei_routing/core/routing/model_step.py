"""The model half of SEMANTICS step 5 for one winning action: the effective model, or why the
action cannot serve the requirement, and the provider lane that alone may serve the decision.
Pure: no I/O, no clock, no state; the resolver (:mod:`.resolver`) keeps what it computes.
"""

from __future__ import annotations

from collections.abc import Callable

from .decision import (
    CAPABILITY_UNMAPPED,
    HELD,
    LITERAL_FAMILY_UNSATISFIABLE,
    MODEL_NOT_ALLOWED,
    REJECTED,
)
from .members import ModelRequirement
from .policy import RoutingAction
from .vocabulary import CAPABILITY, CONCRETE_MODEL, LITERAL_FAMILY, Vocabulary

__all__ = ["model_step", "provider_lane"]


def provider_lane(
    requirement: ModelRequirement | None, mapped: str | None, vocabulary: Vocabulary
) -> frozenset[str] | None:
    """The provider bindings that alone may serve this decision, or ``None`` for any lane.

    SEMANTICS step 5, "The Anthropic lane is required when": a literal family always keeps its
    family's lane (an honest mapping stays on it; a dishonest one is rejected anyway). Otherwise
    an explicit mapping decides by the mapped model's provenance (a capability included), and
    without one a concrete id decides by its own. A bare alias (``opus``, ``sonnet``,
    ``haiku``) counts as the provenance it stands for, as a requirement and as a mapped model.
    """
    if requirement is None:
        return None
    if requirement.kind == LITERAL_FAMILY:
        family = vocabulary.literal_families.get(requirement.value.lower())
        return frozenset() if family is None else family.provenance.provider_bindings
    if mapped is not None:
        provenance = vocabulary.lane_provenance(mapped)
    elif requirement.kind == CONCRETE_MODEL:
        provenance = vocabulary.lane_provenance(requirement.value)
    else:
        return None
    return None if provenance is None else provenance.provider_bindings


def model_step(
    action: RoutingAction,
    requirement: ModelRequirement,
    vocabulary: Vocabulary,
    lane: Callable[[ModelRequirement, str | None], tuple[str, ...] | None],
) -> tuple[str | None, tuple[str, str] | None, tuple[str, ...] | None]:
    """The model half of SEMANTICS step 5 for one winning action: ``(model, failure, lane)``,
    the failure an ``(outcome, reason)`` pair, the lane the bindings that alone may serve
    (``lane`` of the requirement and the mapped model: :func:`provider_lane`, kept)."""
    model: str | None = None
    mapped = action.mapped_model(requirement.key)
    failed: tuple[str, str] | None = None
    if mapped is not None:
        if requirement.kind == LITERAL_FAMILY and not vocabulary.satisfied_by(
            requirement.kind, requirement.value, mapped
        ):
            failed = (REJECTED, LITERAL_FAMILY_UNSATISFIABLE)
        elif not action.allows(mapped):
            failed = (REJECTED, MODEL_NOT_ALLOWED)
        else:
            model = mapped
    elif requirement.kind == CONCRETE_MODEL:
        if action.allows(requirement.value):
            model = requirement.value
        else:
            failed = (REJECTED, MODEL_NOT_ALLOWED)
    elif requirement.kind == CAPABILITY:
        failed = (HELD, CAPABILITY_UNMAPPED)
    return model, failed, lane(requirement, mapped)
