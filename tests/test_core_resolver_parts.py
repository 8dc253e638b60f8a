"""A batch keeps what a question's members but its repo decide (their match keys, the id's
question piece around the repo, whether they are clean) and what its repo decides (the repo's
text in that piece, whether it is clean), each by its own members: a large snapshot names
thousands of repositories, so whole questions rarely repeat where these do. Checked against the
plain path: each context alone on a snapshot of its own (every memo cold) and the general id
writer over a fresh copy of the context, under the default redactor and under redactors whose
trigger hits only a repo or only a question's other members."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain
from rensei_routing.core.redact import DEFAULT_REDACTOR
from rensei_routing.core.routing import resolver
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY

from .strategies import (
    assert_batch_decides_as_alone,
    context_dicts,
    policy_dicts,
    redactor_also,
)

#: A trigger only a repo holds, one only a principal holds, one only a requirement holds.
REDACTORS = [
    DEFAULT_REDACTOR,
    redactor_also("repo", "gadgets"),
    redactor_also("loop", "adr_"),
    redactor_also("x", "opus"),
]


def _snapshot(docs: list[dict[str, Any]]) -> PolicySnapshot:
    return PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=4)


def _crossed(ctx_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every context's members but its repo, with every context's repo (and itself): the
    members repeat across repos, and each repo across members."""
    return [{**doc, "repo": other.get("repo")} for doc in ctx_docs for other in ctx_docs]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(policy_dicts(), max_size=7),
    st.lists(context_dicts(), min_size=1, max_size=4),
    st.sampled_from(REDACTORS),
    st.sampled_from(["auto", "full", "compact"]),
)
def test_kept_members_and_repos_decide_as_each_context_alone(docs, ctx_docs, redactor, trace):
    batch_docs = _crossed(ctx_docs)
    assert_batch_decides_as_alone(batch_docs, lambda: _snapshot(docs), redactor, trace)


def test_members_and_repos_are_kept_once_each_and_answers_share_their_lists() -> None:
    """The kept paths are taken: two repos under one set of members keep one entry for the
    members and one per repo, and equal candidate lists are one object."""
    policies = [
        {"id": "all", "match": {}, "action": {}},
        {"id": "widgets", "match": {"repo_ids": ["acme/widgets"]}, "action": {}},
    ]
    snapshot = _snapshot(policies)
    base = {
        "principal_id": "implementer",
        "model_requirement": {"kind": "capability", "value": "high-reasoning"},
        "request_face": "agentic",
    }
    docs = [{**base, "repo": repo} for repo in ("acme/widgets", "acme/gadgets", "acme-widgets")]
    compiled, call = resolver._start(
        snapshot, "ok", DEFAULT_VOCABULARY, "compact", DEFAULT_REDACTOR
    )
    decisions = [
        resolver._resolve(RouteContext.from_dict(doc), snapshot, compiled, call) for doc in docs
    ]
    assert len(call.parts) == 1
    assert set(call.repos) == {
        ("acme/widgets", "canonical"),
        ("acme/gadgets", "canonical"),
        ("acme-widgets", "legacy-lossy"),
    }
    assert [d.policy_id for d in decisions] == ["widgets", "all", "all"]
    # The repos no policy names share one answer; the one "widgets" names has its own.
    assert call.answered == 2
    assert [len(answers) for answers in call.answers.values()] == [1, 1]
    for doc, d in zip(docs, decisions, strict=True):
        assert d == explain(RouteContext.from_dict(doc), _snapshot(policies), trace="compact")
