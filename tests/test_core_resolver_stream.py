"""The resolver's batch machinery: ``explain_iter`` streams, the per-call memos never change an
answer (also when they are cleared at their bound), a compact trace reads past its first look
when ties fill it, and a decision is a frozen value that a batch keeps as one object."""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import (
    PolicySnapshot,
    RouteContext,
    RouteDecision,
    RoutingPolicy,
    explain,
    explain_batch,
    explain_iter,
)
from rensei_routing.core.routing import ids, resolver
from rensei_routing.core.routing.explanation import COMPACT_RIVALS, Explanation

from .strategies import context_dicts, policy_dicts

policy_sets = st.lists(policy_dicts(), max_size=7)
states = st.sampled_from(["ok", "absent", "corrupt"])
traces = st.sampled_from(["auto", "full", "compact"])


def _snapshot(docs: list[dict[str, Any]], revision: int = 3) -> PolicySnapshot:
    return PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=revision)


@settings(max_examples=150)
@given(policy_sets, st.lists(context_dicts(), min_size=1, max_size=5), states, traces)
def test_a_stream_decides_as_each_context_alone(docs, ctx_docs, state, trace) -> None:
    snapshot = _snapshot(docs)
    # Repeated contexts (and fresh copies of them) exercise every memo's hit path.
    contexts = [RouteContext.from_dict(d) for d in ctx_docs * 3]
    alone = [explain(c, _snapshot(docs), snapshot_state=state, trace=trace) for c in contexts]
    streamed = list(explain_iter(iter(contexts), snapshot, snapshot_state=state, trace=trace))
    batched = explain_batch(contexts, snapshot, snapshot_state=state, trace=trace)
    assert streamed == alone
    assert batched == alone
    assert [d.to_dict() for d in streamed] == [d.to_dict() for d in alone]


@settings(max_examples=100)
@given(policy_sets, st.lists(context_dicts(), min_size=2, max_size=6), traces)
def test_memos_cleared_at_their_bound_change_nothing(docs, ctx_docs, trace) -> None:
    snapshot = _snapshot(docs)
    contexts = [RouteContext.from_dict(d) for d in ctx_docs * 2]
    want = [explain(c, snapshot, trace=trace) for c in contexts]
    with pytest.MonkeyPatch.context() as mp:
        # Every memo of the call (and the redaction scan memo) starts over at each entry.
        mp.setattr(resolver, "MEMO_LIMIT", 1)
        mp.setattr(ids, "MEMO_LIMIT", 1)
        got = explain_batch(contexts, snapshot, trace=trace)
    assert got == want


def test_explain_iter_is_lazy() -> None:
    snapshot = _snapshot([{"id": "p", "match": {}, "action": {}}])
    pulled = []

    def contexts() -> Iterator[RouteContext]:
        for i in range(3):
            pulled.append(i)
            yield RouteContext.from_dict({"repo": f"acme/r{i}"})
        raise RuntimeError("the stream broke after three")

    stream = explain_iter(contexts(), snapshot)
    assert pulled == []
    first = next(stream)
    assert pulled == [0]
    assert first.reason == "no-legacy-route" or first.policy_id == "p"
    assert len([next(stream), next(stream)]) == 2
    with pytest.raises(RuntimeError, match="after three"):
        next(stream)


def test_compact_trace_reads_on_when_ties_fill_the_first_look() -> None:
    # More tied winners than the first look holds, then rivals of a lower priority.
    tied = [{"id": f"t{i:02}", "priority": 5, "match": {}, "action": {}} for i in range(15)]
    rivals = [{"id": f"r{i:02}", "priority": 1, "match": {}, "action": {}} for i in range(12)]
    snapshot = _snapshot(tied + rivals)
    ctx = RouteContext.from_dict({"repo": "acme/app"})
    compact = explain(ctx, snapshot, trace="compact")
    full = explain(ctx, snapshot, trace="full")
    assert compact.decision_id == full.decision_id
    listed = [c.policy_id for c in compact.explanation.considered]
    assert listed == [f"t{i:02}" for i in range(15)] + [f"r{i:02}" for i in range(COMPACT_RIVALS)]
    assert [c.reason for c in compact.explanation.considered[:15]] == ["matched"] * 15
    assert [c.reason for c in compact.explanation.considered[15:]] == ["outranked"] * COMPACT_RIVALS
    assert compact.explanation.unlisted_outranked_count == 12 - COMPACT_RIVALS
    assert compact.explanation.unlisted_policy_count == 0


def _decision() -> RouteDecision:
    snapshot = _snapshot(
        [{"id": "p", "match": {"repo_ids": ["acme/app"]}, "action": {"account_pool": ["a"]}}]
    )
    ctx = RouteContext.from_dict(
        {
            "repo": "acme/app",
            "accounts": [
                {"account_id": "a", "provider_binding": "anthropic"},
                {"account_id": "b", "provider_binding": "anthropic"},
            ],
        }
    )
    return explain(ctx, snapshot)


def test_a_decision_is_frozen() -> None:
    d = _decision()
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.outcome = "held"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del d.reason
    with pytest.raises(AttributeError):
        d.explanation = d.explanation  # type: ignore[misc]
    ex = d.explanation
    with pytest.raises(AttributeError):
        ex.unlisted_policy_count = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del ex.context
    assert d.outcome == "selected" and d.account_id == "a"


def test_a_decision_is_a_value() -> None:
    d = _decision()
    again = _decision()
    read_back = RouteDecision.from_dict(d.to_dict())
    assert d == again == read_back
    assert hash(d) == hash(again) == hash(read_back)
    other = RouteDecision.from_dict({**d.to_dict(), "account_id": "b"})
    assert other != d
    assert (d == object()) is False
    assert repr(d).startswith("RouteDecision(decision_id='sha256:")
    assert "explanation=Explanation(context=RouteContext(" in repr(d)


@pytest.mark.parametrize("read_first", [False, True])
def test_decisions_pickle_and_copy(read_first: bool) -> None:
    d = _decision()
    if read_first:
        assert d.explanation.considered
    for clone in (pickle.loads(pickle.dumps(d)), copy.copy(d), copy.deepcopy(d)):
        assert clone == d and type(clone) is RouteDecision
        assert clone.to_dict() == d.to_dict()
    ex = d.explanation
    assert pickle.loads(pickle.dumps(ex)) == ex and type(copy.copy(ex)) is Explanation


def test_the_explanation_is_built_once_and_kept() -> None:
    d = _decision()
    ex = d.explanation
    assert d.explanation is ex
    assert ex.considered is ex.considered
    assert [c.policy_id for c in ex.considered] == ["p"]
    assert ex.eligible_account_ids == ("a",)
    assert [(r.account_id, r.reason) for r in ex.rejected_accounts] == [("b", "not-in-pool")]


def test_a_batch_keeps_one_tracked_object_per_decision() -> None:
    """What CPython's cyclic collector walks for a kept batch: the decision itself (its
    explanation is not built until read, its tuples hold only atomic values or shared
    entries), so a large batch does not trigger full collections over its own results."""
    snapshot = _snapshot(
        [
            {"id": "p", "match": {"roles": ["explorer"]}, "action": {"account_pool": ["a", "c"]}},
            {"id": "q", "match": {}, "action": {"provider_lock": "anthropic"}},
        ]
    )
    docs = [
        {
            "repo": f"acme/r{i}",
            "principal_id": "explorer" if i % 2 else "builder",
            "accounts": [
                {"account_id": "a", "provider_binding": "anthropic"},
                {"account_id": f"b{i % 7}", "provider_binding": "zai-harness"},
            ],
        }
        for i in range(2_000)
    ]
    contexts = [RouteContext.from_dict(d) for d in docs]
    explain_batch(contexts[:10], snapshot)  # index the snapshot first
    gc.collect()
    before = len(gc.get_objects())
    decisions = explain_batch(contexts, snapshot)
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert len(decisions) == 2_000
    # 2,000 decisions and the returned list; a shared entry or tuple here and there.
    assert grown <= 2_000 + 60, grown
    for d in decisions[:50]:
        assert d.explanation.context is not None
    gc.collect()
    assert len(gc.get_objects()) - before >= grown + 50  # reading builds an explanation


def test_a_stream_over_every_combination_decides_as_each_alone() -> None:
    """Every combination of the dimensions the memos key on (repo, class, principal,
    requirement, face, accounts), in one stream, against policies scoped on each value with
    requirement maps and pools: a memo keyed on too little gives some combination another's
    answer."""
    from itertools import product

    from .strategies import CLASSES, FACES, PRINCIPALS, REQUIREMENTS

    policies: list[dict[str, Any]] = []
    scoped = [
        ("repo_classes", CLASSES),
        ("principal_ids", PRINCIPALS),
        ("model_requirements", REQUIREMENTS),
        ("request_faces", FACES),
    ]
    for n, (key, pool) in enumerate(scoped):
        for i, value in enumerate(pool):
            policies.append(
                {
                    "id": f"{key}-{i}",
                    "priority": 10 * n + i,
                    "match": {key: [value]},
                    "action": {
                        "requirement_map": [
                            {"requirement": r, "model": m}
                            for r, m in zip(
                                REQUIREMENTS[i % 3 :: 2],
                                ["claude-opus-4-1", "glm-5.3", "claude-sonnet-4-5"],
                                strict=False,
                            )
                        ],
                        "account_pool": ["anthropic-a", "zai-a"] if i % 2 else [],
                        "allowed_patterns": ["claude-*"] if n == 2 else [],
                    },
                }
            )
    policies.append({"id": "repo", "priority": 99, "match": {"repo_ids": ["acme/widgets"]}})
    snapshot = _snapshot(policies)
    accounts = [
        [{"account_id": "anthropic-a", "provider_binding": "anthropic"}],
        [
            {"account_id": "zai-a", "provider_binding": "zai-harness"},
            {"account_id": "anthropic-b", "provider_binding": "anthropic"},
        ],
    ]
    contexts = [
        RouteContext.from_dict(
            {
                "repo": repo,
                "repo_class": cls,
                "principal_id": principal,
                "model_requirement": req,
                "request_face": face,
                "accounts": accs,
            }
        )
        for repo, cls, principal, req, face, accs in product(
            ["acme/widgets", "acme/gadgets"],
            [None, *CLASSES],
            [None, *PRINCIPALS[:3]],
            [None, *REQUIREMENTS],
            FACES,
            accounts,
        )
    ]
    for trace in ("full", "compact"):
        alone = [explain(c, snapshot, trace=trace) for c in contexts]
        assert explain_batch(contexts, snapshot, trace=trace) == alone
        assert len({(d.policy_id, d.effective_model, d.reason) for d in alone}) > 10


def test_threads_reading_fresh_decisions_at_once_all_see_the_whole_explanation() -> None:
    import sys
    import threading

    snapshot = _snapshot(
        [
            {"id": f"p{i}", "priority": i, "match": {"repo_ids": ["acme/app"]}, "action": {}}
            for i in range(6)
        ]
        + [{"id": "other", "match": {"roles": ["reviewer"]}, "action": {}}]
    )
    ctx = RouteContext.from_dict({"repo": "acme/app", "principal_id": "implementer"})
    want = [c.to_dict() for c in explain(ctx, snapshot, trace="full").explanation.considered]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(30):
            decisions = explain_batch([ctx] * 20, snapshot, trace="full")
            seen: list[Any] = []
            errors: list[BaseException] = []

            def read(
                decisions: list[RouteDecision], seen: list[Any], errors: list[BaseException]
            ) -> None:
                try:
                    for d in decisions:
                        seen.append([c.to_dict() for c in d.explanation.considered])
                except BaseException as e:
                    errors.append(e)

            threads = [
                threading.Thread(target=read, args=(decisions, seen, errors)) for _ in range(4)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            assert len(seen) == 80 and all(s == want for s in seen)
    finally:
        sys.setswitchinterval(interval)
