"""A compact trace's candidates read as far as the ties go (``Compiled.best``, the open group's
answers kept by the batch, repos sharing one group when they share their policies) against the
plain path: every candidate read in rank order, the best level's run of them taken, and
whole batches resolved through the general candidate loop."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain_batch
from rensei_routing.core.routing import index, resolver
from rensei_routing.core.routing.index import ALL, Compiled, context_keys

from .strategies import context_dicts, policy_dicts

policy_sets = st.lists(policy_dicts(), max_size=10)


def _snapshot(docs: list[dict[str, Any]]) -> PolicySnapshot:
    return PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=3)


def _plain_best(compiled: Compiled, keys: tuple[Any, ...]) -> tuple[tuple[int, ...], int]:
    """Every candidate, no memo; the leading run at the best level."""
    found, total = compiled.candidates(keys, ALL)
    levels = compiled.levels
    winners = [pos for pos in found if levels[pos] == levels[found[0]]]
    assert winners == list(found[: len(winners)])  # equal levels are adjacent
    return tuple(winners), total


@settings(max_examples=200)
@given(policy_sets, st.lists(context_dicts(), min_size=1, max_size=8))
def test_best_is_the_leading_tie_of_every_candidate(docs, ctx_docs) -> None:
    compiled = Compiled(_snapshot(docs))
    memo: dict[tuple[Any, ...], Any] = {}
    for doc in ctx_docs + ctx_docs:  # the second pass reads the kept open answers
        keys = context_keys(RouteContext.from_dict(doc))
        assert compiled.best(keys[0], keys[1:], memo) == _plain_best(compiled, keys)


#: System-safety rules (rung 1 whatever they match) naming a repo or none, at two priorities:
#: a repo's rules and the rules naming no repo tie whenever their priorities do.
safety_rules = st.builds(
    lambda i, repos, priority, enabled: {
        "id": f"s{i}",
        "system_safety": True,
        "enabled": enabled,
        "priority": priority,
        "match": {"repo_ids": repos} if repos else {},
        "action": {},
    },
    st.integers(0, 5),
    st.lists(st.sampled_from(["acme/widgets", "acme/gadgets"]), max_size=2, unique=True),
    st.sampled_from([0, 5]),
    st.booleans(),
)


@settings(max_examples=200)
@given(st.lists(safety_rules, max_size=8), st.lists(context_dicts(), max_size=8))
def test_best_ties_across_a_repo_and_the_open_rules(docs, ctx_docs) -> None:
    compiled = Compiled(_snapshot(docs))
    memo: dict[tuple[Any, ...], Any] = {}
    for doc in ctx_docs + ctx_docs:
        keys = context_keys(RouteContext.from_dict(doc))
        assert compiled.best(keys[0], keys[1:], memo) == _plain_best(compiled, keys)


def test_a_tie_across_a_repo_and_the_open_rules_lists_both_in_rank_order() -> None:
    docs = [
        {"id": "z-open", "system_safety": True, "priority": 5, "match": {}, "action": {}},
        {
            "id": "a-repo",
            "system_safety": True,
            "priority": 5,
            "match": {"repo_ids": ["acme/a"]},
            "action": {},
        },
        {"id": "m-open", "system_safety": True, "priority": 5, "match": {}, "action": {}},
    ]
    compiled = Compiled(_snapshot(docs))
    winners, total = compiled.best("acme/a", (None, None, None, None, None), {})
    assert [compiled.policies[p].id for p in winners] == ["a-repo", "m-open", "z-open"]
    assert total == 3


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "WINNERS_ONLY", False)
    monkeypatch.setattr(resolver, "WINNERS_ONLY", False)


@settings(max_examples=150)
@given(policy_sets, st.lists(context_dicts(), min_size=1, max_size=6))
def test_a_compact_batch_equals_the_general_candidate_loop(docs, ctx_docs) -> None:
    contexts = [RouteContext.from_dict(d) for d in ctx_docs + ctx_docs]
    fast = explain_batch(contexts, _snapshot(docs), trace="compact")
    with pytest.MonkeyPatch.context() as mp:
        _general(mp)
        plain = explain_batch(contexts, _snapshot(docs), trace="compact")
    assert fast == plain
    assert [d.canonical() for d in fast] == [d.canonical() for d in plain]
    assert [d.explanation.to_dict() for d in fast] == [d.explanation.to_dict() for d in plain]


def test_repos_naming_the_same_policies_share_one_group() -> None:
    docs = [
        {"id": "both", "match": {"repo_ids": ["acme/a", "acme/b"]}, "action": {}},
        {"id": "a-only", "match": {"repo_ids": ["acme/a"], "roles": ["planner"]}, "action": {}},
        {"id": "c-too", "match": {"repo_ids": ["acme/c", "acme/d"]}, "action": {}},
        {"id": "d-too", "match": {"repo_ids": ["acme/d", "acme/c"]}, "priority": 3, "action": {}},
    ]
    compiled = Compiled(_snapshot(docs))
    memo: dict[tuple[Any, ...], Any] = {}
    rest = (None, "planner", None, None, None)
    for repo in ("acme/a", "acme/b", "acme/c", "acme/d"):
        compiled.best(repo, rest, memo)
    groups = compiled._groups
    assert groups["acme/c"] is groups["acme/d"]
    assert groups["acme/a"] is not groups["acme/b"]
    ids = {r: [compiled.policies[p].id for p in compiled.best(r, rest, memo)[0]] for r in groups}
    assert ids == {
        "acme/a": ["a-only"],
        "acme/b": ["both"],
        "acme/c": ["d-too"],
        "acme/d": ["d-too"],
    }
