"""A compact decision's line through the batch's memo (written from the decision's fields and
its explanation's parts, the explanation never built; see ``RouteDecision.compact_parts``) is
the generic encoder's: for fresh decisions as a batch writes them, under one memo shared by
decisions alike but for their winners or counts, by several snapshots and by several stamps."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.decision import RouteDecision
from rensei_routing.core.routing.jsonl import LineMemo, MemberTexts, decision_line
from rensei_routing.core.routing.policy import PolicySnapshot, RoutingPolicy
from rensei_routing.core.routing.resolver import explain, explain_batch
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision

from .strategies import context_dicts, policy_dicts

_STAMPS = (None, Freshness.live(), Freshness(ruleset_rev="org@4", age_ms=5, degraded=True))


def _want(decision: RouteDecision, stamp: Freshness | None) -> str:
    value = decision.to_dict() if stamp is None else StampedDecision(decision, stamp).to_dict()
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: Few ids over many policies: ties, conflicts and outranked rivals in every count.
_POLICY_SETS = st.lists(policy_dicts(ids=[f"p{i}" for i in range(5)]), min_size=1, max_size=14)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_POLICY_SETS, min_size=1, max_size=2),
    st.lists(context_dicts(), min_size=1, max_size=12),
    st.sampled_from(_STAMPS),
)
def test_a_memo_line_of_a_fresh_decision_is_the_encoders(
    policy_sets: list[list[dict[str, Any]]],
    docs: list[dict[str, Any]],
    stamp: Freshness | None,
) -> None:
    memo: LineMemo = {}
    members: MemberTexts = {}  # both shared by every snapshot's decisions, as a batch shares them
    contexts = [RouteContext.from_dict(doc) for doc in docs]
    for revision, policies in enumerate(policy_sets, start=1):
        snapshot = PolicySnapshot.of(
            tuple(RoutingPolicy.from_dict(p) for p in policies), revision=revision
        )
        decisions = explain_batch(contexts, snapshot, trace="compact")
        lines = [decision_line(d, stamp, memo, members) for d in decisions]  # nothing read yet
        for decision, line in zip(decisions, lines, strict=True):
            assert decision.compact_parts() is not None
            assert line == _want(decision, stamp)


def _policy(pid: str, priority: int, face: str | None = None) -> RoutingPolicy:
    match: dict[str, Any] = {"roles": ["implementer"]}
    if face is not None:  # faces never change a policy's rung
        match["request_faces"] = [face]
    action = {"provider_lock": "anthropic"}
    return RoutingPolicy.from_dict(
        {"id": pid, "priority": priority, "match": match} | {"action": action}
    )


#: One rung; ``top-0`` wins every implementer's question, tied with ``top-1`` when agentic.
_TIERS = PolicySnapshot.of(
    (
        _policy("top-0", 900),
        _policy("top-1", 900, "agentic"),
        _policy("r-a", 100, "agentic"),
        _policy("r-u1", 101, "unknown"),
        _policy("r-u2", 102, "unknown"),
    ),
    revision=1,
)


def test_the_memo_tells_apart_lines_alike_but_for_winners_and_counts() -> None:
    """Decisions whose fields are all alike (the same policy, rung and priority) but for the
    winners listed and the rivals counted get their own lines from one memo (agentic: two
    winners, one rival; unknown: one winner, two rivals, as many unmatched; one-shot: one
    winner alone); a repeat is written without building its explanation."""
    memo: LineMemo = {}
    members: MemberTexts = {}
    stamp = Freshness.live()
    contexts = [
        RouteContext.from_dict({"principal_id": "implementer", "request_face": face})
        for face in ("agentic", "unknown", "one-shot")
    ]
    decisions = explain_batch(contexts * 2, _TIERS, trace="compact")
    firsts, repeats = decisions[:3], decisions[3:]
    assert len({d._answer_fields() for d in firsts}) == 1
    lines = [decision_line(d, stamp, memo, members) for d in firsts]
    assert lines == [_want(d, stamp) for d in firsts]
    assert len({json.dumps(json.loads(line)["explanation"]) for line in lines}) == 3
    assert [decision_line(d, stamp, memo, members) for d in repeats] == lines
    assert all(d._explanation is None for d in repeats)  # the repeats took the memo's parts


def test_a_decision_without_kept_parts_takes_the_general_writer() -> None:
    """A decision read back (its explanation given whole) has no parts to key by."""
    snapshot = _TIERS
    ctx = RouteContext.from_dict({"principal_id": "implementer", "request_face": "agentic"})
    decision = explain(ctx, snapshot, trace="compact")
    read = RouteDecision.from_dict(decision.to_dict())
    assert read.compact_parts() is None
    assert explain(ctx, snapshot, trace="full").compact_parts() is None
    memo: LineMemo = {}
    for d in (decision, read):
        assert decision_line(d, None, memo, {}) == _want(d, None)
