"""The four rulings of issue 8 (SEMANTICS.md, explain step 5), each against a resolver without it.

1. The Anthropic lane for bare Claude aliases and for models a mapping sends to Claude.
2. Accounts are judged (eligible and rejected listed) also when the model step failed.
3. Account ids are not unique in a context: each entry is judged on its own.
4. Pool membership and pool order compare ids stripped and lowercased.
"""

from __future__ import annotations

from typing import Any

import pytest

from rensei_routing import (
    DEFAULT_VOCABULARY,
    PolicySnapshot,
    RouteContext,
    RouteDecision,
    RoutingPolicy,
    explain,
)
from rensei_routing.core.routing.vocabulary import ANTHROPIC_PROVENANCE, Provenance
from rensei_routing.errors import ConfigurationError

ZAI = {"account_id": "zai-1", "provider_binding": "zai-harness"}
ANTH = {"account_id": "anth-1", "provider_binding": "anthropic"}


def run(ctx_doc: dict[str, Any], *policy_docs: dict[str, Any]) -> RouteDecision:
    snapshot = PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in policy_docs], revision=3)
    return explain(RouteContext.from_dict(ctx_doc), snapshot)


def summary(d: RouteDecision) -> tuple[Any, ...]:
    return (d.outcome, d.reason, d.account_id, d.provider_binding, d.effective_model)


def rejected(d: RouteDecision) -> list[tuple[str, str]]:
    return [(r.account_id, r.reason) for r in d.explanation.rejected_accounts]


# ------------------------------------------------------------------------------------------
# 1. The Anthropic lane
# ------------------------------------------------------------------------------------------

ZAI_LOCK = {"id": "p", "action": {"provider_lock": "zai-harness"}}


@pytest.mark.parametrize("alias", ["haiku", "opus", "sonnet", " Haiku ", "SONNET"])
def test_a_bare_claude_alias_is_never_served_by_the_harness_lane(alias: str) -> None:
    d = run({"model_requirement": alias, "accounts": [ZAI]}, ZAI_LOCK)
    assert summary(d) == ("held", "literal-family-unsatisfiable", None, None, None)
    assert rejected(d) == [("zai-1", "literal-family-incompatible")]


@pytest.mark.parametrize("alias", ["haiku", "opus", "sonnet"])
def test_a_bare_claude_alias_picks_the_anthropic_account(alias: str) -> None:
    d = run({"model_requirement": alias, "accounts": [ZAI, ANTH]}, {"id": "p"})
    assert summary(d) == ("selected", "matched-policy", "anth-1", "anthropic", alias)
    assert rejected(d) == [("zai-1", "literal-family-incompatible")]


def test_a_longer_name_is_not_an_alias() -> None:
    d = run({"model_requirement": "haiku-like-model", "accounts": [ZAI]}, ZAI_LOCK)
    assert summary(d) == ("selected", "matched-policy", "zai-1", "zai-harness", "haiku-like-model")


MAPPED_CASES = [
    pytest.param("high-reasoning", "claude-opus-4-8", True, id="capability-to-claude"),
    pytest.param("balanced", "us.anthropic.claude-sonnet-4-5", True, id="capability-to-prefixed"),
    pytest.param("gpt-5", "claude-opus-4-8", True, id="foreign-concrete-to-claude"),
    pytest.param("high-reasoning", "opus", True, id="capability-to-bare-alias"),
    pytest.param("haiku", "claude-haiku-4-5", True, id="alias-to-claude"),
    pytest.param("haiku", "glm-5.3", False, id="alias-mapped-off-claude-opens-the-lane"),
    pytest.param("claude-sonnet-4-5", "glm-4.6", False, id="claude-id-mapped-off-claude"),
    pytest.param("high-reasoning", "glm-5.3", False, id="capability-to-glm"),
    pytest.param("high-reasoning", "claude-glm-mix", False, id="foreign-marker-is-not-claude"),
]


@pytest.mark.parametrize(("requirement", "mapped", "needs_lane"), MAPPED_CASES)
def test_an_explicit_mapping_decides_by_the_mapped_models_provenance(
    requirement: str, mapped: str, needs_lane: bool
) -> None:
    policy = {
        "id": "p",
        "action": {"provider_lock": "zai-harness", "requirement_map": {requirement: mapped}},
    }
    d = run({"model_requirement": requirement, "accounts": [ZAI]}, policy)
    if needs_lane:
        assert summary(d) == ("held", "literal-family-unsatisfiable", None, None, None)
        assert rejected(d) == [("zai-1", "literal-family-incompatible")]
    else:
        assert summary(d) == ("selected", "matched-policy", "zai-1", "zai-harness", mapped)


def test_a_mapped_claude_model_without_a_lock_takes_the_anthropic_account() -> None:
    policy = {"id": "p", "action": {"requirement_map": {"high-reasoning": "claude-opus-4-8"}}}
    # "zai-1" sorts after "anth-1"; name the z.ai account so that it would win by id order.
    zai_first = {"account_id": "a-zai", "provider_binding": "zai-harness"}
    d = run({"model_requirement": "high-reasoning", "accounts": [zai_first, ANTH]}, policy)
    assert summary(d) == ("selected", "matched-policy", "anth-1", "anthropic", "claude-opus-4-8")
    assert rejected(d) == [("a-zai", "literal-family-incompatible")]


def test_aliases_are_vocabulary_data() -> None:
    assert DEFAULT_VOCABULARY.lane_provenance(" HAIKU ") is ANTHROPIC_PROVENANCE
    assert DEFAULT_VOCABULARY.lane_provenance("glm-5.3") is None
    other = Provenance(name="x", pattern=r"^x-", provider_bindings=frozenset({"zai-harness"}))
    vocab = DEFAULT_VOCABULARY.extended(model_aliases={" Xmini ": other})
    assert vocab.lane_provenance("xmini") is other
    assert DEFAULT_VOCABULARY.lane_provenance("xmini") is None  # the default is untouched
    with pytest.raises(ConfigurationError):
        DEFAULT_VOCABULARY.extended(model_aliases={"Opus": other})


# ------------------------------------------------------------------------------------------
# 2. Accounts judged after a model failure
# ------------------------------------------------------------------------------------------

DRAINING = {
    "account_id": "anth-2",
    "provider_binding": "anthropic",
    "administrative_state": "draining",
}

MODEL_FAILURES = [
    pytest.param(
        "high-reasoning",
        {"provider_lock": "anthropic"},
        ("held", "capability-unmapped"),
        ["anth-1"],
        [("anth-2", "administrative-draining"), ("zai-1", "provider-lock-mismatch")],
        id="capability-unmapped",
    ),
    pytest.param(
        "gpt-5",
        {"allowed_patterns": ["glm-*"]},
        ("rejected", "model-not-allowed"),
        ["anth-1", "zai-1"],
        [("anth-2", "administrative-draining")],
        id="model-not-allowed/concrete",
    ),
    pytest.param(
        "high-reasoning",
        {"requirement_map": {"high-reasoning": "claude-opus-4-8"}, "allowed_patterns": ["glm-*"]},
        ("rejected", "model-not-allowed"),
        ["anth-1"],
        [("anth-2", "administrative-draining"), ("zai-1", "literal-family-incompatible")],
        id="model-not-allowed/mapped-claude-keeps-the-lane",
    ),
    pytest.param(
        "claude-opus",
        {"requirement_map": {"claude-opus": "glm-5.3"}},
        ("rejected", "literal-family-unsatisfiable"),
        ["anth-1"],
        [("anth-2", "administrative-draining"), ("zai-1", "literal-family-incompatible")],
        id="dishonest-mapping-literal-family-keeps-its-lane",
    ),
    pytest.param(
        "claude-opus",
        {"requirement_map": {"claude-opus": "glm-5.3"}, "provider_lock": "zai-harness"},
        ("rejected", "literal-family-unsatisfiable"),
        [],
        [
            ("anth-1", "provider-lock-mismatch"),
            ("anth-2", "administrative-draining"),
            ("zai-1", "literal-family-incompatible"),
        ],
        id="dishonest-mapping-no-account-could-serve",
    ),
]


@pytest.mark.parametrize(
    ("requirement", "action", "expected", "eligible", "rejections"), MODEL_FAILURES
)
def test_accounts_are_judged_when_the_model_step_failed(
    requirement: str,
    action: dict[str, Any],
    expected: tuple[str, str],
    eligible: list[str],
    rejections: list[tuple[str, str]],
) -> None:
    ctx = {"model_requirement": requirement, "accounts": [ZAI, DRAINING, ANTH]}
    d = run(ctx, {"id": "p", "action": action})
    # The outcome and reason stay the model step's; nothing is routed.
    assert summary(d) == (*expected, None, None, None)
    assert d.policy_id == "p"
    assert list(d.explanation.eligible_account_ids) == eligible
    assert rejected(d) == rejections


def test_a_model_failure_outranks_having_no_account() -> None:
    d = run({"model_requirement": "balanced", "accounts": []}, {"id": "p"})
    assert summary(d) == ("held", "capability-unmapped", None, None, None)
    d = run(
        {"model_requirement": "gpt-5", "accounts": [ZAI]},
        {"id": "p", "action": {"allowed_patterns": ["glm-*"], "provider_lock": "anthropic"}},
    )
    assert summary(d) == ("rejected", "model-not-allowed", None, None, None)
    assert rejected(d) == [("zai-1", "provider-lock-mismatch")]


# ------------------------------------------------------------------------------------------
# 3. Account ids are not unique in a context
# ------------------------------------------------------------------------------------------

TWIN_ZAI = {"account_id": "shared", "provider_binding": "zai-harness"}
TWIN_ANTH = {"account_id": "shared", "provider_binding": "anthropic"}


def test_a_context_may_list_one_account_id_twice() -> None:
    ctx = RouteContext.from_dict({"accounts": [TWIN_ZAI, TWIN_ANTH]})
    assert [a.provider_binding for a in ctx.accounts] == ["zai-harness", "anthropic"]
    assert RouteContext.from_dict(ctx.to_dict()) == ctx


@pytest.mark.parametrize(
    ("accounts", "requirement"),
    [
        pytest.param([TWIN_ZAI, TWIN_ANTH], "claude-opus", id="zai-entry-first"),
        pytest.param([TWIN_ANTH, TWIN_ZAI], "claude-opus", id="anthropic-entry-first"),
        pytest.param([TWIN_ZAI, TWIN_ANTH], "haiku", id="alias"),
    ],
)
def test_each_entry_is_judged_and_the_chosen_entrys_binding_reported(
    accounts: list[dict[str, Any]], requirement: str
) -> None:
    d = run({"model_requirement": requirement, "accounts": accounts}, {"id": "p"})
    assert (d.outcome, d.account_id, d.provider_binding) == ("selected", "shared", "anthropic")
    assert list(d.explanation.eligible_account_ids) == ["shared"]
    assert rejected(d) == [("shared", "literal-family-incompatible")]


def test_twins_under_a_lock_report_the_entry_on_the_locked_binding() -> None:
    d = run(
        {"accounts": [TWIN_ANTH, TWIN_ZAI]},
        {"id": "p", "action": {"provider_lock": "zai-harness", "account_pool": ["shared"]}},
    )
    assert (d.outcome, d.account_id, d.provider_binding) == ("selected", "shared", "zai-harness")
    assert rejected(d) == [("shared", "provider-lock-mismatch")]


def test_eligible_twins_keep_their_context_order() -> None:
    d = run({"accounts": [TWIN_ZAI, TWIN_ANTH]}, {"id": "p"})
    assert (d.account_id, d.provider_binding) == ("shared", "zai-harness")
    assert list(d.explanation.eligible_account_ids) == ["shared", "shared"]
    d = run({"accounts": [TWIN_ANTH, TWIN_ZAI]}, {"id": "p"})
    assert (d.account_id, d.provider_binding) == ("shared", "anthropic")


# ------------------------------------------------------------------------------------------
# 4. Pool membership and order ignore case and surrounding space
# ------------------------------------------------------------------------------------------


def test_pool_membership_ignores_case_and_surrounding_space() -> None:
    accounts = [
        {"account_id": "acct-a", "provider_binding": "anthropic"},
        {"account_id": "acct-b", "provider_binding": "anthropic"},
    ]
    d = run({"accounts": accounts}, {"id": "p", "action": {"account_pool": [" ACCT-A "]}})
    assert (d.outcome, d.account_id) == ("selected", "acct-a")
    assert rejected(d) == [("acct-b", "not-in-pool")]


def test_pool_order_uses_the_same_comparison() -> None:
    accounts = [
        {"account_id": "acct-a", "provider_binding": "anthropic"},
        {"account_id": "Acct-B", "provider_binding": "anthropic"},
        {"account_id": "acct-c", "provider_binding": "anthropic"},
    ]
    pool = ["acct-c", " ACCT-B", "Acct-A "]
    d = run({"accounts": accounts}, {"id": "p", "action": {"account_pool": pool}})
    assert list(d.explanation.eligible_account_ids) == ["acct-c", "Acct-B", "acct-a"]
    # The id is reported as the context wrote it, not as the pool did.
    assert d.account_id == "acct-c"


def test_pool_entries_equal_under_the_comparison_count_once_at_the_first_position() -> None:
    accounts = [
        {"account_id": "b", "provider_binding": "anthropic"},
        {"account_id": "a", "provider_binding": "anthropic"},
    ]
    d = run({"accounts": accounts}, {"id": "p", "action": {"account_pool": ["A", "b", "a"]}})
    assert list(d.explanation.eligible_account_ids) == ["a", "b"]
