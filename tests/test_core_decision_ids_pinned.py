"""Decision ids that the rulings of issue 8 and the redacted-id rule of issue 14 must not move.

Each id below was computed by the resolver before those changes (commit 2f34d3b). None of these
decisions is changed by the new rules (no alias, no mapped Claude model on another lane, no
duplicate account id, no case-folded pool, no credential in the context), so the id must stay
byte for byte the same: an operator's recorded ids keep matching their decisions.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain

EXAMPLES = resources.files("rensei_routing") / "examples"

#: ``contexts.jsonl`` line by line, then ``context.json``, against ``policies.json``.
EXAMPLE_IDS = [
    "sha256:b37d62ebcfe59808ab6e8b11067a52ac0775221eb40a7a43dd108ccd85a1ebee",
    "sha256:0ab71f9aae2120f12a307e0844e4781e39af9cc9a1113ea33cfb636702fd5694",
    "sha256:78e07af1c84eb123e28692b6c2ec72c3a330cc6cf56a09de96f2429baba1494d",
    "sha256:84531f605f006b0fe1c37f6ca39a8643e4eca281e92876e89af8b129e1a5f801",
    "sha256:99385954b0e878561c7d6c77036cb5eb443d75b18741cb74859eeca1fb1b02db",
    "sha256:5e477fabe78749c03868c17a32f9f55c0e09c13ecf4846dc4907f95b22ce8e11",
    "sha256:f9721ecd552a35e80c9d5ecfaa840d5cfbf8e84d010bb14b18ba7095650b0a6a",
]


def _example_contexts() -> list[dict[str, Any]]:
    lines = (EXAMPLES / "contexts.jsonl").read_text(encoding="utf-8").splitlines()
    docs = [json.loads(line) for line in lines if line.strip()]
    docs.append(json.loads((EXAMPLES / "context.json").read_text(encoding="utf-8")))
    return docs


def test_example_decision_ids_are_unchanged() -> None:
    snapshot = PolicySnapshot.from_dict(
        json.loads((EXAMPLES / "policies.json").read_text(encoding="utf-8"))
    )
    got = [
        explain(RouteContext.from_dict(doc), snapshot).decision_id for doc in _example_contexts()
    ]
    assert got == EXAMPLE_IDS


A = [
    {"account_id": "zai-a", "provider_binding": "zai-harness"},
    {"account_id": "ant-a", "provider_binding": "anthropic"},
]

PINNED = [
    pytest.param(
        {
            "principal_id": "planner",
            "accounts": A,
            "legacy_route": {"provider_binding": "zai", "account_id": "zai-a", "model": "glm-5.1"},
        },
        [],
        "ok",
        "sha256:a17041b86c1e06535469c1b64ce25d26bcdc7f40c1336c2f5f1469ccdeac3a74",
        id="legacy",
    ),
    pytest.param(
        {"principal_id": "planner", "accounts": A},
        [],
        "ok",
        "sha256:ebb48d710fdd361e8d7e2224edf4cd069da20135cdf37f8e51034d71ca5658fd",
        id="no-legacy-route",
    ),
    pytest.param(
        {"model_requirement": "gpt-5", "accounts": A},
        [{"id": "p", "action": {"allowed_patterns": ["glm-*"]}}],
        "ok",
        "sha256:5a6b4019593664071ddd7033738371a88901337ab3bcd0d2e6ddaf1007a6f45f",
        id="model-not-allowed",
    ),
    pytest.param(
        {"accounts": A},
        [
            {"id": "a", "action": {"provider_lock": "anthropic"}},
            {"id": "b", "action": {"provider_lock": "zai-harness"}},
        ],
        "ok",
        "sha256:fdae110d8172a50a95f4fab393fc71cdcf59076d78f135f4c7b952ecd67c943a",
        id="policy-conflict",
    ),
    pytest.param(
        {"model_requirement": "claude-opus", "accounts": A},
        [{"id": "p", "action": {"requirement_map": {"claude-opus": "glm-5.3"}}}],
        "ok",
        "sha256:7d65c7c156122ed9154671e638de9d608bd5c55ae31c91b9fa043f999d88511d",
        id="dishonest-literal-family-mapping",
    ),
    pytest.param(
        {"accounts": A},
        [],
        "corrupt",
        "sha256:4f0fbf999d8b6e53f49916809a02de7a39312b6f1972c8e4210bb5462702e015",
        id="snapshot-unavailable",
    ),
]


@pytest.mark.parametrize(("ctx_doc", "policy_docs", "state", "expected"), PINNED)
def test_pinned_decision_ids_are_unchanged(
    ctx_doc: dict[str, Any], policy_docs: list[dict[str, Any]], state: str, expected: str
) -> None:
    snapshot = PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in policy_docs], revision=7)
    decision = explain(RouteContext.from_dict(ctx_doc), snapshot, snapshot_state=state)
    assert decision.decision_id == expected
