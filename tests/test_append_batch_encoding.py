"""``append_many``'s batch encoding (issue 21, core/audit/chain.py ``encode_payloads``): decisions
and shadow records answer the redaction pre-check from their strings through one memo per batch,
and what is stored is exactly what ``encode_payload`` stores for each, secrets redacted."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain
from rensei_routing.core.audit.chain import encode_payload, encode_payloads
from rensei_routing.core.redact import (
    DEFAULT_PATTERNS,
    DEFAULT_REDACTOR,
    RedactionPattern,
    Redactor,
)
from rensei_routing.core.shadow.compare import ActualRoute, shadow_decision
from rensei_routing.store.audit import AuditLog

T0 = "2026-01-02T03:04:05.000000Z"
TOKEN = "ghp_" + "A1b2C3d4" * 5
POLICIES = PolicySnapshot.of(
    [
        RoutingPolicy.from_dict({"id": "global", "priority": 1}),
        RoutingPolicy.from_dict(
            {"id": "widgets", "match": {"repo_ids": ["acme/widgets"]}, "action": {}}
        ),
    ],
    revision=4,
)
PLACES = ("clean", "principal", "repo", "account", "requirement")


def _ctx(where: str, i: int) -> RouteContext:
    doc: dict[str, Any] = {
        "repo": "acme/widgets",
        "principal_id": f"implementer-{i % 3}",
        "model_requirement": "balanced",
        "accounts": [{"account_id": "anth-1", "provider_binding": "anthropic"}],
    }
    if where == "principal":
        doc["principal_id"] = f"svc password='hunter{i}2'"
    elif where == "repo":
        doc["repo"] = f"acme/{TOKEN}"
    elif where == "account":
        doc["accounts"] = [{"account_id": f"zz-{TOKEN}", "provider_binding": "anthropic"}]
    elif where == "requirement":
        doc["model_requirement"] = {"kind": "concrete_model", "value": TOKEN}
    return RouteContext.from_dict(doc)


def _decisions(redactor: Redactor = DEFAULT_REDACTOR) -> list[Any]:
    return [
        explain(_ctx(where, i), POLICIES, redactor=redactor) for i in range(4) for where in PLACES
    ]


def _shadow(decisions: list[Any]) -> list[Any]:
    out = []
    for i, d in enumerate(decisions):
        secret = i % 4 == 1
        actual = ActualRoute(
            provider="anthropic",
            provider_binding="anthropic",
            account_id=f"acct {TOKEN}" if secret else "anth-1",
            model="claude-sonnet-4" if i % 4 != 2 else f"m-{TOKEN}",
            mechanism="env",
            transport="direct-http" if i % 4 != 3 else f"t password='p{i}w0rd'",
        )
        out.append(
            shadow_decision(recorded_at=T0, seam="s", principal_id=None, actual=actual, proposed=d)
        )
    return out


@pytest.mark.parametrize("kind", ["decisions", "shadow", "mixed"])
def test_batch_encoding_is_encode_payload_of_each(kind: str) -> None:
    decisions = _decisions()
    batch: list[Any] = {
        "decisions": decisions,
        "shadow": _shadow(decisions),
        "mixed": [*decisions, *_shadow(decisions), {"plain": TOKEN}, {"n": 1}],
    }[kind]
    encoded = encode_payloads(batch)
    assert encoded == [encode_payload(p) for p in batch]
    assert not any(TOKEN.encode() in e for e in encoded)
    assert not any(b"hunter" in e for e in encoded)


def test_a_plugin_pattern_applies_through_the_batch_memo() -> None:
    """A redactor extended with a pattern of its own: the memo asks that redactor."""
    extra = RedactionPattern("internal", re.compile(r"internal-[0-9]{4}"), ("internal-",))
    redactor = Redactor((*DEFAULT_PATTERNS, extra), joint_from=len(DEFAULT_PATTERNS))
    decisions = [explain(_ctx("clean", i), POLICIES, redactor=redactor) for i in range(3)]
    actual = ActualRoute(
        provider="anthropic",
        provider_binding="anthropic",
        account_id="internal-1234",
        mechanism="env",
        transport="direct-http",
    )
    records = [
        shadow_decision(recorded_at=T0, seam="s", principal_id=None, actual=actual, proposed=d)
        for d in decisions
    ]
    encoded = encode_payloads(records, redactor)
    assert encoded == [encode_payload(r, redactor) for r in records]
    assert all(b"internal-1234" not in e for e in encoded)


def test_append_many_stores_the_redacted_bytes(tmp_path: Path) -> None:
    decisions = _decisions()
    batch = [*decisions, *_shadow(decisions)]
    with AuditLog(tmp_path / "a.db", origin="rensei-routing/t/audit") as log:
        result = log.append_many(batch, recorded_at=T0)
        stored = [r.payload_bytes for r in log.records()]
        assert log.verify()
    assert result.count == len(batch)
    assert stored == [encode_payload(p) for p in batch]
