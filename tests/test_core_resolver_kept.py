"""Single ``explain`` calls keep their call's memos on the snapshot's index, so a live caller
deciding spawn after spawn finds what repeats already worked out: a decision is the same with
the kept memos warm or cold, per state, trace, vocabulary and redactor, from many threads at
once, and the kept calls stay bounded."""

from __future__ import annotations

import re
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain, explain_batch
from rensei_routing.core.redact import DEFAULT_PATTERNS, RedactionPattern, Redactor
from rensei_routing.core.routing import resolver

from .strategies import context_dicts, policy_dicts

policy_sets = st.lists(policy_dicts(), max_size=7)
states = st.sampled_from(["ok", "absent", "corrupt"])
traces = st.sampled_from(["auto", "full", "compact"])


def _snapshot(docs: list[dict[str, Any]]) -> PolicySnapshot:
    return PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=5)


def _fresh(ctx_doc: dict[str, Any]) -> RouteContext:
    return RouteContext.from_dict(ctx_doc)


@settings(max_examples=150)
@given(
    policy_sets,
    st.lists(st.tuples(context_dicts(), states, traces), min_size=1, max_size=6),
)
def test_warm_kept_memos_decide_as_a_cold_snapshot(docs, requests) -> None:
    kept = _snapshot(docs)
    # Each request twice over, interleaving states and traces: later ones find warm memos.
    for ctx_doc, state, trace in requests * 2:
        warm = explain(_fresh(ctx_doc), kept, snapshot_state=state, trace=trace)
        cold = explain(_fresh(ctx_doc), _snapshot(docs), snapshot_state=state, trace=trace)
        assert warm == cold
        assert warm.canonical() == cold.canonical()
    assert len(kept._compiled.calls) <= resolver._CALLS_KEPT


@settings(max_examples=60)
@given(policy_sets, st.lists(context_dicts(), min_size=1, max_size=5))
def test_single_decisions_equal_a_batch_over_the_same_snapshot(docs, ctx_docs) -> None:
    snapshot = _snapshot(docs)
    alone = [explain(_fresh(d), snapshot) for d in ctx_docs * 2]
    assert explain_batch([_fresh(d) for d in ctx_docs * 2], snapshot) == alone


def _widget_redactor() -> Redactor:
    widget = RedactionPattern("widget-name", re.compile("widgets", re.ASCII), ("widgets",))
    return Redactor(patterns=(*DEFAULT_PATTERNS, widget))


CONTEXT = {
    "repo": "acme/widgets",
    "role": "implementer",
    "accounts": [{"account_id": "anthropic-primary", "provider_binding": "anthropic"}],
}
POLICY = {
    "id": "p",
    "priority": 1,
    "match": {},
    "action": {"account_pool": ["anthropic-primary"]},
}


def test_each_redactor_and_vocabulary_keeps_its_own_call() -> None:
    snapshot = _snapshot([POLICY])
    other = _widget_redactor()
    plain = explain(_fresh(CONTEXT), snapshot)
    redacted = explain(_fresh(CONTEXT), snapshot, redactor=other)
    # The id covers the redacted preimage: another redactor, another id, as on a cold snapshot.
    assert redacted.decision_id != plain.decision_id
    assert redacted == explain(_fresh(CONTEXT), _snapshot([POLICY]), redactor=other)
    assert explain(_fresh(CONTEXT), snapshot) == plain
    assert len(snapshot._compiled.calls) == 2


def test_kept_calls_are_bounded() -> None:
    snapshot = _snapshot([POLICY])
    redactors = [_widget_redactor() for _ in range(resolver._CALLS_KEPT * 2 + 1)]
    first = [explain(_fresh(CONTEXT), snapshot, redactor=r) for r in redactors]
    assert len(snapshot._compiled.calls) <= resolver._CALLS_KEPT
    assert len({d.decision_id for d in first}) == 1
    assert first[0] == explain(_fresh(CONTEXT), _snapshot([POLICY]), redactor=redactors[0])


def test_an_unhashable_state_is_held_as_corrupt_and_keeps_nothing() -> None:
    snapshot = _snapshot([POLICY])
    explain(_fresh(CONTEXT), snapshot)  # index built, one kept call
    decision = explain(_fresh(CONTEXT), snapshot, snapshot_state=["ok"])  # type: ignore[arg-type]
    assert (decision.outcome, decision.reason) == ("held", "snapshot-unavailable")
    assert len(snapshot._compiled.calls) == 1


@settings(max_examples=20, deadline=None)
@given(policy_sets, st.lists(context_dicts(), min_size=1, max_size=4))
def test_threads_deciding_on_one_snapshot_agree_with_one_thread(docs, ctx_docs) -> None:
    want = [explain(_fresh(d), _snapshot(docs)).canonical() for d in ctx_docs]
    shared = _snapshot(docs)
    got: list[list[bytes]] = []
    barrier = threading.Barrier(4)

    def work() -> None:
        barrier.wait()
        got.append([explain(_fresh(d), shared).canonical() for d in ctx_docs * 5][: len(want)])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 4
