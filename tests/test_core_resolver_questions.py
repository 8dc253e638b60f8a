"""A batch answers each question once: contexts that ask the same question (the same members
but their accounts and legacy route) share one answer, the id is written from the account texts
the resolver already holds, and the answers a batch keeps are plain values the collector stops
tracking while they are young. Each is checked against the plain path: a cold single decision,
the general id writer with no memo, the general canonical encoder."""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain, explain_batch
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.redact import DEFAULT_REDACTOR
from rensei_routing.core.routing import resolver
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY

from .strategies import context_dicts, plain_decision_id, policy_dicts

policy_sets = st.lists(policy_dicts(), max_size=7)
traces = st.sampled_from(["auto", "full", "compact"])


def _snapshot(docs: list[dict[str, Any]]) -> PolicySnapshot:
    return PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=9)


def _swapped(ctx_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each context again with another one's accounts and legacy route: the same question,
    other account entries."""
    out = []
    for i, doc in enumerate(ctx_docs):
        other = ctx_docs[(i + 1) % len(ctx_docs)]
        swapped = {k: v for k, v in doc.items() if k not in ("accounts", "legacy_route")}
        for key in ("accounts", "legacy_route"):
            if key in other:
                swapped[key] = other[key]
        out.append(swapped)
    return out


@settings(max_examples=120)
@given(policy_sets, st.lists(context_dicts(), min_size=1, max_size=5), traces)
def test_a_shared_question_decides_as_each_context_alone(docs, ctx_docs, trace) -> None:
    snapshot = _snapshot(docs)
    batch_docs = ctx_docs + _swapped(ctx_docs) + ctx_docs
    contexts = [RouteContext.from_dict(d) for d in batch_docs]
    batched = explain_batch(contexts, snapshot, trace=trace)
    # The plain path: each context fresh, alone, on a snapshot of its own (every memo cold).
    alone = [explain(RouteContext.from_dict(d), _snapshot(docs), trace=trace) for d in batch_docs]
    assert batched == alone
    assert [d.canonical() for d in batched] == [d.canonical() for d in alone]


@settings(max_examples=120)
@given(policy_sets, st.lists(context_dicts(), min_size=1, max_size=5))
def test_batch_ids_equal_the_general_writer_over_fresh_copies(docs, ctx_docs) -> None:
    snapshot = _snapshot(docs)
    batch_docs = ctx_docs + _swapped(ctx_docs)
    batched = explain_batch([RouteContext.from_dict(d) for d in batch_docs], snapshot)
    for doc, d in zip(batch_docs, batched, strict=True):
        assert d.decision_id == plain_decision_id(doc, d)  # a fresh context, no memo


@given(context_dicts())
def test_the_context_text_from_given_account_texts_is_its_canonical_form(doc) -> None:
    ctx = RouteContext.from_dict(doc)
    texts = ",".join(a.canonical_json() for a in ctx.accounts)
    assert ctx.canonical_text(texts) == canonical_bytes(ctx.to_dict()).decode("utf-8")
    assert RouteContext.from_dict(doc).canonical_text() == ctx.canonical_text()


def test_a_batch_keeps_its_answers_untracked_once_they_are_no_longer_young() -> None:
    """Kept answers hold only strings, numbers and tuples of them, so the collections stop
    tracking them and they never add to a later full collection's walk."""
    snapshot = _snapshot(
        [
            {"id": "p", "match": {"roles": ["explorer"]}, "action": {"account_pool": ["a"]}},
            {"id": "q", "match": {}, "action": {"provider_lock": "anthropic"}},
            {
                "id": "r",
                "match": {"model_requirements": ["claude-opus"]},
                "action": {"provider_lock": "anthropic"},
            },
        ]
    )
    contexts = [
        RouteContext.from_dict(
            {
                "repo": f"acme/r{i}",
                "principal_id": "explorer" if i % 2 else "builder",
                "model_requirement": "claude-opus" if i % 3 else None,
                "accounts": [{"account_id": "a", "provider_binding": "anthropic"}],
            }
        )
        for i in range(300)
    ]
    compiled, call = resolver._start(
        snapshot, "ok", DEFAULT_VOCABULARY, "compact", DEFAULT_REDACTOR
    )
    decisions = [resolver._resolve(ctx, snapshot, compiled, call) for ctx in contexts]
    # No policy names these repos: one answer per distinct set of the other members.
    assert call.answered == 4
    assert {"p", "q", "r"} <= {d.policy_id for d in decisions}
    # A collection untracks a tuple whose items are untracked at the moment it is examined. An
    # answer's inner tuples may sit later in the collector's list than the answer itself (an
    # automatic collection during the batch moved them on), so one pass can leave the answer
    # tracked and the next untracks it: two full passes, as a running process's collections
    # would. A tracked item (a list, a dict of containers) keeps it tracked however many run.
    gc.collect()
    gc.collect()
    kept = [a for answers in call.answers.values() for a in answers.values()]
    assert len(kept) == 4
    tracked = [a for a in kept if gc.is_tracked(a)]
    assert not tracked, tracked[:3]
