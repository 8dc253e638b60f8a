"""A batch keeps its answers by the repo's policy group (the policies naming the repo; none for a
repo no policy names, a lossy slug or no repo) and the question's other members, so repos
naming the same policies share one answer and only the repo's own text is added per decision;
a repo's group is built in one pass over its members. Checked against the plain path: each
context alone on a snapshot of its own (every memo cold), the general id writer over a fresh
copy of the context, and :func:`~rensei_routing.core.routing.policy.dimension_index`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain_batch
from rensei_routing.core.redact import DEFAULT_REDACTOR
from rensei_routing.core.routing import resolver
from rensei_routing.core.routing.index import _Group, compile_index
from rensei_routing.core.routing.policy import MATCH_DIMENSIONS, dimension_index
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY

from .strategies import (
    assert_batch_decides_as_alone,
    context_dicts,
    plain_decision_id,
    policy_dicts,
    redactor_also,
)

#: Repos a policy may name: a few, so that several repos name the same policies.
NAMED = ["acme/a", "acme/b", "acme/c", "acme/d"]
#: Repos contexts ask about: the named ones, unnamed ones, a lossy slug, none.
ASKED = [*NAMED, "acme/e", "other/f", "acme-a", None]
#: A trigger only one repo holds, so repos sharing a group differ in whether they are clean.
REDACTORS = [DEFAULT_REDACTOR, redactor_also("repo", "acme/b"), redactor_also("repo", "other")]


@st.composite
def grouped_policy(draw: st.DrawFn) -> dict[str, Any]:
    doc = draw(policy_dicts())
    repos = draw(st.lists(st.sampled_from(NAMED), max_size=3, unique=True))
    match = {k: v for k, v in doc["match"].items() if k != "repo_ids"}
    if repos:
        match["repo_ids"] = repos
    return {**doc, "match": match}


def _snapshot(docs: list[dict[str, Any]]) -> PolicySnapshot:
    return PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=6)


def _over_repos(ctx_docs: list[dict[str, Any]], repos: list[str | None]) -> list[dict[str, Any]]:
    """Every context's members with each of ``repos``: the same other members across repos
    that share a group and repos that do not."""
    return [{**doc, "repo": repo} for doc in ctx_docs for repo in repos]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(grouped_policy(), max_size=8),
    st.lists(context_dicts(), min_size=1, max_size=3),
    st.lists(st.sampled_from(ASKED), min_size=2, max_size=6),
    st.sampled_from(REDACTORS),
    st.sampled_from(["auto", "full", "compact"]),
)
def test_repos_sharing_a_group_decide_as_each_context_alone(
    docs, ctx_docs, repos, redactor, trace
) -> None:
    batch_docs = _over_repos(ctx_docs, repos)
    assert_batch_decides_as_alone(batch_docs, lambda: _snapshot(docs), redactor, trace)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(grouped_policy(), max_size=8),
    st.lists(context_dicts(), min_size=1, max_size=3),
    st.sampled_from(["full", "compact"]),
)
def test_answers_emptied_at_the_bound_decide_the_same(docs, ctx_docs, trace) -> None:
    """At the bound every group's answers are emptied and asked again."""
    batch_docs = _over_repos(ctx_docs, ASKED) * 2
    contexts = [RouteContext.from_dict(d) for d in batch_docs]
    plain = explain_batch(contexts, _snapshot(docs), trace=trace)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resolver, "MEMO_LIMIT", 3)
        bounded = explain_batch(contexts, _snapshot(docs), trace=trace)
    assert [d.canonical() for d in bounded] == [d.canonical() for d in plain]


def test_repos_naming_the_same_policies_share_one_answer() -> None:
    policies = [
        {"id": "all", "match": {}, "action": {}},
        {"id": "ab", "match": {"repo_ids": ["acme/a", "acme/b"]}, "action": {}},
        {"id": "c", "match": {"repo_ids": ["acme/c"]}, "action": {}},
    ]
    snapshot = _snapshot(policies)
    docs = [{"principal_id": "implementer", "repo": r} for r in ("acme/a", "acme/b", "acme/c")]
    docs += [{"principal_id": "implementer", "repo": r} for r in ("acme/x", "acme-a", None)]
    compiled, call = resolver._start(
        snapshot, "ok", DEFAULT_VOCABULARY, "compact", DEFAULT_REDACTOR
    )
    decisions = [
        resolver._resolve(RouteContext.from_dict(doc), snapshot, compiled, call) for doc in docs
    ]
    assert [d.policy_id for d in decisions] == ["ab", "ab", "c", "all", "all", "all"]
    # One answer for acme/a and acme/b, one for acme/c, one for the three naming none.
    assert call.answered == 3
    assert sorted(len(answers) for answers in call.answers.values()) == [1, 1, 1]
    assert decisions[0].decision_id != decisions[1].decision_id  # each repo's own text
    for doc, d in zip(docs, decisions, strict=True):
        assert d.decision_id == plain_decision_id(doc, d)


@settings(max_examples=200, deadline=None)
@given(st.lists(policy_dicts(), max_size=9))
def test_a_group_built_in_one_pass_is_the_general_index(docs) -> None:
    snapshot = _snapshot(docs)
    compiled = compile_index(snapshot)
    members = list(range(len(compiled.policies)))
    group = _Group(members, compiled.policies, compiled.levels)
    wild, lookup = dimension_index(list(compiled.policies), MATCH_DIMENSIONS[1:])
    assert group.wild == tuple(wild)
    assert group.lookup == tuple(lookup)
    every = (1 << len(members)) - 1
    assert [d for d, _, _ in group.dims] == [d for d in range(5) if wild[d] != every]
