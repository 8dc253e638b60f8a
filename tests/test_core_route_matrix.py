"""The effective-route matrix (issue 30, part 2), pure: every cell is explain() of its context,
a revision against itself moves nothing, ``unmanaged`` is exactly "no policy claims the cell",
the default axes and the bound are the documented ones, and a diff names what moves."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rensei_routing.core.routing.decision import NO_POLICY_APPLIES, SOURCE_LEGACY
from rensei_routing.core.routing.matrix import (
    MAX_CELLS,
    UNMANAGED,
    build_axes,
    cell_of,
    diff_matrices,
    matrix_accounts,
    resolve_matrix,
)
from rensei_routing.core.routing.members import LegacyRoute, ModelRequirement
from rensei_routing.core.routing.policy import PolicySnapshot, RoutingPolicy
from rensei_routing.core.routing.resolver import explain
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.errors import MatrixAxisError, MatrixTooLargeError

from .strategies import policy_dicts


def _snapshot(policies: list[dict[str, Any]], revision: int = 1) -> PolicySnapshot:
    items = [RoutingPolicy.from_dict(p) for p in policies]
    return PolicySnapshot.of(items, revision=revision)


def _matrix(snapshot: PolicySnapshot, *others: PolicySnapshot, repo: str | None = None) -> Any:
    sets = (snapshot, *others)
    axes = build_axes(sets, repos=(repo,))
    return resolve_matrix(snapshot, axes=axes, accounts=matrix_accounts(sets))


_SETS = st.lists(policy_dicts(), max_size=5)
_REPOS = st.sampled_from([None, "acme/widgets", "t-rav/hydraflow"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SETS, _REPOS)
def test_every_cell_is_explain_of_its_context(policies: list[dict[str, Any]], repo: Any) -> None:
    snapshot = _snapshot(policies)
    matrix = _matrix(snapshot, repo=repo)
    assert len(matrix.cells) == matrix.axes.size
    keys = matrix.axes.keys()
    for key, cell in zip(keys, matrix.cells, strict=True):
        decision = explain(cell.context, snapshot)
        assert cell == cell_of(key, cell.context, decision)
        # unmanaged is exact: the same context with a legacy route falls to legacy routing
        # (no policy claims it) if and only if the cell is unmanaged
        legacy = LegacyRoute.from_dict({"provider_binding": "anthropic", "model": "x"})
        with_legacy = dataclasses.replace(cell.context, legacy_route=legacy)
        fallback = explain(with_legacy, snapshot)
        unclaimed = fallback.policy_source == SOURCE_LEGACY and fallback.reason == NO_POLICY_APPLIES
        assert (cell.outcome == UNMANAGED) == unclaimed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SETS, _REPOS)
def test_a_revision_against_itself_moves_nothing(policies: list[dict[str, Any]], repo: Any) -> None:
    snapshot = _snapshot(policies)
    same = _snapshot(policies, revision=7)  # the same set saved again as another revision
    before, after = _matrix(snapshot, same, repo=repo), _matrix(same, snapshot, repo=repo)
    radius = diff_matrices(before, after)
    assert not radius and radius.changes == ()
    assert radius.cells == before.axes.size
    assert radius.summary().startswith(f"blast radius rev 1 -> rev 7: 0 of {radius.cells} cells")


GLOBAL = {
    "id": "global",
    "priority": 0,
    "match": {},
    "action": {
        "account_pool": ["primary"],
        "requirement_map": [
            {"requirement": {"kind": "capability", "value": "balanced"}, "model": "claude-x"}
        ],
    },
}
REVIEWERS_HELD = {
    "id": "reviewers-zai",
    "priority": 10,
    "match": {"roles": ["reviewer"], "request_faces": ["agentic"]},
    "action": {"provider_lock": "zai-harness", "account_pool": ["nobody-has-this"]},
}


def test_the_default_axes_are_the_documented_ones() -> None:
    snapshot = _snapshot([GLOBAL, REVIEWERS_HELD])
    axes = build_axes((snapshot,))
    assert axes.repos == (None,)
    assert axes.roles == tuple(sorted(DEFAULT_VOCABULARY.roles))
    assert axes.faces == ("agentic", "one-shot")
    assert axes.repo_classes == (*sorted(DEFAULT_VOCABULARY.repo_classes), None)
    # the requirements the policies name plus one provider-neutral capability (the first class)
    assert axes.requirements == (ModelRequirement(kind="capability", value="balanced"),)
    opus = {**GLOBAL, "id": "opus", "match": {"model_requirements": ["claude-opus"]}}
    axes = build_axes((_snapshot([opus]),))
    assert [r.key for r in axes.requirements] == [
        ("capability", "balanced"),
        ("literal_family", "claude-opus"),
    ]


def test_unmanaged_cells_and_a_diff_that_makes_cells_held() -> None:
    empty = PolicySnapshot.empty()
    one = _snapshot([GLOBAL], revision=1)
    two = _snapshot([GLOBAL, REVIEWERS_HELD], revision=2)
    assert {c.outcome for c in _matrix(empty, one).cells} == {UNMANAGED}
    before, after = _matrix(one, two), _matrix(two, one)
    assert {c.outcome for c in before.cells} == {"selected"}
    assert before.cells[0].account == "primary" and before.cells[0].model == "claude-x"
    radius = diff_matrices(before, after)
    moved = {(c.after.role, c.after.face) for c in radius.changes}
    assert moved == {("reviewer", "agentic")}
    assert len(radius.changes) == 4  # one per repo class (three and unclassified)
    assert radius.becoming("held") == 4
    change = radius.changes[0]
    # every named account is on the matrix host: the cell is held by the unmapped capability
    assert change.after.policy_id == "reviewers-zai"
    assert change.after.reason == "capability-unmapped"
    assert change.to_dict()["before"]["policy_id"] == "global"
    assert "4 of 56 cells move (4 become held, 0 become rejected" in radius.summary()


def test_the_bound_and_the_axes_refuse_with_a_typed_error() -> None:
    snapshot = _snapshot([GLOBAL])
    many = [f"concrete_model:m{i}" for i in range(100)]
    with pytest.raises(MatrixTooLargeError, match="narrow it with --repo"):
        build_axes((snapshot,), requirements=many)
    assert build_axes((snapshot,), requirements=many, roles=["planner"]).size <= MAX_CELLS
    for kwargs in (
        {"repos": ["not a repo"]},
        {"roles": ["pilot"]},
        {"faces": ["sideways"]},
        {"requirements": ["hgh-reasoning"]},
        {"requirements": ["capability:fast"]},
        {"repo_classes": ["enterprise"]},
    ):
        with pytest.raises(MatrixAxisError):
            build_axes((snapshot,), **kwargs)


def test_the_matrix_host_carries_every_named_account_on_every_binding() -> None:
    accounts = matrix_accounts((_snapshot([GLOBAL, REVIEWERS_HELD]),))
    pairs = {(a.account_id, a.provider_binding) for a in accounts}
    bindings = sorted(DEFAULT_VOCABULARY.provider_bindings)
    assert pairs == {(a, b) for a in ("primary", "nobody-has-this") for b in bindings} | {
        (b, b) for b in bindings
    }
    assert all(a.configured and a.administrative_state == "active" for a in accounts)
