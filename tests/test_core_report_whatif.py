"""The pure halves of ``shadow report`` and ``policy whatif`` (core/report.py, core/whatif.py):
the accumulators' arithmetic, and reading a context straight out of stored canonical text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings

from rensei_routing import PolicySnapshot, RouteContext, explain
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.shadow.compare import ActualRoute, ShadowDecision, shadow_decision
from rensei_routing.core.shadow.report import ShadowReport, group_key
from rensei_routing.core.shadow.whatif import (
    Verdict,
    WhatIf,
    changed,
    stored_context,
    stored_context_text,
)
from rensei_routing.shadow.whatif import context_of

from .strategies import context_dicts

ACTUAL = ActualRoute(
    provider="zai",
    provider_binding="zai-harness",
    model="glm-5.3",
    mechanism="role-dial",
    transport="direct-http",
)


def _record(ctx: RouteContext, actual: ActualRoute = ACTUAL) -> ShadowDecision:
    return shadow_decision(
        recorded_at="2026-01-01T00:00:00Z",
        seam="lightweight-agent",
        principal_id=ctx.principal_id,
        actual=actual,
        proposed=explain(ctx, PolicySnapshot.empty()),
    )


@settings(max_examples=80, deadline=None)
@given(context_dicts())
def test_stored_context_is_the_parsed_payloads_context(doc: dict[str, Any]) -> None:
    ctx = RouteContext.from_dict(doc)
    for payload in (_record(ctx), explain(ctx, PolicySnapshot.empty())):
        text = encode_payload(payload).decode("utf-8")
        found = stored_context(text)
        assert found is not None
        key, value = found
        assert value == context_of(json.loads(text))
        assert key == canonical_bytes(value).decode("utf-8")


def test_a_context_key_inside_a_string_is_not_a_key() -> None:
    tricky = '"explanation":{"context":{"x":1}}'
    ctx = RouteContext.from_dict({"principal_id": tricky, "repo": "a/b"})
    text = encode_payload(_record(ctx)).decode("utf-8")
    assert text.count('"context":') == 1  # the principal's copy is escaped
    found = stored_context(text)
    assert found is not None and found[1]["principal_id"] == tricky


@pytest.mark.parametrize(
    "payload",
    [{"note": "x"}, {"explanation": {"context": {}}}, [1, 2], "text"],
    ids=["note", "no-decision-id", "array", "string"],
)
def test_payloads_without_a_decision_carry_no_stored_context(payload: Any) -> None:
    assert stored_context(canonical_bytes(payload).decode("utf-8")) is None


def _v(outcome: str = "selected", reason: str = "matched-policy", **kw: Any) -> Verdict:
    fields: dict[str, Any] = {
        "decision_id": "sha256:1",
        "policy_id": "p",
        "provider_binding": "anthropic",
        "effective_model": "m",
        "account_id": "a",
    }
    fields.update(kw)
    return Verdict(outcome=outcome, reason=reason, **fields)


def test_what_counts_as_a_change() -> None:
    assert not changed(_v(), _v(decision_id="sha256:other"))  # the id always differs
    for field in ("policy_id", "provider_binding", "effective_model", "account_id"):
        assert changed(_v(), _v(**{field: "other"})), field
    assert changed(_v(), _v(outcome="held"))


def test_the_what_if_counters_and_examples() -> None:
    acc = WhatIf(examples=2)
    acc.add(0, _v(), _v())  # unchanged
    acc.add(1, _v(), _v(provider_binding="zai-harness", account_id="z"))
    acc.add(2, _v(), _v(effective_model="n"))
    acc.add(3, _v(), _v(outcome="held", reason="no-eligible-account", policy_id="q"))
    acc.add(4, _v(outcome="rejected", reason="model-not-allowed"), _v())
    acc.add(5, _v(), _v(outcome="rejected", reason="model-not-allowed"))
    acc.add(6, _v(), _v(effective_model="n"))
    s = acc.summary()
    assert s.contexts == 7
    assert dict(s.counts) == {
        "changed": 6,
        "moved_provider": 1,
        "moved_model": 2,
        "moved_account": 1,
        "policy_changed": 1,
        "newly_held": 1,
        "newly_rejected": 1,
        "newly_selected": 1,
    }
    assert [e.seq for e in dict(s.examples)["changed"]] == [1, 2]  # capped at 2
    cell = next(c for c in s.cells if (c.before, c.after) == ("selected/matched-policy",) * 2)
    assert (cell.count, cell.changed, [e.seq for e in cell.examples]) == (4, 3, [1, 2])
    assert s.cells[0] is cell  # largest first
    assert s.any_change and not WhatIf().summary().any_change


def test_the_report_groups_and_rates() -> None:
    agreed_ctx = RouteContext.from_dict(
        {
            "principal_id": "reviewer",
            "repo": "a/b",
            "legacy_route": {"provider_binding": "zai-harness", "model": "glm-5.3"},
        }
    )
    held_ctx = RouteContext.from_dict({"principal_id": "adr_reviewer"})  # no legacy route: held
    report = ShadowReport("role")
    report.add(_record(agreed_ctx))
    report.add(_record(held_ctx))
    report.add(_record(held_ctx))
    rows = {r.group: r for r in report.rows()}
    assert [r.group for r in report.rows()] == ["(none)", "reviewer"]  # most spawns first
    assert rows["reviewer"].agreement_rate == 1.0
    assert rows["(none)"].held == 2 and rows["(none)"].agreement_rate == 0.0
    assert dict(rows["(none)"].divergence)["not-selected"] == 2
    total = report.total
    assert (total.spawns, total.agreed, total.direct_http) == (3, 1, 3)
    assert total.direct_http_share == 1.0
    assert ShadowReport().total.agreement_rate is None
    assert group_key(_record(held_ctx), "mechanism") == "role-dial"
    assert group_key(_record(agreed_ctx), "repo") == "a/b"
    with pytest.raises(ValueError, match="unknown grouping"):
        ShadowReport("colour")


def test_the_next_key_inside_a_string_does_not_end_the_context() -> None:
    tricky = ',"eligible_account_ids":["x"]}'
    ctx = RouteContext.from_dict({"principal_id": tricky, "repo": "a/b"})
    text = encode_payload(explain(ctx, PolicySnapshot.empty())).decode("utf-8")
    assert stored_context_text(text) == ctx.canonical().decode("utf-8")


def test_a_context_holding_the_next_key_is_a_prefix_that_does_not_parse() -> None:
    # No context holds such a key; a crafted payload may. The text found is then a proper
    # prefix of the value, never JSON on its own, and the reader parses the whole payload.
    context = {"accounts": [], "nested": {"a": 1, "eligible_account_ids": []}, "role": None}
    payload = {"decision_id": "d", "explanation": {"context": context, "eligible_account_ids": []}}
    text = canonical_bytes(payload).decode("utf-8")
    found = stored_context_text(text)
    assert found is not None
    assert canonical_bytes(context).decode("utf-8").startswith(found)
    assert found != canonical_bytes(context).decode("utf-8")
    assert stored_context(text) is None


def test_a_duplicate_key_in_a_stored_context_is_not_read() -> None:
    text = (
        '{"decision_id":"d","explanation":{"conflicting_policy_ids":[],"considered":[],'
        '"context":{"role":"a","role":"b"},"eligible_account_ids":[]}}'
    )
    assert stored_context_text(text) == '{"role":"a","role":"b"}'
    assert stored_context(text) is None
