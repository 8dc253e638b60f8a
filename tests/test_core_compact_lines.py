"""A compact explanation's line, written directly, is the generic encoder's: the context's compact
text (default account members and null legacy members left out, in ``to_dict``'s order) and the
whole ``explain-batch`` line of a compact decision, over contexts whose strings may hold anything
(including the very member texts the writer leaves out), read by either reader."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core.routing._quick import Pieces, quick_line
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.decision import RouteDecision
from rensei_routing.core.routing.explanation import compact_context
from rensei_routing.core.routing.jsonl import (
    LineMemo,
    MemberTexts,
    compact_context_display,
    decision_line,
)
from rensei_routing.core.routing.policy import PolicySnapshot, RoutingPolicy
from rensei_routing.core.routing.resolver import explain_batch
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision

from .strategies import ACCOUNTS, context_dicts, policy_dicts

#: Texts that look like the members the compact text leaves out, and characters JSON escapes.
_DECOYS = [
    ',"configured":true,',
    ',"administrative_state":"active"}',
    '"legacy_route":{"account_id":null,',
    '"model":null',
    "\\",
    '"',
    "\u00e9\u2028\x7f",
]
_TEXT = st.sampled_from(_DECOYS) | st.text(min_size=1, max_size=8).filter(lambda s: s.strip())
_MECHANISMS = sorted(DEFAULT_VOCABULARY.legacy_mechanisms)


@st.composite
def _contexts(draw: st.DrawFn) -> dict[str, Any]:
    """A valid context with every legacy member present or null and any account state."""
    doc = draw(context_dicts())
    if draw(st.booleans()):
        doc["principal_id"] = draw(_TEXT)
    if draw(st.booleans()):
        doc["legacy_route"] = {
            "provider_binding": draw(_TEXT),
            "account_id": draw(st.none() | _TEXT),
            "model": draw(st.none() | _TEXT),
            "mechanism": draw(st.none() | st.sampled_from(_MECHANISMS)),
            "mechanism_detail": draw(st.none() | _TEXT),
        }
    if draw(st.booleans()):
        doc["accounts"] = [
            {
                "account_id": draw(_TEXT),
                "provider_binding": draw(st.sampled_from([b for _, b in ACCOUNTS])),
                "configured": draw(st.booleans()),
                "administrative_state": draw(st.sampled_from(["active", "disabled", "draining"])),
            }
            for _ in range(draw(st.integers(0, 3)))
        ]
    return doc


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _both_readers(doc: dict[str, Any]) -> list[RouteContext]:
    """The context as the general reader builds it and, where it reads the line, as the batch's
    line reader does (its display text assembled from shared pieces)."""
    general = RouteContext.from_dict(doc)
    quick = quick_line(_dumps(general.to_dict()), DEFAULT_VOCABULARY, {}, Pieces())
    if quick is None:  # a string the line reader leaves to the general path
        return [general]
    assert quick == general
    return [general, quick]


@settings(max_examples=500, deadline=None)
@given(_contexts())
def test_the_compact_context_text_is_the_json_of_compact_context(doc: dict[str, Any]) -> None:
    members: MemberTexts = {}
    for ctx in _both_readers(doc):
        want = _dumps(compact_context(ctx.to_dict()))
        assert compact_context_display(ctx) == want
        for _ in range(2):  # the second through the memo's kept texts
            assert compact_context_display(ctx, members) == want


_POLICY_SETS = st.lists(policy_dicts(ids=[f"p{i}" for i in range(8)]), min_size=1, max_size=10)


@settings(max_examples=200, deadline=None)
@given(_POLICY_SETS, st.lists(_contexts(), min_size=1, max_size=8))
def test_a_compact_decision_line_is_the_json_of_to_dict(
    policies: list[dict[str, Any]], docs: list[dict[str, Any]]
) -> None:
    snapshot = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(p) for p in policies), revision=2)
    memo: LineMemo = {}
    members: MemberTexts = {}  # both shared by every decision, as a batch shares them
    contexts = [c for doc in docs for c in _both_readers(doc)]
    for decision in explain_batch(contexts, snapshot, trace="compact"):
        assert decision.explanation.compact
        for stamp in (None, Freshness.live()):
            value = (
                decision.to_dict() if stamp is None else StampedDecision(decision, stamp).to_dict()
            )
            want = _dumps(value)
            assert decision_line(decision, stamp) == want
            assert decision_line(decision, stamp, memo) == want
            assert decision_line(decision, stamp, memo, members) == want


def _line_is_the_encoders(decision: RouteDecision) -> dict[str, Any]:
    stamp = Freshness.live()
    line = decision_line(decision, stamp, {}, {})
    assert decision_line(decision, stamp) == line
    assert line == _dumps(StampedDecision(decision, stamp).to_dict())
    brief: dict[str, Any] = json.loads(line)["explanation"]
    return brief


def test_a_compact_line_in_either_form() -> None:
    """Both forms of a compact explanation, each equal to the encoder's line: stored by ids (the
    winner alone, tied winners listed, a conflict's winners) and the earlier form, which a
    decision read back from an earlier record keeps (its listed rivals cannot be stated by ids),
    with and without conflicting ids."""
    action = {"provider_lock": "anthropic"}
    docs = [
        {"id": "solo", "priority": 9, "match": {"roles": ["reviewer"]}, "action": action},
        {"id": "tie-a", "priority": 7, "match": {"roles": ["implementer"]}, "action": action},
        {"id": "tie-b", "priority": 7, "match": {"roles": ["implementer"]}, "action": action},
        {"id": "lock-a", "priority": 5, "match": {"roles": ["planner"]}, "action": action},
        {
            "id": "lock-z",
            "priority": 5,
            "match": {"roles": ["planner"]},
            "action": {"provider_lock": "zai-harness"},
        },
    ]
    snapshot = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(d) for d in docs), revision=1)
    legacy = {"provider_binding": "zai", "model": None, "mechanism": None}
    accounts = [
        {"account_id": "a", "provider_binding": "anthropic"},
        {"account_id": "b", "provider_binding": "anthropic", "configured": False},
        {"account_id": "c", "provider_binding": "anthropic", "administrative_state": "draining"},
    ]
    contexts = [
        RouteContext.from_dict({"principal_id": role, "legacy_route": legacy, "accounts": accounts})
        for role in ("reviewer", "implementer", "planner", "unknown-role")
    ]
    decisions = explain_batch(contexts, snapshot, trace="compact")
    winners = []
    for decision in decisions:
        brief = _line_is_the_encoders(decision)
        assert "unmatched" in brief  # stored by ids
        winners.append(brief.get("winners"))
        assert brief["context"]["legacy_route"] == {"provider_binding": "zai"}
        assert [set(a) for a in brief["context"]["accounts"]] == [
            {"account_id", "provider_binding"},
            {"account_id", "provider_binding", "configured"},
            {"account_id", "provider_binding", "administrative_state"},
        ]
    assert winners == [None, ["tie-a", "tie-b"], ["lock-a", "lock-z"], None]
    for decision, rival in ((decisions[0], "tie-a"), (decisions[2], "solo")):
        earlier = decision.to_dict()
        level = earlier["precedence_level"]
        listed = [earlier["policy_id"], rival] if earlier["policy_id"] else [rival]
        earlier["explanation"] = {
            "context": contexts[0].to_dict(),
            "considered": [
                {"policy_id": i, "precedence_level": level, "priority": n, "matched": True}
                | {"reason": "matched" if n == 9 else "outranked"}
                for i, n in zip(listed, (9, 2), strict=False)
            ],
            "trace": "compact",
            "unlisted_outranked_count": 1,
            "unlisted_policy_count": 3,
        }
        if earlier["reason"] == "policy-conflict":
            earlier["explanation"]["conflicting_policy_ids"] = ["lock-a", "lock-z"]
        read = RouteDecision.from_dict(earlier)
        assert read.explanation.compact
        brief = _line_is_the_encoders(read)
        assert "unmatched" not in brief and "considered" in brief  # the earlier form
