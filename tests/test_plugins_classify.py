"""``safe_classify``: a seam classifier that raises or answers nonsense never breaks a spawn."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

import pytest

from rensei_routing.core.shadow.compare import Seam, Stage
from rensei_routing.errors import InputError, UnknownSeamError
from rensei_routing.plugins.manager import UNCLASSIFIED, SeamRegistry, safe_classify

STAGES = (
    Stage(mechanism="role-dial", provider="zai", detail="provider=zai"),
    Stage(mechanism="fleet-ratchet", provider="gateway"),
)


def _registry(classifier: Callable[[Sequence[Stage]], Any]) -> SeamRegistry:
    seam = Seam(
        name="s",
        request_face="agentic",
        stages=("role-dial", "fleet-ratchet"),
        classifier=classifier,
    )
    return SeamRegistry(MappingProxyType({"s": seam}), MappingProxyType({"s": "acme"}))


def _boom(stages: Sequence[Stage]) -> Stage:
    raise KeyError("no such dial")


def test_a_working_classifier_is_used_and_may_rewrite_the_detail() -> None:
    assert safe_classify(_registry(lambda s: s[0]), "s", STAGES) is STAGES[0]
    noted = Stage(mechanism="fleet-ratchet", provider="gateway", detail="provider=gateway")
    assert safe_classify(_registry(lambda s: noted), "s", STAGES) is noted


def test_a_stage_moved_to_another_provider_is_not_one_of_those_applied() -> None:
    moved = Stage(mechanism="role-dial", provider="claude")
    got = safe_classify(_registry(lambda s: moved), "s", STAGES)
    assert got.mechanism == UNCLASSIFIED
    assert "named 'role-dial' on 'claude', which is not among the stages applied" in got.detail


@pytest.mark.parametrize(
    ("classifier", "detail"),
    [
        (_boom, "KeyError in plugin 'acme': 'no such dial'"),
        (
            lambda s: "role-dial",
            "WrongReturnType in plugin 'acme': classifier of seam 's' returned str, not a Stage",
        ),
        (
            lambda s: Stage(mechanism="credit-failover", provider="zai"),
            "WrongReturnValue in plugin 'acme': classifier of seam 's' named "
            "'credit-failover' on 'zai', which is not among the stages applied",
        ),
    ],
    ids=["raises", "wrong-type", "invented-stage"],
)
def test_a_misbehaving_classifier_yields_unclassified(
    classifier: Callable[[Sequence[Stage]], Any], detail: str
) -> None:
    got = safe_classify(_registry(classifier), "s", STAGES)
    assert got == Stage(mechanism=UNCLASSIFIED, provider="gateway", detail=detail)


def test_an_endless_error_message_is_cut_to_the_record_limit() -> None:
    def loud(stages: Sequence[Stage]) -> Stage:
        raise ValueError("x" * 5000)

    got = safe_classify(_registry(loud), "s", STAGES)
    assert got.mechanism == UNCLASSIFIED and len(got.detail) == 1024


def test_unknown_seam_and_empty_stages_are_the_callers_errors() -> None:
    with pytest.raises(UnknownSeamError, match="'nope'"):
        safe_classify(_registry(lambda s: s[0]), "nope", STAGES)
    with pytest.raises(InputError):
        safe_classify(_registry(lambda s: s[0]), "s", ())
