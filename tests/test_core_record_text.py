"""A batch's stamped record written directly (``core.snapshot.record_text.stamped_record``) is
``StampedDecision(decision, stamp).canonical()`` byte for byte, and so ``canonical_bytes`` of
its ``to_dict``: over generated policies and contexts whose strings may hold anything
(including the member texts a compact context leaves out), read by either reader, with one
memo shared by the whole batch, any stamp, and the forms it leaves to the general writer."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.decision import RouteDecision
from rensei_routing.core.routing.policy import PolicySnapshot, RoutingPolicy
from rensei_routing.core.routing.resolver import explain_batch
from rensei_routing.core.snapshot import record_text
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision
from rensei_routing.core.snapshot.record_text import RecordMemo, stamped_record

from .strategies import policy_dicts
from .test_core_compact_lines import _both_readers, _contexts

_POLICY_SETS = st.lists(policy_dicts(ids=[f"p{i}" for i in range(8)]), min_size=1, max_size=10)
_STAMPS = st.builds(
    Freshness,
    ruleset_rev=st.none() | st.text(max_size=6),
    age_ms=st.none() | st.integers(0, 2**53 - 1),
    degraded=st.booleans(),
    signature_scope=st.none() | st.sampled_from(["ruleset", "snapshot"]),
)


def _same(decision: RouteDecision, stamp: Freshness, memo: RecordMemo) -> None:
    stamped = StampedDecision(decision, stamp)
    want = stamped.canonical()
    assert want == canonical_bytes(stamped.to_dict())
    assert stamped_record(decision, stamp, {}) == want
    assert stamped_record(decision, stamp, memo) == want


@settings(max_examples=150, deadline=None)
@given(
    _POLICY_SETS,
    st.lists(_contexts(), min_size=1, max_size=8),
    _STAMPS,
    st.sampled_from(["compact", "full"]),
)
def test_a_stamped_record_is_the_general_writer_s(
    policies: list[dict[str, Any]], docs: list[dict[str, Any]], stamp: Freshness, trace: str
) -> None:
    snapshot = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(p) for p in policies), revision=2)
    memo: RecordMemo = {}  # shared by every decision, as a batch shares it
    contexts = [c for doc in docs for c in _both_readers(doc)]
    for decision in explain_batch(contexts, snapshot, trace=trace):  # type: ignore[arg-type]
        for _ in range(2):  # the second time through the memo's kept texts
            _same(decision, stamp, memo)


def test_a_full_memo_starts_again(monkeypatch: Any) -> None:
    monkeypatch.setattr(record_text, "RECORD_MEMO_LIMIT", 3)
    docs = [{"principal_id": r, "repo": f"acme/r{i}"} for i in range(6) for r in ("planner", "x")]
    action = {"provider_lock": "zai-harness"}
    policy = {"id": "p", "match": {"roles": ["planner"]}, "action": action}
    snapshot = PolicySnapshot.of((RoutingPolicy.from_dict(policy),), revision=1)
    memo: RecordMemo = {}
    stamp = Freshness.live()
    for decision in explain_batch(
        [RouteContext.from_dict(d) for d in docs], snapshot, trace="compact"
    ):
        _same(decision, stamp, memo)
        assert len(memo) <= 3 + 2  # cleared before a decision adds its (at most) three entries
