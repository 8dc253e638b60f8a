"""Hypothesis properties of the resolver: total, deterministic, order-independent, batch = map."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import (
    PolicySnapshot,
    RouteContext,
    RouteDecision,
    RoutingPolicy,
    explain,
    explain_batch,
    hash_policies,
)
from rensei_routing.core.routing.explanation import COMPACT_RIVALS, MATCH_REASONS

from .strategies import context_dicts, policy_dicts

policy_sets = st.lists(policy_dicts(), max_size=7)
states = st.sampled_from(["ok", "absent", "corrupt"])


def _snapshot(docs: list[dict], revision: int = 3) -> PolicySnapshot:
    return PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=revision)


@settings(max_examples=200)
@given(policy_sets, context_dicts(), states)
def test_explain_is_total_and_deterministic(docs, ctx_doc, state) -> None:
    snapshot = _snapshot(docs)
    ctx = RouteContext.from_dict(ctx_doc)
    first = explain(ctx, snapshot, snapshot_state=state)
    second = explain(RouteContext.from_dict(ctx_doc), _snapshot(docs), snapshot_state=state)
    assert first == second
    assert first.to_dict() == second.to_dict()
    # The record is self-sufficient: it reads back to the same decision.
    assert RouteDecision.from_dict(first.to_dict()) == first
    assert first.outcome in ("selected", "held", "rejected")
    assert all(c.reason in MATCH_REASONS for c in first.explanation.considered)


@settings(max_examples=120)
@given(policy_sets, context_dicts(), st.randoms(use_true_random=False))
def test_explain_is_independent_of_policy_order(docs, ctx_doc, rnd) -> None:
    ctx = RouteContext.from_dict(ctx_doc)
    shuffled = list(docs)
    rnd.shuffle(shuffled)
    assert explain(ctx, _snapshot(docs)) == explain(ctx, _snapshot(shuffled))


@settings(max_examples=120)
@given(policy_sets, st.randoms(use_true_random=False))
def test_hash_policies_is_order_independent(docs, rnd) -> None:
    policies = [RoutingPolicy.from_dict(d) for d in docs]
    shuffled = list(policies)
    rnd.shuffle(shuffled)
    assert hash_policies(policies) == hash_policies(shuffled)
    # Set-valued fields are sets: the order a user wrote them in does not matter either.
    reversed_docs = []
    for d in docs:
        match = {k: list(reversed(v)) for k, v in d["match"].items()}
        action = dict(d["action"])
        action["allowed_patterns"] = list(reversed(action["allowed_patterns"]))
        action["requirement_map"] = list(reversed(action["requirement_map"]))
        reversed_docs.append({**d, "match": match, "action": action})
    assert hash_policies(RoutingPolicy.from_dict(d) for d in reversed_docs) == hash_policies(
        policies
    )


@settings(max_examples=200)
@given(policy_sets, st.lists(context_dicts(), max_size=6), states)
def test_explain_batch_equals_mapping_explain(docs, ctx_docs, state) -> None:
    snapshot = _snapshot(docs)
    contexts = [RouteContext.from_dict(d) for d in ctx_docs]
    assert explain_batch(contexts, snapshot, snapshot_state=state) == [
        explain(c, snapshot, snapshot_state=state) for c in contexts
    ]


@settings(max_examples=120)
@given(policy_sets, context_dicts())
def test_compact_trace_agrees_with_full_trace(docs, ctx_doc) -> None:
    snapshot = _snapshot(docs)
    ctx = RouteContext.from_dict(ctx_doc)
    full = explain(ctx, snapshot, trace="full")
    compact = explain(ctx, snapshot, trace="compact")
    # Same decision, same id; only the explanation's listing differs.
    assert full.decision_id == compact.decision_id
    assert (full.outcome, full.reason, full.policy_id, full.account_id) == (
        compact.outcome,
        compact.reason,
        compact.policy_id,
        compact.account_id,
    )
    matched = [c for c in full.explanation.considered if c.matched]
    # The compact listing: the winners (every tie at the best level), then COMPACT_RIVALS
    # outranked rivals; the other matched policies and every unmatched one are counted.
    winners = [c for c in matched if c.reason == "matched"]
    listed = matched[: len(winners) + COMPACT_RIVALS]
    assert list(compact.explanation.considered) == listed
    assert compact.explanation.unlisted_outranked_count == len(matched) - len(listed)
    assert len(full.explanation.considered) == len(snapshot.policies)
    assert full.explanation.unlisted_policy_count == 0
    assert full.explanation.unlisted_outranked_count == 0
    assert compact.explanation.unlisted_policy_count == len(snapshot.policies) - len(matched)
    # The index and the per-policy evaluation agree: nothing unmatched is called matched.
    for c in full.explanation.considered:
        assert c.matched == (c.reason in ("matched", "outranked"))


@settings(max_examples=120)
@given(policy_sets, context_dicts())
def test_a_corrupt_snapshot_always_holds(docs, ctx_doc) -> None:
    decision = explain(RouteContext.from_dict(ctx_doc), _snapshot(docs), snapshot_state="corrupt")
    assert (decision.outcome, decision.reason, decision.policy_source) == (
        "held",
        "snapshot-unavailable",
        "none",
    )
    assert decision.account_id is None and decision.policy_id is None


@settings(max_examples=200)
@given(policy_sets)
def test_policies_round_trip_through_json(docs) -> None:
    for d in docs:
        policy = RoutingPolicy.from_dict(d)
        assert RoutingPolicy.from_dict(policy.to_dict()) == policy


@settings(max_examples=200)
@given(context_dicts())
def test_contexts_round_trip_through_json(doc) -> None:
    ctx = RouteContext.from_dict(doc)
    assert RouteContext.from_dict(ctx.to_dict()) == ctx


@settings(max_examples=150)
@given(policy_sets, context_dicts(), states, st.sampled_from(["full", "compact"]))
def test_decision_emitter_equals_the_encoder(docs, ctx_doc, state, trace) -> None:
    from rensei_routing import canonical_bytes

    decision = explain(
        RouteContext.from_dict(ctx_doc), _snapshot(docs), snapshot_state=state, trace=trace
    )
    assert decision.canonical() == canonical_bytes(decision.to_dict())
    # A decision read back from its record emits the same bytes.
    assert RouteDecision.from_dict(decision.to_dict()).canonical() == decision.canonical()
