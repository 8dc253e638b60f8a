"""Issue 11's fast paths agree with the general ones: the quick context reader with
``RouteContext.from_dict``'s general path (values and errors), the direct JSON line writer with
``json.dumps(to_dict())``, and the bounded compact trace with its documented bound."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rensei_routing.core.routing.context as quick_module
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.redact import DEFAULT_REDACTOR
from rensei_routing.core.routing.context import RouteContext, quick_context
from rensei_routing.core.routing.decision import RouteDecision
from rensei_routing.core.routing.explanation import COMPACT_RIVALS
from rensei_routing.core.routing.ids import ScanMemo
from rensei_routing.core.routing.jsonl import LineMemo, decision_line
from rensei_routing.core.routing.policy import PolicySnapshot, RoutingPolicy
from rensei_routing.core.routing.resolver import explain, explain_batch
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision
from rensei_routing.errors import MalformedError

from .strategies import context_dicts, policy_dicts


def _general(doc: Any) -> RouteContext:
    """``from_dict`` with the quick reader switched off."""
    saved = quick_module.quick_context
    quick_module.quick_context = lambda data, vocabulary: None  # type: ignore[assignment]
    try:
        return RouteContext.from_dict(doc)
    finally:
        quick_module.quick_context = saved


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from(["", " x ", "\ud800", "A" * 300]),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)
_FIELDS = st.sampled_from(
    [
        ("repo",),
        ("repo", "value"),
        ("repo", "version"),
        ("repo_class",),
        ("principal_id",),
        ("role",),
        ("model_requirement",),
        ("model_requirement", "kind"),
        ("model_requirement", "value"),
        ("request_face",),
        ("legacy_route",),
        ("legacy_route", "provider_binding"),
        ("legacy_route", "mechanism"),
        ("legacy_route", "model"),
        ("accounts",),
        ("accounts", 0),
        ("accounts", 0, "configured"),
        ("accounts", 0, "account_id"),
        ("accounts", 0, "administrative_state"),
        ("accounts", 0, "surprise"),
        ("surprise",),
    ]
)


def _mutate(doc: dict[str, Any], where: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    target: Any = doc
    for key in where[:-1]:
        inside = target.get(key) if isinstance(target, dict) else None
        if isinstance(target, list) and isinstance(key, int) and key < len(target):
            inside = target[key]
        if not isinstance(inside, (dict, list)):
            return doc
        target = inside
    last = where[-1]
    if isinstance(target, dict) or (isinstance(last, int) and last < len(target)):
        target[last] = value
    return doc


@settings(max_examples=400, deadline=None)
@given(context_dicts())
def test_the_quick_reader_reads_what_the_general_one_reads(doc: dict[str, Any]) -> None:
    quick = quick_context(doc, DEFAULT_VOCABULARY)
    assert quick is not None  # a plain valid document is the quick case
    general = _general(doc)
    assert quick == general
    assert quick.canonical_text() == general.canonical_text()


@settings(max_examples=600, deadline=None)
@given(context_dicts(), _FIELDS, _JSON)
def test_the_quick_reader_never_accepts_what_the_general_one_refuses(
    doc: dict[str, Any], where: tuple[Any, ...], value: Any
) -> None:
    doc = _mutate(doc, where, value)
    memo: dict[tuple[Any, ...], Any] = {}
    try:
        general: RouteContext | MalformedError = _general(doc)
    except MalformedError as e:
        general = e
    for _ in range(2):  # the second read goes through the memo
        quick = quick_context(doc, DEFAULT_VOCABULARY, memo)
        if isinstance(general, MalformedError):
            assert quick is None
            with pytest.raises(MalformedError) as raised:
                RouteContext.from_dict(doc)
            assert str(raised.value) == str(general)
        elif quick is not None:
            assert quick == general and quick.canonical_text() == general.canonical_text()


def test_the_memo_tells_a_boolean_from_an_integer() -> None:
    memo: dict[tuple[Any, ...], Any] = {}
    ok = {"accounts": [{"account_id": "a", "provider_binding": "anthropic", "configured": True}]}
    assert quick_context(ok, DEFAULT_VOCABULARY, memo) is not None
    one = {"accounts": [{"account_id": "a", "provider_binding": "anthropic", "configured": 1}]}
    assert quick_context(one, DEFAULT_VOCABULARY, memo) is None  # 1 == True as a dict key
    with pytest.raises(MalformedError, match="configured"):
        RouteContext.from_dict(one)


_POLICY_SETS = st.lists(policy_dicts(ids=[f"p{i}" for i in range(12)]), max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    _POLICY_SETS,
    st.lists(context_dicts(), min_size=1, max_size=12),
    st.sampled_from(["full", "compact"]),
)
def test_a_decision_line_is_the_json_of_to_dict(
    policies: list[dict[str, Any]], contexts: list[dict[str, Any]], trace: str
) -> None:
    snapshot = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(p) for p in policies), revision=3)
    stamps = (
        None,
        Freshness.live(),
        Freshness(ruleset_rev="org_\u00e9@3", age_ms=12, degraded=True),
    )
    memo: LineMemo = {}  # shared by every decision and stamp, as a batch shares it
    for decision in explain_batch(
        [RouteContext.from_dict(c) for c in contexts],
        snapshot,
        trace=trace,  # type: ignore[arg-type]
    ):
        for stamp in stamps:
            value = (
                decision.to_dict() if stamp is None else StampedDecision(decision, stamp).to_dict()
            )
            want = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            assert decision_line(decision, stamp) == want
            assert decision_line(decision, stamp, memo) == want


def _ladder(count: int) -> PolicySnapshot:
    """``count`` policies that all match ``{"role": "implementer"}``, one per priority, plus
    two tied winners with the same action (so no conflict) and one that never matches."""
    action = {"provider_lock": "anthropic"}
    docs = [
        {
            "id": f"rival-{i:03d}",
            "priority": 100 + i,
            "match": {"roles": ["implementer"]},
            "action": action,
        }
        for i in range(count)
    ]
    docs += [
        {"id": "top-a", "priority": 5_000, "match": {"roles": ["implementer"]}, "action": action},
        {"id": "top-b", "priority": 5_000, "match": {"roles": ["implementer"]}, "action": action},
        {"id": "other", "priority": 9, "match": {"roles": ["reviewer"]}, "action": action},
    ]
    return PolicySnapshot.of(tuple(RoutingPolicy.from_dict(d) for d in docs), revision=1)


def test_the_compact_trace_is_bounded() -> None:
    snapshot = _ladder(30)
    ctx = RouteContext.from_dict({"principal_id": "implementer"})
    compact = explain(ctx, snapshot, trace="compact")
    full = explain(ctx, snapshot, trace="full")
    ex = compact.explanation
    assert [c.policy_id for c in ex.considered] == [
        "top-a",
        "top-b",
        *[f"rival-{i:03d}" for i in range(29, 29 - COMPACT_RIVALS, -1)],  # best rivals first
    ]
    assert [c.reason for c in ex.considered] == ["matched"] * 2 + ["outranked"] * COMPACT_RIVALS
    assert ex.unlisted_outranked_count == 30 - COMPACT_RIVALS
    assert ex.unlisted_policy_count == 1
    assert len(full.explanation.considered) == 33  # --trace full still lists everything
    assert full.explanation.unlisted_outranked_count == 0
    assert compact.decision_id == full.decision_id
    # the count is in the JSON, and reads back
    data = compact.to_dict()
    assert data["explanation"]["outranked"] == 30 - COMPACT_RIVALS
    assert compact.canonical() == canonical_bytes(data)
    assert RouteDecision.from_dict(json.loads(compact.canonical())) == compact


def test_a_compact_trace_says_so_and_a_full_one_reads_as_before() -> None:
    snapshot = _ladder(3)
    ctx = RouteContext.from_dict({"principal_id": "implementer"})
    compact = explain(ctx, snapshot, trace="compact")
    full = explain(ctx, snapshot, trace="full")
    assert compact.to_dict()["explanation"]["trace"] == "compact"
    assert compact.to_dict()["explanation"]["outranked"] == 3  # rivals counted (stored by ids)
    assert "trace" not in full.to_dict()["explanation"]
    assert b"unlisted_outranked_count" not in full.canonical()
    assert b'"trace"' not in full.canonical()


def test_a_bounded_trace_written_before_compact_records_reads_back_as_written() -> None:
    """Before compact records, a trace at more than 256 policies listed the winners, eight
    rivals and the accounts, with no ``trace`` member: such a record reads back unchanged."""
    full = explain(
        RouteContext.from_dict(
            {
                "principal_id": "implementer",
                "accounts": [{"account_id": "a1", "provider_binding": "anthropic"}],
            }
        ),
        _ladder(12),
        trace="full",
    ).to_dict()
    ex = full["explanation"]
    ex["considered"] = ex["considered"][:10]  # the two winners and eight rivals
    ex["unlisted_outranked_count"] = 4
    ex["unlisted_policy_count"] = 1
    stored = canonical_bytes(full)
    back = RouteDecision.from_dict(json.loads(stored))
    assert not back.explanation.compact
    assert back.explanation.eligible_account_ids == ("a1",)
    assert back.canonical() == stored


@settings(max_examples=150, deadline=None)
@given(
    st.lists(policy_dicts(ids=[f"p{i}" for i in range(40)]), max_size=40),
    st.lists(context_dicts(), min_size=1, max_size=4),
)
def test_the_compact_trace_is_the_head_of_the_full_one(
    policies: list[dict[str, Any]], contexts: list[dict[str, Any]]
) -> None:
    snapshot = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(p) for p in policies), revision=1)
    ctxs = [RouteContext.from_dict(c) for c in contexts]
    full = explain_batch(ctxs, snapshot, trace="full")
    compact = explain_batch(ctxs, snapshot, trace="compact")
    for f, c in zip(full, compact, strict=True):
        assert f.decision_id == c.decision_id and f.outcome == c.outcome
        matched = [e for e in f.explanation.considered if e.matched]
        ties = sum(1 for e in matched if e.reason == "matched")
        assert list(c.explanation.considered) == matched[: ties + COMPACT_RIVALS]
        assert c.explanation.unlisted_outranked_count == max(
            0, len(matched) - ties - COMPACT_RIVALS
        )
        assert c.explanation.unlisted_policy_count == len(policies) - len(matched)


@settings(max_examples=100, deadline=None)
@given(
    _POLICY_SETS,
    st.lists(context_dicts(), min_size=1, max_size=4),
    st.sampled_from([None, "ghp_" + "a1" * 18, "password=hunter2", "sk-ant-api03-abc123"]),
)
def test_a_record_the_scan_clears_is_stored_as_its_canonical_bytes(
    policies: list[dict[str, Any]], contexts: list[dict[str, Any]], secret: str | None
) -> None:
    snapshot = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(p) for p in policies), revision=3)
    if secret is not None:
        contexts = [{**contexts[0], "principal_id": secret}, *contexts[1:]]
    memo = ScanMemo(DEFAULT_REDACTOR)
    stamp = Freshness(ruleset_rev="org@3", age_ms=1, degraded=False)
    for i, decision in enumerate(
        explain_batch([RouteContext.from_dict(c) for c in contexts], snapshot)
    ):
        stamped = StampedDecision(decision, stamp)
        suspect = memo.record_may_redact(decision, stamp.ruleset_rev)
        if i == 0 and secret is not None:
            assert suspect  # the credential is in the context
        if not suspect:
            assert stamped.canonical() == encode_payload(stamped, DEFAULT_REDACTOR)


def test_a_line_memo_tells_decisions_apart_by_every_list() -> None:
    """Decisions alike but for their conflicting policies get their own lines from one memo."""
    docs = [
        {"id": f"{role}-{lock}", "priority": 7, "match": {"roles": [role]}, "action": action}
        for role in ("implementer", "reviewer")
        for lock, action in (("a", {"provider_lock": "anthropic"}), ("z", {"account_pool": []}))
    ]
    snapshot = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(d) for d in docs), revision=1)
    accounts = [{"account_id": "acct", "provider_binding": "anthropic"}]
    contexts = [
        RouteContext.from_dict({"principal_id": role, "accounts": accounts})
        for role in ("implementer", "reviewer", "implementer")
    ]
    memo: LineMemo = {}
    lines = [decision_line(d, None, memo) for d in explain_batch(contexts, snapshot)]
    conflicts = [json.loads(line)["explanation"]["conflicting_policy_ids"] for line in lines]
    assert conflicts == [
        ["implementer-a", "implementer-z"],
        ["reviewer-a", "reviewer-z"],
        ["implementer-a", "implementer-z"],
    ]
    for decision, line in zip(explain_batch(contexts, snapshot), lines, strict=True):
        assert line == json.dumps(decision.to_dict(), ensure_ascii=False, separators=(",", ":"))
