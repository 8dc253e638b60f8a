"""Spec-driven tests of the pure resolver, written from SEMANTICS.md and ADR-0139 §D1-§D4, §D8.

Every policy and context is written as the JSON a user would write and read through
``RoutingPolicy.from_dict`` / ``RouteContext.from_dict`` / ``PolicySnapshot.of``. Each test pins
the exact code string or integer of the spec *and* another field a wrong implementation would
get wrong (outcome, policy id, chosen account, rung, ...).

Where the implementation disagrees with the spec the test asserts the spec and is marked
``xfail(strict=True, reason="SPEC MISMATCH: ...")``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pytest
import rfc8785

from rensei_routing import (
    DEFAULT_VOCABULARY,
    PolicySnapshot,
    RenseiRoutingError,
    RepoIdentity,
    RouteContext,
    RouteDecision,
    RoutingPolicy,
    canonical_worker_role,
    canonicalize_repo,
    decision_id,
    explain,
    hash_policies,
    precedence_level,
    validate_policies,
)
from rensei_routing.core.canonical import digest
from rensei_routing.errors import MalformedError

# --------------------------------------------------------------------------------------------
# Builders: JSON-shaped documents in, values out.
# --------------------------------------------------------------------------------------------

ANTH = {"account_id": "anth-1", "provider_binding": "anthropic"}
ANTH2 = {"account_id": "anth-2", "provider_binding": "anthropic"}
ZAI = {"account_id": "zai-1", "provider_binding": "zai-harness"}

LEGACY_ANTH = {
    "provider_binding": "anthropic",
    "account_id": "legacy-anth",
    "model": "claude-sonnet-4-5",
    "mechanism": "default",
}
LEGACY_GLM = {
    "provider_binding": "zai",
    "account_id": "legacy-zai",
    "model": "glm-4.6",
    "mechanism": "credit-failover",
    "mechanism_detail": "provider=zai",
}


def P(pid: str, match: dict | None = None, action: dict | None = None, **extra: Any) -> dict:
    """A policy document."""
    doc: dict[str, Any] = {"id": pid}
    if match is not None:
        doc["match"] = match
    if action is not None:
        doc["action"] = action
    doc.update(extra)
    return doc


def policies(docs: list[dict]) -> list[RoutingPolicy]:
    return [RoutingPolicy.from_dict(d) for d in docs]


def snapshot(docs: list[dict], revision: int = 7) -> PolicySnapshot:
    return PolicySnapshot.of(policies(docs), revision=revision)


def context(doc: dict) -> RouteContext:
    return RouteContext.from_dict(doc)


def run(ctx_doc: dict | RouteContext, docs: list[dict], *, state: str = "ok", revision: int = 7):
    ctx = ctx_doc if isinstance(ctx_doc, RouteContext) else context(ctx_doc)
    return explain(ctx, snapshot(docs, revision), snapshot_state=state, trace="full")


def reasons(decision: RouteDecision) -> dict[str, str]:
    return {c.policy_id: c.reason for c in decision.explanation.considered}


def rejected(decision: RouteDecision) -> list[tuple[str, str]]:
    return [(r.account_id, r.reason) for r in decision.explanation.rejected_accounts]


def flat(decision: RouteDecision) -> dict[str, Any]:
    """The decision's top-level fields plus the explanation's lists, for table comparison."""
    out = decision.to_dict()
    exp = out.pop("explanation")
    out["eligible_account_ids"] = exp["eligible_account_ids"]
    out["rejected_accounts"] = [(r["account_id"], r["reason"]) for r in exp["rejected_accounts"]]
    out["conflicting_policy_ids"] = exp["conflicting_policy_ids"]
    return out


def assert_fields(decision: RouteDecision, expected: dict[str, Any]) -> None:
    got = flat(decision)
    mismatched = {k: (got[k], v) for k, v in expected.items() if got[k] != v}
    assert not mismatched, f"(got, expected) per field: {mismatched}"


# Fields that are null on every non-selected outcome.
NOT_SELECTED = {"account_id": None, "provider_binding": None, "effective_model": None}


# ============================================================================================
# 1. Every decision reason
# ============================================================================================

DECISION_CASES = [
    pytest.param(
        {"repo": "acme/widgets", "accounts": [ANTH], "legacy_route": LEGACY_ANTH},
        [P("global", action={"provider_lock": "anthropic"})],
        "corrupt",
        {
            "outcome": "held",
            "reason": "snapshot-unavailable",
            "policy_source": "none",
            "policy_id": None,
            "precedence_level": None,
            "snapshot_state": "corrupt",
            "policy_revision": 7,
            **NOT_SELECTED,
        },
        id="snapshot-unavailable/corrupt-state-holds-even-with-a-matching-policy-and-legacy",
    ),
    pytest.param(
        {"repo": "other/repo", "accounts": [ANTH]},
        [P("acme-only", {"repo_ids": ["acme/widgets"]})],
        "ok",
        {
            "outcome": "held",
            "reason": "no-legacy-route",
            "policy_source": "none",
            "policy_id": None,
            "precedence_level": None,
            "precedence_priority": None,
            **NOT_SELECTED,
        },
        id="no-legacy-route/no-policy-matches-and-no-legacy",
    ),
    pytest.param(
        {"repo": "acme/widgets", "accounts": [ANTH], "legacy_route": LEGACY_ANTH},
        [],
        "ok",
        {
            "outcome": "selected",
            "reason": "no-policy-applies",
            "policy_source": "legacy-compatibility",
            "policy_id": None,
            "precedence_level": 9,
            "precedence_priority": None,
            "account_id": "legacy-anth",
            "provider_binding": "anthropic",
            "effective_model": "claude-sonnet-4-5",
            "eligible_account_ids": [],
            "rejected_accounts": [],
        },
        id="no-policy-applies/empty-snapshot-reports-legacy-route",
    ),
    pytest.param(
        {"repo": "acme/widgets", "legacy_route": LEGACY_ANTH},
        [],
        "absent",
        {
            "outcome": "selected",
            "reason": "no-policy-applies",
            "policy_source": "legacy-compatibility",
            "snapshot_state": "absent",
            "precedence_level": 9,
            "account_id": "legacy-anth",
        },
        id="no-policy-applies/absent-store-resolves-normally",
    ),
    pytest.param(
        {
            "repo": "acme/widgets",
            "principal_id": "implementer",
            "model_requirement": {"kind": "literal_family", "value": "claude-opus"},
            "accounts": [ANTH, ZAI],
            "legacy_route": LEGACY_GLM,
        },
        [
            P("sonnet-only", {"model_requirements": ["claude-sonnet"]}),
            P("off", action={"provider_lock": "anthropic"}, enabled=False),
        ],
        "ok",
        {
            "outcome": "selected",
            "reason": "no-policy-applies",
            "policy_source": "legacy-compatibility",
            "policy_id": None,
            "precedence_level": 9,
            "account_id": "legacy-zai",
            "provider_binding": "zai",
            "effective_model": "glm-4.6",
        },
        id="no-policy-applies/legacy-claude-opus-on-glm-is-reported-not-suppressed",
    ),
    pytest.param(
        {"repo": "acme/widgets", "accounts": [ANTH, ZAI], "legacy_route": LEGACY_ANTH},
        [
            P("b-pol", action={"provider_lock": "anthropic"}, priority=5),
            P("a-pol", action={"provider_lock": "zai-harness"}, priority=5),
            P("c-pol", action={"provider_lock": "anthropic"}, priority=5),
            P("z-low", action={"provider_lock": "anthropic"}, priority=1),
        ],
        "ok",
        {
            "outcome": "rejected",
            "reason": "policy-conflict",
            "policy_source": "managed-policy",
            "policy_id": None,
            "conflicting_policy_ids": ["a-pol", "b-pol", "c-pol"],
            **NOT_SELECTED,
        },
        id="policy-conflict/every-tied-id-sorted-even-the-identical-ones",
    ),
    pytest.param(
        {"model_requirement": "claude-opus", "accounts": [ANTH, ZAI]},
        [
            P(
                "dishonest",
                action={"requirement_map": {"claude-opus": "glm-5.3"}, "allowed_patterns": ["x-*"]},
            )
        ],
        "ok",
        {
            "outcome": "rejected",
            "reason": "literal-family-unsatisfiable",
            "policy_source": "managed-policy",
            "policy_id": "dishonest",
            **NOT_SELECTED,
        },
        id="literal-family-unsatisfiable/dishonest-mapping-rejected-before-allowed-patterns",
    ),
    pytest.param(
        {"model_requirement": "claude-opus", "accounts": [ANTH, ZAI]},
        [P("wrong-family", action={"requirement_map": {"claude-opus": "claude-sonnet-4-5"}})],
        "ok",
        {
            "outcome": "rejected",
            "reason": "literal-family-unsatisfiable",
            "policy_id": "wrong-family",
            **NOT_SELECTED,
        },
        id="literal-family-unsatisfiable/mapping-lacks-family-token",
    ),
    pytest.param(
        {"model_requirement": "claude-opus", "accounts": [ANTH, ZAI]},
        [P("zai-lock", action={"provider_lock": "zai-harness"})],
        "ok",
        {
            "outcome": "held",
            "reason": "literal-family-unsatisfiable",
            "policy_source": "managed-policy",
            "policy_id": "zai-lock",
            "eligible_account_ids": [],
            "rejected_accounts": [
                ("anth-1", "provider-lock-mismatch"),
                ("zai-1", "literal-family-incompatible"),
            ],
            **NOT_SELECTED,
        },
        id="literal-family-unsatisfiable/lane-rule-excluded-every-account-held",
    ),
    pytest.param(
        {"model_requirement": "claude-opus", "accounts": [ANTH, ZAI]},
        [P("zai-lock", action={"provider_lock": "zai-harness", "on_unavailable": "reject"})],
        "ok",
        {
            "outcome": "rejected",
            "reason": "literal-family-unsatisfiable",
            "policy_id": "zai-lock",
            **NOT_SELECTED,
        },
        id="literal-family-unsatisfiable/lane-rule-on-unavailable-reject",
    ),
    pytest.param(
        {"model_requirement": "claude-opus", "accounts": [ANTH, ZAI]},
        [
            P(
                "zai-honest-map",
                action={
                    "provider_lock": "zai-harness",
                    "requirement_map": {"claude-opus": "claude-opus-4-1"},
                },
            )
        ],
        "ok",
        {
            "outcome": "held",
            "reason": "literal-family-unsatisfiable",
            "policy_id": "zai-honest-map",
            "rejected_accounts": [
                ("anth-1", "provider-lock-mismatch"),
                ("zai-1", "literal-family-incompatible"),
            ],
        },
        id="literal-family-unsatisfiable/lane-rule-holds-mapping-or-no-mapping",
    ),
    pytest.param(
        {
            "model_requirement": "claude-sonnet",
            "accounts": [{**ANTH, "configured": False}, ZAI],
        },
        [P("global")],
        "ok",
        {
            "outcome": "held",
            "reason": "literal-family-unsatisfiable",
            "rejected_accounts": [
                ("anth-1", "not-configured"),
                ("zai-1", "literal-family-incompatible"),
            ],
        },
        id="literal-family-unsatisfiable/lane-excluded-any-one-account-names-it",
    ),
    pytest.param(
        {"model_requirement": "claude-sonnet-4-5", "accounts": [ANTH, ZAI]},
        [P("zai-lock", action={"provider_lock": "zai-harness"})],
        "ok",
        {
            "outcome": "held",
            "reason": "literal-family-unsatisfiable",
            "policy_id": "zai-lock",
            "rejected_accounts": [
                ("anth-1", "provider-lock-mismatch"),
                ("zai-1", "literal-family-incompatible"),
            ],
        },
        id="literal-family-unsatisfiable/anthropic-provenance-concrete-id-on-zai-lock",
    ),
    pytest.param(
        {"model_requirement": "high-reasoning", "accounts": [ANTH]},
        [
            P(
                "glm-map",
                action={
                    "requirement_map": {"high-reasoning": "glm-5.3"},
                    "allowed_patterns": ["claude-*"],
                },
            )
        ],
        "ok",
        {
            "outcome": "rejected",
            "reason": "model-not-allowed",
            "policy_source": "managed-policy",
            "policy_id": "glm-map",
            **NOT_SELECTED,
        },
        id="model-not-allowed/mapped-capability-outside-patterns-rejected-even-on-hold",
    ),
    pytest.param(
        {"model_requirement": "gpt-5", "accounts": [ANTH]},
        [P("claude-only", action={"allowed_patterns": ["claude-*"]})],
        "ok",
        {
            "outcome": "rejected",
            "reason": "model-not-allowed",
            "policy_id": "claude-only",
            **NOT_SELECTED,
        },
        id="model-not-allowed/unmapped-concrete-outside-patterns",
    ),
    pytest.param(
        {"model_requirement": "claude-sonnet-4-5", "accounts": [ANTH]},
        [
            P(
                "opus-only",
                action={
                    "requirement_map": {"claude-sonnet-4-5": "claude-sonnet-4-6"},
                    "allowed_patterns": ["claude-opus-*"],
                },
            )
        ],
        "ok",
        {"outcome": "rejected", "reason": "model-not-allowed", "policy_id": "opus-only"},
        id="model-not-allowed/mapped-concrete-outside-patterns",
    ),
    pytest.param(
        {"model_requirement": "balanced", "accounts": [ANTH], "legacy_route": LEGACY_ANTH},
        [
            P(
                "hr-only",
                action={
                    "requirement_map": {"high-reasoning": "claude-opus-4-1"},
                    "on_unavailable": "reject",
                },
            )
        ],
        "ok",
        {
            "outcome": "held",
            "reason": "capability-unmapped",
            "policy_source": "managed-policy",
            "policy_id": "hr-only",
            **NOT_SELECTED,
        },
        id="capability-unmapped/held-never-guessed-even-with-reject",
    ),
    pytest.param(
        {"accounts": [ANTH]},
        [P("pool-2", action={"account_pool": ["anth-2"]})],
        "ok",
        {
            "outcome": "held",
            "reason": "no-eligible-account",
            "policy_source": "managed-policy",
            "policy_id": "pool-2",
            "rejected_accounts": [("anth-1", "not-in-pool")],
            "eligible_account_ids": [],
            **NOT_SELECTED,
        },
        id="no-eligible-account/held",
    ),
    pytest.param(
        {"accounts": [ANTH]},
        [P("pool-2", action={"account_pool": ["anth-2"], "on_unavailable": "reject"})],
        "ok",
        {
            "outcome": "rejected",
            "reason": "no-eligible-account",
            "policy_id": "pool-2",
            **NOT_SELECTED,
        },
        id="no-eligible-account/on-unavailable-reject",
    ),
    pytest.param(
        {"legacy_route": LEGACY_ANTH},
        [P("global")],
        "ok",
        {
            "outcome": "held",
            "reason": "no-eligible-account",
            "policy_id": "global",
            "rejected_accounts": [],
            **NOT_SELECTED,
        },
        id="no-eligible-account/no-accounts-at-all-does-not-fall-back-to-legacy",
    ),
    pytest.param(
        {
            "model_requirement": "claude-opus",
            "accounts": [{**ANTH, "administrative_state": "draining"}, ZAI],
        },
        [P("anth-lock", action={"provider_lock": "anthropic"})],
        "ok",
        {
            "outcome": "held",
            "reason": "no-eligible-account",
            "rejected_accounts": [
                ("anth-1", "administrative-draining"),
                ("zai-1", "provider-lock-mismatch"),
            ],
        },
        id="no-eligible-account/lane-rule-never-reached-so-not-literal-family-unsatisfiable",
    ),
    pytest.param(
        {"model_requirement": "high-reasoning", "accounts": [ZAI, ANTH]},
        [
            P(
                "hr",
                action={"requirement_map": {"high-reasoning": "claude-opus-4-1"}},
                priority=42,
            )
        ],
        "ok",
        {
            "outcome": "selected",
            "reason": "matched-policy",
            "policy_source": "managed-policy",
            "policy_id": "hr",
            "precedence_level": 8,
            "precedence_priority": 42,
            "account_id": "anth-1",
            "provider_binding": "anthropic",
            "effective_model": "claude-opus-4-1",
            # Mapped to a Claude model: the Anthropic lane is required (SEMANTICS step 5).
            "eligible_account_ids": ["anth-1"],
        },
        id="matched-policy/capability-through-mapping-to-claude-keeps-the-lane",
    ),
    pytest.param(
        {"model_requirement": "claude-opus", "accounts": [ZAI, ANTH]},
        [P("opus", {"model_requirements": [{"kind": "literal_family", "value": "claude-opus"}]})],
        "ok",
        {
            "outcome": "selected",
            "reason": "matched-policy",
            "policy_id": "opus",
            "precedence_level": 7,
            "account_id": "anth-1",
            "provider_binding": "anthropic",
            "effective_model": None,
            "rejected_accounts": [("zai-1", "literal-family-incompatible")],
        },
        id="matched-policy/literal-family-unmapped-runs-account-default",
    ),
    pytest.param(
        {"model_requirement": "Claude-Sonnet-4-5", "accounts": [ANTH]},
        [P("sonnet-ok", action={"allowed_patterns": ["CLAUDE-SONNET-*"]})],
        "ok",
        {
            "outcome": "selected",
            "reason": "matched-policy",
            "effective_model": "Claude-Sonnet-4-5",
            "account_id": "anth-1",
        },
        id="matched-policy/concrete-is-itself-allowed-patterns-case-insensitive",
    ),
]


@pytest.mark.parametrize(("ctx_doc", "docs", "state", "expected"), DECISION_CASES)
def test_decision_reason(ctx_doc, docs, state, expected) -> None:
    decision = run(ctx_doc, docs, state=state)
    assert_fields(decision, expected)


def test_conflict_explanation_marks_tied_matched_and_lower_outranked() -> None:
    decision = run(
        {"accounts": [ANTH]},
        [
            P("b-pol", action={"provider_lock": "anthropic"}, priority=5),
            P("a-pol", action={"provider_lock": "zai-harness"}, priority=5),
            P("z-low", action={"provider_lock": "anthropic"}, priority=1),
        ],
    )
    assert decision.reason == "policy-conflict"
    assert reasons(decision) == {"a-pol": "matched", "b-pol": "matched", "z-low": "outranked"}
    assert decision.precedence_level == 8


def test_no_policy_applies_explanation_lists_why_each_policy_missed() -> None:
    decision = run(
        {
            "repo": "acme/widgets",
            "model_requirement": "claude-opus",
            "legacy_route": LEGACY_GLM,
        },
        [
            P("sonnet-only", {"model_requirements": ["claude-sonnet"]}),
            P("other-repo", {"repo_ids": ["acme/gadgets"]}),
        ],
    )
    assert decision.policy_source == "legacy-compatibility"
    assert decision.effective_model == "glm-4.6"
    assert reasons(decision) == {
        "sonnet-only": "requirement-not-in-set",
        "other-repo": "repo-not-in-set",
    }
    assert all(c.matched is False for c in decision.explanation.considered)


# ============================================================================================
# 2. Every match reason in the explanation's `considered`, and the evaluation order
# ============================================================================================

LOSSY = RepoIdentity.from_runtime_slug("acme-widgets")
FULL_MATCH = {
    "repo_ids": ["acme/widgets"],
    "repo_classes": ["hydraflow"],
    "roles": ["reviewer"],
    "principal_ids": ["Reviewer"],
    "model_requirements": [{"kind": "capability", "value": "balanced"}],
    "request_faces": ["agentic"],
}
FULL_CTX = {
    "repo": "Acme/Widgets",
    "repo_class": "hydraflow",
    "principal_id": "REVIEWER",
    "model_requirement": "balanced",
    "request_face": "agentic",
    "legacy_route": LEGACY_ANTH,
}


def _with_lossy_repo(doc: dict) -> RouteContext:
    return dataclasses.replace(context(doc), repo=LOSSY)


MATCH_CASES = [
    pytest.param(P("p", enabled=False), FULL_CTX, "policy-disabled", id="policy-disabled"),
    pytest.param(
        P("p", {"repo_ids": ["acme/widgets"]}),
        _with_lossy_repo(FULL_CTX),
        "repo-identity-not-canonical",
        id="repo-identity-not-canonical/from-runtime-slug",
    ),
    pytest.param(
        P("p", {"repo_ids": ["acme/widgets"]}),
        {**FULL_CTX, "repo": "acme-widgets"},
        "repo-identity-not-canonical",
        id="repo-identity-not-canonical/bare-slug-string",
    ),
    pytest.param(
        P("p", {"repo_ids": ["acme/widgets"]}),
        {**FULL_CTX, "repo": {"value": "acme/widgets", "version": "legacy-lossy"}},
        "repo-identity-not-canonical",
        id="repo-identity-not-canonical/lossy-even-when-value-equals-the-policy-id",
    ),
    pytest.param(
        P("p", {"repo_ids": ["acme/widgets"]}),
        {k: v for k, v in FULL_CTX.items() if k != "repo"},
        "repo-identity-not-canonical",
        id="repo-identity-not-canonical/repo-missing",
    ),
    pytest.param(
        P("p", {"repo_ids": ["acme/gadgets", "acme/tools"]}),
        FULL_CTX,
        "repo-not-in-set",
        id="repo-not-in-set",
    ),
    pytest.param(
        P("p", {"repo_classes": ["client", "personal"]}),
        FULL_CTX,
        "repo-class-not-in-set",
        id="repo-class-not-in-set",
    ),
    pytest.param(
        P("p", {"repo_classes": ["hydraflow"]}),
        {k: v for k, v in FULL_CTX.items() if k != "repo_class"},
        "repo-class-not-in-set",
        id="repo-class-not-in-set/context-has-no-class",
    ),
    pytest.param(
        P("p", {"roles": ["reviewer"]}),
        {**FULL_CTX, "principal_id": "adr_reviewer"},
        "role-not-canonical",
        id="role-not-canonical/loop-name-adr_reviewer",
    ),
    pytest.param(
        P("p", {"roles": ["reviewer"]}),
        {k: v for k, v in FULL_CTX.items() if k != "principal_id"},
        "role-not-canonical",
        id="role-not-canonical/no-principal",
    ),
    pytest.param(
        P("p", {"roles": ["reviewer", "architect"]}),
        {**FULL_CTX, "principal_id": "planner"},
        "role-not-in-set",
        id="role-not-in-set",
    ),
    pytest.param(
        P("p", {"principal_ids": ["adr_reviewer"]}),
        {**FULL_CTX, "principal_id": "term_proposer"},
        "principal-not-in-set",
        id="principal-not-in-set",
    ),
    pytest.param(
        P("p", {"principal_ids": ["adr_reviewer"]}),
        {k: v for k, v in FULL_CTX.items() if k != "principal_id"},
        "principal-not-in-set",
        id="principal-not-in-set/no-principal",
    ),
    pytest.param(
        P("p", {"principal_ids": ["ADR_Reviewer"]}),
        {**FULL_CTX, "principal_id": "adr_REVIEWER"},
        "matched",
        id="matched/principal-case-insensitive",
    ),
    pytest.param(
        P("p", {"model_requirements": ["claude-opus", "high-reasoning"]}),
        FULL_CTX,
        "requirement-not-in-set",
        id="requirement-not-in-set",
    ),
    pytest.param(
        P("p", {"model_requirements": ["claude-opus"]}),
        {**FULL_CTX, "model_requirement": {"kind": "concrete_model", "value": "claude-opus"}},
        "requirement-not-in-set",
        id="requirement-not-in-set/same-value-other-kind",
    ),
    pytest.param(
        P("p", {"model_requirements": ["balanced"]}),
        {k: v for k, v in FULL_CTX.items() if k != "model_requirement"},
        "requirement-not-in-set",
        id="requirement-not-in-set/context-has-none",
    ),
    pytest.param(
        P("p", {"request_faces": ["one-shot"]}),
        FULL_CTX,
        "request-face-not-in-set",
        id="request-face-not-in-set",
    ),
    pytest.param(
        P("p", {"request_faces": ["agentic"]}),
        {k: v for k, v in FULL_CTX.items() if k != "request_face"},
        "request-face-not-in-set",
        id="request-face-not-in-set/default-face-is-unknown",
    ),
    pytest.param(P("p", FULL_MATCH), FULL_CTX, "matched", id="matched/all-six-dimensions"),
    pytest.param(
        P("p", {"repo_classes": ["hydraflow"]}),
        _with_lossy_repo(FULL_CTX),
        "matched",
        id="matched/lossy-repo-still-joins-non-repo-policies",
    ),
]


@pytest.mark.parametrize(("policy_doc", "ctx_doc", "expected"), MATCH_CASES)
def test_match_reason(policy_doc, ctx_doc, expected) -> None:
    decision = run(ctx_doc, [policy_doc])
    (considered,) = decision.explanation.considered
    assert considered.policy_id == "p"
    assert considered.reason == expected
    assert considered.matched is (expected == "matched")
    if expected == "matched":
        assert decision.policy_source == "managed-policy"
        assert decision.policy_id == "p"
    else:
        # Refusing the join, not the route: the decision falls through to legacy.
        assert decision.reason == "no-policy-applies"
        assert decision.policy_source == "legacy-compatibility"
        assert decision.account_id == "legacy-anth"


def test_outranked_is_a_matched_policy_beaten_by_a_better_one() -> None:
    decision = run(
        {**FULL_CTX, "accounts": [ANTH]},
        [P("global", priority=10000), P("repo", {"repo_ids": ["acme/widgets"]})],
    )
    assert reasons(decision) == {"repo": "matched", "global": "outranked"}
    by_id = {c.policy_id: c for c in decision.explanation.considered}
    assert by_id["global"].matched is True
    assert by_id["global"].precedence_level == 8
    assert by_id["global"].priority == 10000
    assert decision.policy_id == "repo"


ORDER_CASES = [
    pytest.param(
        P("p", {"repo_ids": ["acme/gadgets"]}, enabled=False),
        FULL_CTX,
        "policy-disabled",
        id="disabled-before-repo",
    ),
    pytest.param(
        P("p", {"repo_ids": ["acme/widgets"], "repo_classes": ["client"]}),
        {**FULL_CTX, "repo": "acme-widgets"},
        "repo-identity-not-canonical",
        id="repo-identity-before-class",
    ),
    pytest.param(
        P("p", {"repo_ids": ["acme/gadgets"], "repo_classes": ["client"]}),
        FULL_CTX,
        "repo-not-in-set",
        id="repo-before-class",
    ),
    pytest.param(
        P("p", {"repo_classes": ["client"], "roles": ["planner"]}),
        FULL_CTX,
        "repo-class-not-in-set",
        id="class-before-role",
    ),
    pytest.param(
        P("p", {"roles": ["reviewer"], "principal_ids": ["someone"]}),
        {**FULL_CTX, "principal_id": "adr_reviewer"},
        "role-not-canonical",
        id="role-not-canonical-before-principal",
    ),
    pytest.param(
        P("p", {"roles": ["planner"], "principal_ids": ["someone"]}),
        FULL_CTX,
        "role-not-in-set",
        id="role-not-in-set-before-principal",
    ),
    pytest.param(
        P("p", {"principal_ids": ["someone"], "model_requirements": ["claude-opus"]}),
        FULL_CTX,
        "principal-not-in-set",
        id="principal-before-requirement",
    ),
    pytest.param(
        P("p", {"model_requirements": ["claude-opus"], "request_faces": ["one-shot"]}),
        FULL_CTX,
        "requirement-not-in-set",
        id="requirement-before-face",
    ),
    pytest.param(
        P(
            "p",
            {
                "repo_ids": ["acme/gadgets"],
                "repo_classes": ["client"],
                "roles": ["planner"],
                "principal_ids": ["x"],
                "model_requirements": ["claude-opus"],
                "request_faces": ["one-shot"],
            },
        ),
        FULL_CTX,
        "repo-not-in-set",
        id="fails-all-six-reports-the-first",
    ),
]


@pytest.mark.parametrize(("policy_doc", "ctx_doc", "expected"), ORDER_CASES)
def test_first_failing_dimension_wins(policy_doc, ctx_doc, expected) -> None:
    decision = run(ctx_doc, [policy_doc])
    assert reasons(decision) == {"p": expected}
    assert decision.policy_source == "legacy-compatibility"


# ============================================================================================
# 3. Accounts: every rejection reason, their order, eligible ordering
# ============================================================================================

ACCOUNT_CASES = [
    pytest.param(
        {"provider_lock": "anthropic", "account_pool": ["good"]},
        {
            "account_id": "bad",
            "provider_binding": "zai-harness",
            "configured": False,
            "administrative_state": "disabled",
        },
        "claude-opus",
        "not-configured",
        id="not-configured-first-of-all",
    ),
    pytest.param(
        {"provider_lock": "anthropic", "account_pool": ["good"]},
        {
            "account_id": "bad",
            "provider_binding": "zai-harness",
            "administrative_state": "disabled",
        },
        "claude-opus",
        "administrative-disabled",
        id="administrative-disabled-before-lock-pool-lane",
    ),
    pytest.param(
        {"provider_lock": "anthropic", "account_pool": ["good"]},
        {
            "account_id": "bad",
            "provider_binding": "zai-harness",
            "administrative_state": "draining",
        },
        "claude-opus",
        "administrative-draining",
        id="administrative-draining-before-lock-pool-lane",
    ),
    pytest.param(
        {"provider_lock": "anthropic", "account_pool": ["good"]},
        {"account_id": "bad", "provider_binding": "zai-harness"},
        "claude-opus",
        "provider-lock-mismatch",
        id="provider-lock-mismatch-before-pool-and-lane",
    ),
    pytest.param(
        {"account_pool": ["good"]},
        {"account_id": "bad", "provider_binding": "zai-harness"},
        "claude-opus",
        "not-in-pool",
        id="not-in-pool-before-lane",
    ),
    pytest.param(
        {"provider_lock": "anthropic", "account_pool": ["good"]},
        {"account_id": "bad", "provider_binding": "anthropic"},
        None,
        "not-in-pool",
        id="not-in-pool",
    ),
    pytest.param(
        {},
        {"account_id": "bad", "provider_binding": "zai-harness"},
        "claude-sonnet",
        "literal-family-incompatible",
        id="literal-family-incompatible/literal-family",
    ),
    pytest.param(
        {"requirement_map": {"claude-opus": "claude-opus-4-1"}},
        {"account_id": "bad", "provider_binding": "zai-harness"},
        "claude-opus",
        "literal-family-incompatible",
        id="literal-family-incompatible/literal-family-even-with-honest-mapping",
    ),
    pytest.param(
        {},
        {"account_id": "bad", "provider_binding": "zai-harness"},
        "claude-sonnet-4-5",
        "literal-family-incompatible",
        id="literal-family-incompatible/anthropic-provenance-concrete-id",
    ),
    pytest.param(
        {},
        {"account_id": "bad", "provider_binding": "zai-harness"},
        "us.anthropic.claude-sonnet-4-5-v1:0",
        "literal-family-incompatible",
        id="literal-family-incompatible/prefixed-anthropic-provenance-concrete-id",
    ),
]


@pytest.mark.parametrize(("action", "account", "requirement", "expected"), ACCOUNT_CASES)
def test_account_rejection_reason_and_order(action, account, requirement, expected) -> None:
    ctx_doc: dict[str, Any] = {
        "accounts": [account, {"account_id": "good", "provider_binding": "anthropic"}]
    }
    if requirement is not None:
        ctx_doc["model_requirement"] = requirement
    decision = run(ctx_doc, [P("p", action=action)])
    assert rejected(decision) == [("bad", expected)]
    assert decision.outcome == "selected"
    assert decision.account_id == "good"
    assert decision.explanation.eligible_account_ids == ("good",)


LANE_EXEMPTION_CASES = [
    pytest.param(
        "claude-sonnet-4-5",
        {"requirement_map": {"claude-sonnet-4-5": "glm-4.6"}},
        ("selected", "matched-policy", "zai-1", "glm-4.6"),
        id="mapping-moved-concrete-model-exempts-lane",
    ),
    pytest.param(
        "glm-4.6",
        {},
        ("selected", "matched-policy", "zai-1", "glm-4.6"),
        id="non-anthropic-concrete-has-no-lane",
    ),
    pytest.param(
        "claude-glm-hybrid",
        {},
        ("selected", "matched-policy", "zai-1", "claude-glm-hybrid"),
        id="foreign-marker-means-not-anthropic-provenance",
    ),
    pytest.param(
        "balanced",
        {"requirement_map": {"balanced": "glm-4.6"}},
        ("selected", "matched-policy", "zai-1", "glm-4.6"),
        id="capability-has-no-lane",
    ),
    pytest.param(
        "claude-sonnet-4-5",
        {},
        ("held", "literal-family-unsatisfiable", None, None),
        id="unmapped-anthropic-concrete-keeps-lane",
    ),
    pytest.param(
        "claude-sonnet-4-5",
        {"requirement_map": {"claude-sonnet-4-5": "claude-sonnet-4-5"}},
        ("held", "literal-family-unsatisfiable", None, None),
        id="identity-mapping-did-not-move-the-model",
    ),
]


@pytest.mark.parametrize(("requirement", "action", "expected"), LANE_EXEMPTION_CASES)
def test_lane_rule_for_concrete_ids(requirement, action, expected) -> None:
    decision = run({"model_requirement": requirement, "accounts": [ZAI]}, [P("p", action=action)])
    assert (
        decision.outcome,
        decision.reason,
        decision.account_id,
        decision.effective_model,
    ) == expected
    assert decision.policy_id == "p"


ORDERING_CASES = [
    pytest.param(
        ["acc-b", "acc-c", "acc-a"],
        ["acc-a", "acc-b", "acc-c", "acc-d"],
        ["acc-b", "acc-c", "acc-a"],
        [("acc-d", "not-in-pool")],
        id="pool-order",
    ),
    pytest.param(
        [],
        ["acc-c", "acc-a", "acc-b"],
        ["acc-a", "acc-b", "acc-c"],
        [],
        id="no-pool-account-id-order-not-context-order",
    ),
]


@pytest.mark.parametrize(("pool", "given", "eligible", "rejections"), ORDERING_CASES)
def test_eligible_ordering(pool, given, eligible, rejections) -> None:
    accounts = [{"account_id": a, "provider_binding": "anthropic"} for a in given]
    decision = run({"accounts": accounts}, [P("p", action={"account_pool": pool})])
    assert list(decision.explanation.eligible_account_ids) == eligible
    assert decision.account_id == eligible[0]
    assert rejected(decision) == rejections


# ============================================================================================
# 4. Rungs and ordering
# ============================================================================================

REPO = {"repo_ids": ["acme/widgets"]}
CLASS = {"repo_classes": ["hydraflow"]}
ROLE = {"roles": ["reviewer"]}
PRINCIPAL = {"principal_ids": ["adr_reviewer"]}
REQ = {"model_requirements": ["claude-opus"]}
FACE = {"request_faces": ["agentic"]}

RUNG_CASES = [
    pytest.param({}, True, 1, id="1-system-safety-empty-match"),
    pytest.param({**REPO, **ROLE, **REQ}, True, 1, id="1-system-safety-beats-shape"),
    pytest.param({**REPO, **ROLE, **REQ}, False, 2, id="2-repo-role-requirement"),
    pytest.param({**REPO, **PRINCIPAL, **REQ}, False, 2, id="2-repo-principal-requirement"),
    pytest.param({**REPO, **ROLE}, False, 3, id="3-repo-role"),
    pytest.param({**REPO, **PRINCIPAL}, False, 3, id="3-repo-principal-counts-as-role"),
    pytest.param({**REPO, **ROLE, **FACE}, False, 3, id="3-repo-role-face"),
    pytest.param(REPO, False, 4, id="4-repo"),
    pytest.param({**REPO, **REQ}, False, 4, id="4-repo-requirement-without-role"),
    pytest.param({**REPO, **FACE}, False, 4, id="4-repo-face-never-counts"),
    pytest.param({**REPO, **CLASS}, False, 4, id="4-repo-class"),
    pytest.param({**CLASS, **ROLE}, False, 5, id="5-class-role"),
    pytest.param({**CLASS, **PRINCIPAL}, False, 5, id="5-class-principal"),
    pytest.param(CLASS, False, 6, id="6-class"),
    pytest.param({**CLASS, **REQ}, False, 6, id="6-class-requirement"),
    pytest.param({**CLASS, **FACE}, False, 6, id="6-class-face"),
    pytest.param(ROLE, False, 7, id="7-role"),
    pytest.param(PRINCIPAL, False, 7, id="7-principal"),
    pytest.param(REQ, False, 7, id="7-requirement"),
    pytest.param({**ROLE, **REQ}, False, 7, id="7-role-requirement"),
    pytest.param({}, False, 8, id="8-global-default"),
    pytest.param(FACE, False, 8, id="8-faces-only-never-count"),
]


@pytest.mark.parametrize(("match", "safety", "rung"), RUNG_CASES)
def test_precedence_level(match, safety, rung) -> None:
    policy = RoutingPolicy.from_dict(P("p", match, system_safety=safety, priority=3))
    assert precedence_level(policy) == rung
    # The decision (and its explanation) report the same rung when the policy wins.
    ctx = {
        "repo": "acme/widgets",
        "repo_class": "hydraflow",
        "role": "reviewer",
        "principal_id": "adr_reviewer",
        "model_requirement": "claude-opus",
        "request_face": "agentic",
        "accounts": [ANTH],
    }
    decision = run(ctx, [P("p", match, system_safety=safety, priority=3)])
    assert (decision.policy_id, decision.precedence_level, decision.precedence_priority) == (
        "p",
        rung,
        3,
    )
    assert decision.explanation.considered[0].precedence_level == rung


RANK_CTX = {
    "repo": "acme/widgets",
    "repo_class": "hydraflow",
    "principal_id": "reviewer",
    "model_requirement": "claude-opus",
    "accounts": [ANTH, ANTH2],
}

RANK_CASES = [
    pytest.param(
        [
            P("global", action={"account_pool": ["anth-2"]}, priority=10000),
            P("repo", REPO, action={"account_pool": ["anth-1"]}, priority=0),
        ],
        "repo",
        "anth-1",
        id="lower-rung-beats-higher-priority",
    ),
    pytest.param(
        [
            P(
                "repo-role-req",
                {**REPO, **ROLE, **REQ},
                {"account_pool": ["anth-2"]},
                priority=10000,
            ),
            P("safety", {}, {"account_pool": ["anth-1"]}, system_safety=True),
        ],
        "safety",
        "anth-1",
        id="system-safety-rung-1-beats-rung-2-at-max-priority",
    ),
    pytest.param(
        [
            P("class", CLASS, {"account_pool": ["anth-2"]}, priority=9999),
            P("class-role", {**CLASS, **ROLE}, {"account_pool": ["anth-1"]}, priority=1),
        ],
        "class-role",
        "anth-1",
        id="rung-5-beats-rung-6",
    ),
    pytest.param(
        [
            P("a-low", action={"account_pool": ["anth-1"]}, priority=3),
            P("b-high", action={"account_pool": ["anth-2"]}, priority=7),
        ],
        "b-high",
        "anth-2",
        id="priority-breaks-tie-inside-rung-no-conflict",
    ),
    pytest.param(
        [
            P("b-same", action={"account_pool": ["anth-2"]}, priority=4, description="one"),
            P("a-same", action={"account_pool": ["anth-2"]}, priority=4, description="two"),
        ],
        "a-same",
        "anth-2",
        id="identical-actions-equal-precedence-lowest-id-wins",
    ),
]


@pytest.mark.parametrize(("docs", "winner", "account"), RANK_CASES)
def test_ordering(docs, winner, account) -> None:
    for order in (docs, list(reversed(docs))):
        decision = run(RANK_CTX, order)
        assert decision.reason == "matched-policy"
        assert decision.policy_id == winner
        assert decision.account_id == account
        assert decision.explanation.conflicting_policy_ids == ()


def test_identical_actions_are_not_a_validation_conflict_either() -> None:
    docs = [
        P("b-same", action={"account_pool": ["anth-2"]}, priority=4),
        P("a-same", action={"account_pool": ["anth-2"]}, priority=4),
    ]
    assert validate_policies(policies(docs)) == ()


def test_full_trace_lists_every_policy_in_rank_order() -> None:
    docs = [
        P("g-b", priority=1),
        P("g-a", priority=1),
        P("g-top", priority=50),
        P("repo", REPO),
        P("off", enabled=False, system_safety=True),
        P("class-role", {**CLASS, "roles": ["planner"]}, priority=2),
        P("face", {"request_faces": ["one-shot"]}, priority=99),
    ]
    decision = run({**RANK_CTX, "request_face": "agentic"}, docs)
    got = [
        (c.policy_id, c.precedence_level, c.priority, c.reason)
        for c in decision.explanation.considered
    ]
    assert got == [
        ("off", 1, 0, "policy-disabled"),
        ("repo", 4, 0, "matched"),
        ("class-role", 5, 2, "role-not-in-set"),
        ("face", 8, 99, "request-face-not-in-set"),
        ("g-top", 8, 50, "outranked"),
        ("g-a", 8, 1, "outranked"),
        ("g-b", 8, 1, "outranked"),
    ]
    assert decision.explanation.unlisted_policy_count == 0
    assert decision.policy_id == "repo"


def test_decision_json_fields_are_the_documented_ones() -> None:
    d = run({"legacy_route": LEGACY_ANTH}, []).to_dict()
    assert set(d) == {
        "decision_id",
        "outcome",
        "reason",
        "policy_source",
        "policy_id",
        "policy_revision",
        "snapshot_hash",
        "snapshot_state",
        "precedence_level",
        "precedence_priority",
        "account_id",
        "provider_binding",
        "effective_model",
        "explanation",
    }
    # unlisted_policy_count is the documented extension.
    assert set(d["explanation"]) == {
        "context",
        "considered",
        "eligible_account_ids",
        "rejected_accounts",
        "conflicting_policy_ids",
        "unlisted_policy_count",
    }
    assert d["precedence_level"] == 9
    assert d["policy_id"] is None and d["precedence_priority"] is None


# ============================================================================================
# 5. Validation codes, and structure (MalformedError) versus validation
# ============================================================================================

VALIDATION_CASES = [
    pytest.param([P("Bad")], {("invalid-policy-id", "Bad")}, id="invalid-id-uppercase"),
    pytest.param([P("-lead")], {("invalid-policy-id", "-lead")}, id="invalid-id-leading-dash"),
    pytest.param([P("_x")], {("invalid-policy-id", "_x")}, id="invalid-id-leading-underscore"),
    pytest.param([P("has space")], {("invalid-policy-id", "has space")}, id="invalid-id-space"),
    pytest.param([P("a" * 65)], {("invalid-policy-id", "a" * 65)}, id="invalid-id-65-chars"),
    pytest.param([P("caf\u00e9")], {("invalid-policy-id", "caf\u00e9")}, id="invalid-id-non-ascii"),
    pytest.param([P("a" * 64), P("0-x._y", REPO)], set(), id="valid-ids-64-chars-and-symbols"),
    pytest.param(
        [P("dup", REPO), P("dup", REPO)],
        {("duplicate-policy-id", "dup")},
        id="duplicate-policy-id",
    ),
    pytest.param(
        [P("p", {"repo_ids": ["acme"]})],
        {("non-canonical-repo-id", "p")},
        id="non-canonical-repo-no-slash",
    ),
    pytest.param(
        [P("p", {"repo_ids": ["a/b/c"]})],
        {("non-canonical-repo-id", "p")},
        id="non-canonical-repo-two-slashes",
    ),
    pytest.param(
        [P("p", {"repo_ids": ["ac..me/x", ".acme/x"]})],
        {("non-canonical-repo-id", "p")},
        id="non-canonical-repo-dotdot-and-leading-dot",
    ),
    pytest.param(
        [
            P(
                "p",
                action={
                    "requirement_map": [
                        {"requirement": {"kind": "capability", "value": "balanced"}, "model": "m1"},
                        {"requirement": {"kind": "capability", "value": "balanced"}, "model": "m2"},
                    ]
                },
            )
        ],
        {("duplicate-requirement-mapping", "p")},
        id="duplicate-requirement-mapping-list-form",
    ),
    pytest.param(
        [
            P(
                "p",
                action={
                    "requirement_map": {
                        "claude-opus": "claude-opus-4-1",
                        "CLAUDE-OPUS": "claude-opus-4-5",
                    }
                },
            )
        ],
        {("duplicate-requirement-mapping", "p")},
        id="duplicate-requirement-mapping-case-insensitive-keys",
    ),
    pytest.param(
        [P("p", action={"requirement_map": {"claude-opus": "glm-5.3"}})],
        {("literal-family-mapped-to-foreign-model", "p")},
        id="foreign-model-glm",
    ),
    pytest.param(
        [P("p", action={"requirement_map": {"claude-sonnet": "claude-opus-4-1"}})],
        {("literal-family-mapped-to-foreign-model", "p")},
        id="foreign-model-wrong-family-token",
    ),
    pytest.param(
        [P("p", action={"requirement_map": {"claude-opus": "claude-opus-glm-distill"}})],
        {("literal-family-mapped-to-foreign-model", "p")},
        id="foreign-model-marker-inside-claude-id",
    ),
    pytest.param(
        [P("p", action={"requirement_map": {"claude-opus": "us.anthropic.claude-opus-4-1-v1:0"}})],
        set(),
        id="honest-prefixed-mapping-is-fine",
    ),
    pytest.param(
        [
            P(
                "p",
                action={
                    "requirement_map": {"balanced": "gpt-5"},
                    "allowed_patterns": ["claude-*"],
                },
            )
        ],
        {("mapped-model-not-in-allowed-patterns", "p")},
        id="mapped-model-not-in-allowed-patterns",
    ),
    pytest.param(
        [
            P(
                "p",
                action={
                    "requirement_map": {"balanced": "Claude-Sonnet-4-5"},
                    "allowed_patterns": ["CLAUDE-*"],
                },
            )
        ],
        set(),
        id="allowed-patterns-case-insensitive",
    ),
]


@pytest.mark.parametrize(("docs", "expected"), VALIDATION_CASES)
def test_validation_code(docs, expected) -> None:
    # Author mistakes construct fine: from_dict must not raise for any of these.
    built = policies(docs)
    issues = validate_policies(built)
    assert {(i.code, i.policy_id) for i in issues} == expected
    assert all(i.detail for i in issues)


CONFLICT_CASES = [
    pytest.param(
        [
            P("a", action={"provider_lock": "anthropic"}),
            P("b", action={"provider_lock": "zai-harness"}),
        ],
        True,
        id="two-global-defaults-different-actions",
    ),
    pytest.param(
        [
            P("a", {"repo_ids": ["acme/widgets"]}, {"account_pool": ["x"]}),
            P("b", {"repo_ids": ["acme/gadgets"]}, {"account_pool": ["y"]}),
        ],
        False,
        id="disjoint-repo-sets-do-not-conflict",
    ),
    pytest.param(
        [
            P("a", {"repo_ids": ["acme/widgets", "acme/tools"]}, {"account_pool": ["x"]}),
            P("b", {"repo_ids": ["acme/gadgets", "acme/tools"]}, {"account_pool": ["y"]}),
        ],
        True,
        id="intersecting-repo-sets-conflict",
    ),
    pytest.param(
        [
            P("a", {"roles": ["reviewer"]}, {"account_pool": ["x"]}),
            P("b", {"model_requirements": ["claude-opus"]}, {"account_pool": ["y"]}),
        ],
        True,
        id="empty-vs-nonempty-overlaps-rung-7",
    ),
    pytest.param(
        [
            P("a", {"roles": ["reviewer"]}, {"account_pool": ["x"]}),
            P("b", {"principal_ids": ["adr_reviewer"]}, {"account_pool": ["y"]}),
        ],
        True,
        id="role-vs-principal-overlap",
    ),
    pytest.param(
        [
            P("a", {"principal_ids": ["ADR_Reviewer"]}, {"account_pool": ["x"]}),
            P("b", {"principal_ids": ["adr_reviewer"]}, {"account_pool": ["y"]}),
        ],
        True,
        id="principals-intersect-case-insensitively",
    ),
    pytest.param(
        [
            P("a", {**ROLE, "request_faces": ["agentic"]}, {"account_pool": ["x"]}),
            P("b", {**ROLE, "request_faces": ["one-shot"]}, {"account_pool": ["y"]}),
        ],
        False,
        id="disjoint-faces-do-not-conflict",
    ),
    pytest.param(
        [
            P("a", action={"provider_lock": "anthropic"}, priority=1),
            P("b", action={"provider_lock": "zai-harness"}, priority=2),
        ],
        False,
        id="different-priority-does-not-conflict",
    ),
    pytest.param(
        [
            P("a", action={"provider_lock": "anthropic"}),
            P("b", action={"provider_lock": "zai-harness"}, enabled=False),
        ],
        False,
        id="disabled-policy-does-not-conflict",
    ),
    pytest.param(
        [
            P("a", REPO, {"provider_lock": "anthropic"}),
            P("b", {**REPO, **ROLE}, {"provider_lock": "zai-harness"}),
        ],
        False,
        id="different-rungs-do-not-conflict",
    ),
    pytest.param(
        [
            P("a", {}, {"provider_lock": "anthropic"}, system_safety=True),
            P("b", REPO, {"provider_lock": "zai-harness"}, system_safety=True),
        ],
        True,
        id="system-safety-rung-1-overlap-conflicts",
    ),
    pytest.param(
        [
            P("a", action={"provider_lock": "anthropic"}, description="x"),
            P("b", action={"provider_lock": "anthropic"}, description="y"),
        ],
        False,
        id="identical-actions-do-not-conflict",
    ),
]


@pytest.mark.parametrize(("docs", "conflict"), CONFLICT_CASES)
def test_equal_precedence_conflict(docs, conflict) -> None:
    issues = [i for i in validate_policies(policies(docs)) if i.code == "equal-precedence-conflict"]
    if not conflict:
        assert issues == []
        return
    assert len(issues) == 1
    (issue,) = issues
    other = ({"a", "b"} - {issue.policy_id}).pop()
    assert issue.policy_id in {"a", "b"}
    assert other in issue.detail
    # The same pair, if it somehow reaches explain with a context both match, is a conflict.
    ctx = {
        "repo": "acme/tools" if "tools" in str(docs) else "acme/widgets",
        "role": "reviewer",
        "principal_id": "adr_reviewer",
        "model_requirement": "claude-opus",
        "request_face": "agentic",
        "accounts": [ANTH],
    }
    decision = run(ctx, docs)
    assert decision.reason == "policy-conflict"
    assert decision.explanation.conflicting_policy_ids == ("a", "b")


def test_one_run_reports_every_issue() -> None:
    doc = {
        "policies": [
            P("Bad-ID"),
            P("dup", REPO),
            P("dup", REPO),
            P("noncanon", {"repo_ids": ["just-a-slug"]}),
            P(
                "mapping-mess",
                {"repo_ids": ["acme/other"]},
                {
                    "requirement_map": [
                        {"requirement": "claude-opus", "model": "glm-5.3"},
                        {"requirement": "claude-opus", "model": "claude-opus-4-1"},
                    ],
                    "allowed_patterns": ["claude-*"],
                },
            ),
            P("g1", {"roles": ["planner"]}, {"provider_lock": "anthropic"}),
            P("g2", {"roles": ["planner"]}, {"provider_lock": "zai-harness"}),
        ]
    }
    snap = PolicySnapshot.from_dict(doc)  # well-formed: must not raise
    issues = validate_policies(snap.policies)
    assert {(i.code, i.policy_id) for i in issues} >= {
        ("invalid-policy-id", "Bad-ID"),
        ("duplicate-policy-id", "dup"),
        ("non-canonical-repo-id", "noncanon"),
        ("duplicate-requirement-mapping", "mapping-mess"),
        ("literal-family-mapped-to-foreign-model", "mapping-mess"),
        ("mapped-model-not-in-allowed-patterns", "mapping-mess"),
    }
    assert {i.code for i in issues} == {
        "invalid-policy-id",
        "duplicate-policy-id",
        "non-canonical-repo-id",
        "duplicate-requirement-mapping",
        "literal-family-mapped-to-foreign-model",
        "mapped-model-not-in-allowed-patterns",
        "equal-precedence-conflict",
    }
    conflict = [i for i in issues if i.code == "equal-precedence-conflict"]
    assert [i.policy_id for i in conflict] in (["g1"], ["g2"])


@pytest.mark.parametrize(
    "pid",
    [
        pytest.param(
            "",
            id="empty-id",
        ),
        pytest.param(
            "x" * 300,
            id="300-char-id",
        ),
        pytest.param(
            " padded",
            id="whitespace-padded-id",
        ),
    ],
)
def test_bad_ids_are_validation_issues_not_malformed(pid) -> None:
    built = RoutingPolicy.from_dict({"id": pid})
    assert [i.code for i in validate_policies([built])] == ["invalid-policy-id"]


def _good(pid: str) -> dict:
    return P(pid)


MALFORMED_POLICY_CASES = [
    pytest.param([P("p", colour="red")], "policies[0].colour", id="unknown-policy-field"),
    pytest.param(
        [_good("a"), P("p", {"repos": ["acme/widgets"]})],
        "policies[1].match.repos",
        id="unknown-match-field",
    ),
    pytest.param(
        [P("p", action={"fallback": []})], "policies[0].action.fallback", id="unknown-action-field"
    ),
    pytest.param([{"id": 7}], "policies[0].id", id="wrong-type-id"),
    pytest.param([{"match": {}}], "policies[0].id", id="missing-id"),
    pytest.param([P("p", priority="5")], "policies[0].priority", id="wrong-type-priority-str"),
    pytest.param([P("p", priority=5.0)], "policies[0].priority", id="wrong-type-priority-float"),
    pytest.param([P("p", priority=True)], "policies[0].priority", id="wrong-type-priority-bool"),
    pytest.param([P("p", enabled="yes")], "policies[0].enabled", id="wrong-type-enabled"),
    pytest.param([P("p", system_safety=1)], "policies[0].system_safety", id="wrong-type-safety"),
    pytest.param([P("p", {"roles": "reviewer"})], "policies[0].match.roles", id="wrong-type-set"),
    pytest.param([P("p", match=[])], "policies[0].match", id="wrong-type-match"),
    pytest.param([P("p", priority=10001)], "policies[0].priority", id="priority-above-10000"),
    pytest.param([P("p", priority=-1)], "policies[0].priority", id="priority-below-0"),
    pytest.param(
        [_good("a"), _good("b"), _good("c"), P("d", {"roles": ["adr_reviewer"]})],
        "policies[3].match.roles[0]",
        id="role-outside-vocabulary",
    ),
    pytest.param(
        [P("p", {"repo_classes": ["client", "corp"]})],
        "policies[0].match.repo_classes[1]",
        id="repo-class-outside-vocabulary",
    ),
    pytest.param(
        [P("p", {"request_faces": ["batch"]})],
        "policies[0].match.request_faces[0]",
        id="face-outside-vocabulary",
    ),
    pytest.param(
        [P("p", {"model_requirements": [{"kind": "family", "value": "claude-opus"}]})],
        "policies[0].match.model_requirements[0].kind",
        id="requirement-kind-outside-vocabulary",
    ),
    pytest.param(
        [P("p", {"model_requirements": [{"kind": "literal_family", "value": "claude-haiku"}]})],
        "policies[0].match.model_requirements[0].value",
        id="literal-family-outside-vocabulary",
    ),
    pytest.param(
        [P("p", action={"provider_lock": "openai"})],
        "policies[0].action.provider_lock",
        id="binding-outside-vocabulary",
    ),
    pytest.param(
        [P("p", action={"on_unavailable": "retry"})],
        "policies[0].action.on_unavailable",
        id="on-unavailable-outside-vocabulary",
    ),
    pytest.param(
        [P("p", action={"selection": "random"})],
        "policies[0].action.selection",
        id="selection-outside-vocabulary",
    ),
    pytest.param(
        [
            P(
                "p",
                action={
                    "requirement_map": [
                        {"requirement": {"kind": "capability", "value": "ultra"}, "model": "m"}
                    ]
                },
            )
        ],
        "policies[0].action.requirement_map[0].requirement.value",
        id="capability-outside-vocabulary",
    ),
]


@pytest.mark.parametrize(("docs", "path"), MALFORMED_POLICY_CASES)
def test_policy_from_dict_malformed_names_the_path(docs, path) -> None:
    with pytest.raises(MalformedError) as info:
        PolicySnapshot.from_dict({"policies": docs})
    assert info.value.path == path
    assert isinstance(info.value, RenseiRoutingError)
    assert not isinstance(info.value, (KeyError, TypeError))
    assert str(info.value).startswith(path + ":")


MALFORMED_CONTEXT_CASES = [
    pytest.param({"tenant": "x"}, "tenant", id="unknown-field"),
    pytest.param({"request_face": "batch"}, "request_face", id="face-outside-vocabulary"),
    pytest.param({"repo_class": "corp"}, "repo_class", id="class-outside-vocabulary"),
    pytest.param({"principal_id": 3}, "principal_id", id="wrong-type-principal"),
    pytest.param(
        {"accounts": [ANTH, {"account_id": "o", "provider_binding": "openai"}]},
        "accounts[1].provider_binding",
        id="account-binding-outside-vocabulary",
    ),
    pytest.param(
        {"accounts": [{**ANTH, "administrative_state": "paused"}]},
        "accounts[0].administrative_state",
        id="account-state-outside-vocabulary",
    ),
    pytest.param(
        {"accounts": [{**ANTH, "configured": "yes"}]},
        "accounts[0].configured",
        id="account-configured-wrong-type",
    ),
    pytest.param(
        {"legacy_route": {**LEGACY_ANTH, "mechanism": "magic"}},
        "legacy_route.mechanism",
        id="legacy-mechanism-outside-vocabulary",
    ),
    pytest.param(
        {"model_requirement": {"kind": "x", "value": "y"}},
        "model_requirement.kind",
        id="requirement-kind-outside-vocabulary",
    ),
    pytest.param(
        {"model_requirement": {"kind": "concrete_model", "value": "m" * 65}},
        "model_requirement.value",
        id="concrete-id-over-64-chars",
    ),
]


@pytest.mark.parametrize(("doc", "path"), MALFORMED_CONTEXT_CASES)
def test_context_from_dict_malformed_names_the_path(doc, path) -> None:
    with pytest.raises(MalformedError) as info:
        RouteContext.from_dict(doc)
    assert info.value.path == path


# ============================================================================================
# 6. Vocabulary and identity helpers
# ============================================================================================

CANONICALIZE_CASES = [
    ("acme/widgets", "acme/widgets"),
    ("  Acme/Widgets\n", "acme/widgets"),
    ("ACME/WIDGETS", "acme/widgets"),
    ("_acme/x", "_acme/x"),
    ("a.b-c_d/e.js", "a.b-c_d/e.js"),
    ("0/9", "0/9"),
    ("acme", None),
    ("acme-widgets", None),
    ("a/b/c", None),
    ("acme/../x", None),
    ("ac..me/x", None),
    ("acme/x..y", None),
    (".acme/x", None),
    ("acme/.x", None),
    ("-acme/x", None),
    ("acme/-x", None),
    ("/x", None),
    ("acme/", None),
    ("/", None),
    ("", None),
    ("   ", None),
    ("ac me/x", None),
    ("acme/ x", None),
    ("acme /x", None),
    ("acme\\x", None),
    ("acm\u00e9/x", None),
    (None, None),
    (42, None),
]


@pytest.mark.parametrize(
    ("raw", "expected"), CANONICALIZE_CASES, ids=[repr(c[0]) for c in CANONICALIZE_CASES]
)
def test_canonicalize_repo(raw, expected) -> None:
    assert canonicalize_repo(raw) == expected


ROLE_CASES = [
    ("reviewer", "reviewer"),
    ("  Reviewer \t", "reviewer"),
    ("TEST_ADEQUACY", "test_adequacy"),
    ("explorer", "explorer"),
    ("planner", "planner"),
    ("architect", "architect"),
    ("implementer", "implementer"),
    ("debugger", "debugger"),
    ("adr_reviewer", None),
    ("wiki_compilation", None),
    ("pr_unstick", None),
    ("review", None),
    ("reviewers", None),
    ("test-adequacy", None),
    ("", None),
    (None, None),
]


@pytest.mark.parametrize(
    ("principal", "expected"), ROLE_CASES, ids=[repr(c[0]) for c in ROLE_CASES]
)
def test_canonical_worker_role(principal, expected) -> None:
    assert canonical_worker_role(principal) == expected
    if principal:
        # The context derives its role through the same single definition (§D8).
        assert RouteContext.from_dict({"principal_id": principal}).role == expected


SATISFIED_CASES = [
    ("literal_family", "claude-opus", "claude-opus-4-1", True),
    ("literal_family", "claude-opus", "CLAUDE-OPUS-4-1", True),
    ("literal_family", "claude-opus", "claude-3-opus-20240229", True),
    ("literal_family", "claude-opus", "anthropic.claude-opus-4-1-v1:0", True),
    ("literal_family", "claude-opus", "us.anthropic.claude-opus-4-1-v1:0", True),
    ("literal_family", "claude-sonnet", "eu.anthropic.claude-sonnet-4-5", True),
    ("literal_family", "claude-opus", "abcdefgh.anthropic.claude-opus-4", True),
    ("literal_family", "claude-opus", "a.anthropic.claude-opus-4", False),
    ("literal_family", "claude-opus", "abcdefghi.anthropic.claude-opus-4", False),
    ("literal_family", "claude-opus", "u1.anthropic.claude-opus-4", False),
    ("literal_family", "claude-opus", "us.claude-opus-4", False),
    ("literal_family", "claude-opus", "openai.claude-opus-4", False),
    ("literal_family", "claude-opus", "my-claude-opus", False),
    ("literal_family", "claude-opus", "opus", False),
    ("literal_family", "claude-opus", "glm-5.3", False),
    ("literal_family", "claude-opus", "claude-opus-glm", False),
    ("literal_family", "claude-opus", "claude-opus-qwen3", False),
    ("literal_family", "claude-opus", "claude-deepseek-opus", False),
    ("literal_family", "claude-opus", "claude-opus-kimi-k2", False),
    ("literal_family", "claude-opus", "claude-sonnet-4-5", False),
    ("literal_family", "claude-sonnet", "claude-opus-4-1", False),
    ("concrete_model", "Claude-Sonnet-4-5", "claude-sonnet-4-5", True),
    ("concrete_model", "glm-4.6", "GLM-4.6", True),
    ("concrete_model", "glm-4.6", "glm-4.5", False),
    ("capability", "high-reasoning", "glm-5.3", True),
    ("capability", "balanced", "anything-at-all", True),
]


@pytest.mark.parametrize(
    ("kind", "value", "model", "expected"),
    SATISFIED_CASES,
    ids=[f"{c[1]}<-{c[2]}" for c in SATISFIED_CASES],
)
def test_satisfied_by(kind, value, model, expected) -> None:
    assert DEFAULT_VOCABULARY.satisfied_by(kind, value, model) is expected


# ============================================================================================
# 7. decision_id
# ============================================================================================

ID_CTX = {
    "repo": "acme/widgets",
    "repo_class": "hydraflow",
    "principal_id": "R\u00e9viewer\u2028\u00a0x\x01",
    "model_requirement": "high-reasoning",
    "request_face": "agentic",
    "accounts": [ANTH, ANTH2],
    "legacy_route": {**LEGACY_GLM, "mechanism_detail": 'line1\nline2 "q" \\ \x7f \u00fc'},
}
ID_POLICIES = [
    P("hr", action={"requirement_map": {"high-reasoning": "claude-opus-4-1"}}),
    P("elsewhere", {"repo_ids": ["acme/gadgets"]}),
]


def _nine_fields(decision: RouteDecision, ctx: RouteContext) -> dict[str, Any]:
    return {
        "account_id": decision.account_id,
        "context": ctx.to_dict(),
        "effective_model": decision.effective_model,
        "outcome": decision.outcome,
        "policy_id": decision.policy_id,
        "policy_revision": decision.policy_revision,
        "reason": decision.reason,
        "snapshot_hash": decision.snapshot_hash,
        "snapshot_state": decision.snapshot_state,
    }


@pytest.mark.parametrize(
    ("ctx_doc", "docs", "state"),
    [
        pytest.param(ID_CTX, ID_POLICIES, "ok", id="selected"),
        pytest.param(ID_CTX, [], "ok", id="legacy"),
        pytest.param(ID_CTX, ID_POLICIES, "corrupt", id="held-corrupt"),
        pytest.param(
            {"accounts": [ANTH]},
            [P("a", priority=1), P("b", {}, {"provider_lock": "zai-harness"}, priority=1)],
            "ok",
            id="conflict",
        ),
    ],
)
def test_decision_id_is_digest_of_the_nine_documented_fields(ctx_doc, docs, state) -> None:
    ctx = context(ctx_doc)
    decision = run(ctx, docs, state=state)
    fields = _nine_fields(decision, ctx)
    assert decision.decision_id == digest(fields)
    # Independently of the package's encoder: RFC 8785 via the reference library.
    reference = "sha256:" + hashlib.sha256(rfc8785.dumps(fields)).hexdigest()
    assert decision.decision_id == reference
    assert decision.decision_id == decision_id(
        ctx,
        snapshot_hash=decision.snapshot_hash,
        snapshot_state=decision.snapshot_state,
        policy_revision=decision.policy_revision,
        outcome=decision.outcome,
        reason=decision.reason,
        policy_id=decision.policy_id,
        account_id=decision.account_id,
        effective_model=decision.effective_model,
    )


def test_decision_id_same_inputs_same_id() -> None:
    first = run(ID_CTX, ID_POLICIES)
    again = explain(
        RouteContext.from_dict(dict(reversed(list(ID_CTX.items())))),
        snapshot(list(reversed(ID_POLICIES))),
    )
    assert first.decision_id == again.decision_id
    assert first.account_id == again.account_id == "anth-1"


DID_BASE = {
    "snapshot_hash": "sha256:" + "1" * 64,
    "snapshot_state": "ok",
    "policy_revision": 3,
    "outcome": "selected",
    "reason": "matched-policy",
    "policy_id": "p",
    "account_id": "anth-1",
    "effective_model": "claude-opus-4-1",
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("snapshot_hash", "sha256:" + "2" * 64),
        ("snapshot_state", "absent"),
        ("policy_revision", 4),
        ("outcome", "held"),
        ("reason", "no-eligible-account"),
        ("policy_id", "q"),
        ("policy_id", None),
        ("account_id", "anth-2"),
        ("account_id", None),
        ("effective_model", "claude-opus-4-5"),
        ("effective_model", None),
    ],
)
def test_decision_id_changes_with_each_field(field, value) -> None:
    ctx = context(ID_CTX)
    base = decision_id(ctx, **DID_BASE)
    changed = decision_id(ctx, **{**DID_BASE, field: value})
    assert changed != base


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda c, d, s: ({**c, "principal_id": "other"}, d, s), id="context-only"),
        pytest.param(
            lambda c, d, s: (c, [*d, P("unrelated", {"repo_ids": ["x/y"]})], s),
            id="snapshot-hash-only",
        ),
        pytest.param(lambda c, d, s: (c, d, "absent"), id="state-only"),
        pytest.param(
            lambda c, d, s: (
                {**c, "accounts": [{**ANTH, "administrative_state": "draining"}, ANTH2]},
                d,
                s,
            ),
            id="account-chosen",
        ),
        pytest.param(
            lambda c, d, s: (
                c,
                [P("hr", action={"requirement_map": {"high-reasoning": "claude-opus-4-5"}})],
                s,
            ),
            id="model-chosen",
        ),
        pytest.param(
            lambda c, d, s: ({**c, "accounts": []}, d, s),
            id="outcome-affecting-input",
        ),
    ],
)
def test_decision_id_changes_with_each_input(change) -> None:
    base = run(ID_CTX, ID_POLICIES)
    ctx_doc, docs, state = change(ID_CTX, ID_POLICIES, "ok")
    other = run(ctx_doc, docs, state=state)
    assert other.decision_id != base.decision_id


def test_decision_id_changes_with_revision_alone() -> None:
    a = run(ID_CTX, ID_POLICIES, revision=1)
    b = run(ID_CTX, ID_POLICIES, revision=2)
    assert a.snapshot_hash == b.snapshot_hash
    assert (a.policy_revision, b.policy_revision) == (1, 2)
    assert a.decision_id != b.decision_id


# ============================================================================================
# 8. Policy-set hash and snapshot state
# ============================================================================================

HASH_DOCS = [
    P(
        "one",
        {"repo_ids": ["acme/widgets", "acme/gadgets"], "roles": ["reviewer", "planner"]},
        {
            "allowed_patterns": ["claude-*", "glm-*"],
            "fallback_on": ["rate-limit", "outage"],
            "requirement_map": {
                "balanced": "claude-sonnet-4-5",
                "high-reasoning": "claude-opus-4-1",
            },
        },
    ),
    P("two", {"principal_ids": ["b", "a"]}, {"account_pool": ["x", "y"]}),
    P("three", priority=9),
]


def _reordered_sets(doc: dict) -> dict:
    out = {**doc}
    if "match" in doc:
        out["match"] = {k: list(reversed(v)) for k, v in doc["match"].items()}
    if "action" in doc:
        action = {}
        for k, v in doc["action"].items():
            if k == "account_pool":
                action[k] = v  # ordered: not a set
            elif isinstance(v, dict):
                action[k] = dict(reversed(list(v.items())))
            else:
                action[k] = list(reversed(v))
        out["action"] = action
    return out


def test_hash_policies_is_order_independent() -> None:
    base = hash_policies(policies(HASH_DOCS))
    assert base.startswith("sha256:") and len(base) == len("sha256:") + 64
    assert hash_policies(policies(list(reversed(HASH_DOCS)))) == base
    assert hash_policies(policies([_reordered_sets(d) for d in HASH_DOCS])) == base
    assert snapshot(HASH_DOCS).content_hash == base


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(
            lambda d: [
                P("two", {"principal_ids": ["a", "b"]}, {"account_pool": ["y", "x"]}),
                *d[::2],
            ],
            id="account-pool-order-is-meaningful",
        ),
        pytest.param(lambda d: [*d[:2], P("three", priority=10)], id="priority"),
        pytest.param(lambda d: [*d[:2], P("three", priority=9, enabled=False)], id="enabled"),
        pytest.param(lambda d: d[:2], id="policy-removed"),
    ],
)
def test_hash_policies_sees_real_changes(edit) -> None:
    assert hash_policies(policies(edit(HASH_DOCS))) != hash_policies(policies(HASH_DOCS))


def test_snapshot_state_detects_a_mismatched_declared_hash() -> None:
    built = policies(HASH_DOCS)
    good = PolicySnapshot.of(built, revision=2)
    assert good.state() == "ok"
    declared_ok = PolicySnapshot.from_dict(
        {"revision": 2, "content_hash": good.content_hash, "policies": HASH_DOCS}
    )
    assert declared_ok.state() == "ok"
    assert declared_ok.content_hash == good.content_hash
    tampered = PolicySnapshot.from_dict(
        {"revision": 2, "content_hash": good.content_hash, "policies": HASH_DOCS[:2]}
    )
    assert tampered.state() == "corrupt"
    wrong = PolicySnapshot(revision=2, policies=tuple(built), content_hash="sha256:" + "0" * 64)
    assert wrong.state() == "corrupt"
    # A snapshot the store calls corrupt holds, whatever its policies say.
    decision = explain(
        context({"accounts": [ANTH], "legacy_route": LEGACY_ANTH}),
        wrong,
        snapshot_state=wrong.state(),
    )
    assert (decision.outcome, decision.reason, decision.policy_source) == (
        "held",
        "snapshot-unavailable",
        "none",
    )
