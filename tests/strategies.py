"""Hypothesis strategies for JSON-shaped policies and contexts, drawn from small pools so that
matches, ties, conflicts and every rejection reason happen often."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RouteDecision, explain, explain_batch
from rensei_routing.core.redact import (
    DEFAULT_PATTERNS,
    DEFAULT_REDACTOR,
    RedactionPattern,
    Redactor,
)
from rensei_routing.core.routing.ids import decision_id

REPOS = ["acme/widgets", "acme/gadgets", "t-rav/hydraflow", "acme-widgets", "Acme/Widgets"]
CLASSES = ["hydraflow", "client", "personal"]
ROLES = ["implementer", "reviewer", "planner"]
PRINCIPALS = ["implementer", "reviewer", "adr_reviewer", "Planner", "pr_unstick"]
FACES = ["agentic", "one-shot", "unknown"]
REQUIREMENTS: list[Any] = [
    {"kind": "literal_family", "value": "claude-opus"},
    {"kind": "literal_family", "value": "claude-sonnet"},
    {"kind": "capability", "value": "high-reasoning"},
    {"kind": "capability", "value": "balanced"},
    {"kind": "concrete_model", "value": "claude-sonnet-4-5"},
    {"kind": "concrete_model", "value": "glm-5.3"},
    {"kind": "concrete_model", "value": "us.anthropic.claude-opus-4-1"},
]
MODELS = [
    "claude-opus-4-1",
    "claude-sonnet-4-5",
    "glm-5.3",
    "anthropic.claude-opus-4",
    "claude-opus-glm-distill",
    "qwen3-coder",
]
ACCOUNTS = [
    ("anthropic-a", "anthropic"),
    ("anthropic-b", "anthropic"),
    ("zai-a", "zai-harness"),
    ("zai-b", "zai-harness"),
]
PATTERNS = ["claude-*", "glm-*", "*opus*", "CLAUDE-SONNET-*"]


def _subset(pool: list[Any], max_size: int = 2) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.sampled_from(pool), max_size=max_size, unique_by=repr)


@st.composite
def policy_dicts(draw: st.DrawFn, ids: list[str] | None = None) -> dict[str, Any]:
    ids = ids or [f"p{i}" for i in range(6)]
    match: dict[str, Any] = {}
    for key, pool in (
        ("repo_ids", REPOS[:3]),
        ("repo_classes", CLASSES),
        ("roles", ROLES),
        ("principal_ids", PRINCIPALS),
        ("model_requirements", REQUIREMENTS),
        ("request_faces", FACES),
    ):
        values = draw(_subset(pool))
        if values:
            match[key] = values
    mapping = draw(
        st.lists(
            st.fixed_dictionaries(
                {"requirement": st.sampled_from(REQUIREMENTS), "model": st.sampled_from(MODELS)}
            ),
            max_size=2,
        )
    )
    pool = [a for a, _ in draw(_subset(ACCOUNTS, 3))]
    return {
        "id": draw(st.sampled_from(ids)),
        "enabled": draw(st.booleans()),
        "priority": draw(st.sampled_from([0, 5, 10])),
        "system_safety": draw(st.booleans()) and draw(st.booleans()),
        "match": match,
        "action": {
            "provider_lock": draw(st.sampled_from([None, "anthropic", "zai-harness"])),
            "account_pool": pool,
            "requirement_map": mapping,
            "allowed_patterns": draw(_subset(PATTERNS)),
            "on_unavailable": draw(st.sampled_from(["hold", "reject"])),
        },
    }


@st.composite
def context_dicts(draw: st.DrawFn) -> dict[str, Any]:
    accounts = []
    for account_id, binding in draw(_subset(ACCOUNTS, 4)):
        accounts.append(
            {
                "account_id": account_id,
                "provider_binding": binding,
                "configured": draw(st.booleans()) or draw(st.booleans()),
                "administrative_state": draw(
                    st.sampled_from(["active", "active", "disabled", "draining"])
                ),
            }
        )
    legacy = draw(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "provider_binding": st.sampled_from(["anthropic", "zai", "gateway"]),
                    "account_id": st.sampled_from([None, "anthropic-a", "zai-a"]),
                    "model": st.sampled_from([None, *MODELS]),
                }
            ),
        )
    )
    return {
        "repo": draw(st.sampled_from([None, *REPOS])),
        "repo_class": draw(st.sampled_from([None, *CLASSES])),
        "principal_id": draw(st.sampled_from([None, *PRINCIPALS])),
        "model_requirement": draw(st.sampled_from([None, *REQUIREMENTS])),
        "request_face": draw(st.sampled_from(FACES)),
        "legacy_route": legacy,
        "accounts": accounts,
    }


def redactor_also(label: str, text: str) -> Redactor:
    """The default redactor plus a pattern that redacts ``text`` wherever it appears: a
    trigger the tests place in one member of a context or decision."""
    extra = RedactionPattern(label, re.compile(re.escape(text)), (text,))
    return Redactor((*DEFAULT_PATTERNS, extra), joint_from=len(DEFAULT_PATTERNS))


def plain_decision_id(
    doc: dict[str, Any], d: RouteDecision, redactor: Redactor = DEFAULT_REDACTOR
) -> str:
    """The id the general writer gives decision ``d`` of context ``doc``: a fresh context
    (nothing cached on it) and no memo, i.e. the plain path a batch's fast paths must match."""
    return decision_id(
        RouteContext.from_dict(doc),
        snapshot_hash=d.snapshot_hash,
        snapshot_state=d.snapshot_state,
        policy_revision=d.policy_revision,
        outcome=d.outcome,
        reason=d.reason,
        policy_id=d.policy_id,
        account_id=d.account_id,
        effective_model=d.effective_model,
        redactor=redactor,
    )


def assert_batch_decides_as_alone(
    batch_docs: list[dict[str, Any]],
    snapshot: Callable[[], PolicySnapshot],
    redactor: Redactor,
    trace: str,
) -> None:
    """``explain_batch`` of the contexts ``batch_docs`` gives, for each, exactly what
    ``explain`` of that context alone gives on a fresh ``snapshot()`` (decision, canonical
    bytes, explanation) and the id the general writer gives it."""
    batched = explain_batch(
        [RouteContext.from_dict(d) for d in batch_docs], snapshot(), redactor=redactor, trace=trace
    )
    for doc, d in zip(batch_docs, batched, strict=True):
        alone = explain(RouteContext.from_dict(doc), snapshot(), redactor=redactor, trace=trace)
        assert d == alone
        assert d.canonical() == alone.canonical()
        # A full trace reads the context's keys when it is built (answers keep none).
        assert d.explanation.to_dict() == alone.explanation.to_dict()
        assert d.decision_id == plain_decision_id(doc, d, redactor)  # the general writer
