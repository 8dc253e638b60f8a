"""Issue 14 item 2: a stored decision id is no guessing oracle for a redacted secret.

The id is computed over the redacted fields, so a decision recorded through the real audit log
(apsw, a file under ``tmp_path``) carries an id recomputable from the stored record, and two
decisions that differ only in a redacted secret store the very same bytes.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain, explain_batch
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.redact import (
    DEFAULT_PATTERNS,
    DEFAULT_REDACTOR,
    RedactionPattern,
    Redactor,
)
from rensei_routing.core.routing.ids import ID_FIELDS, ScanMemo, decision_id, record_decision_id
from rensei_routing.errors import MalformedError
from rensei_routing.store.audit import AuditLog

from .strategies import context_dicts, policy_dicts

RECORDED_AT = "2026-01-02T03:04:05.000000Z"
TOKEN_A = "ghp_" + "A1b2C3d4" * 5
TOKEN_B = "ghp_" + "Z9y8X7w6" * 5

POLICIES = PolicySnapshot.of(
    [
        RoutingPolicy.from_dict({"id": "global", "priority": 1}),
        RoutingPolicy.from_dict(
            {"id": "widgets", "match": {"repo_ids": ["acme/widgets"]}, "action": {}}
        ),
    ],
    revision=4,
)


def _ctx(secret: str, where: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "repo": "acme/widgets",
        "principal_id": "implementer",
        "model_requirement": "balanced",
        "accounts": [{"account_id": "anth-1", "provider_binding": "anthropic"}],
    }
    if where == "principal":
        doc["principal_id"] = f"svc password='{secret}'"
    elif where == "repo":
        doc["repo"] = f"acme/{secret}"
    elif where == "account":
        doc["accounts"] = [{"account_id": f"zz-{secret}", "provider_binding": "anthropic"}]
    elif where == "requirement":
        doc["model_requirement"] = {"kind": "concrete_model", "value": secret}
    return doc


def _oracle(stored: dict[str, Any]) -> str:
    """The documented id, recomputed from a stored record without the library's helper."""
    preimage = {name: stored[name] for name in ID_FIELDS if name != "context"}
    preimage["context"] = stored["explanation"]["context"]
    return "sha256:" + hashlib.sha256(canonical_bytes(preimage)).hexdigest()


def _record(tmp_path: Path, name: str, ctx_doc: dict[str, Any], **kw: Any) -> dict[str, Any]:
    redactor = kw.pop("redactor", DEFAULT_REDACTOR)
    decision = explain(RouteContext.from_dict(ctx_doc), POLICIES, redactor=redactor, **kw)
    with AuditLog(
        tmp_path / f"{name}.db", origin="rensei-routing/t/audit", redactor=redactor
    ) as log:
        rec = log.append(decision, recorded_at=RECORDED_AT)
        stored = log.get(rec.seq)
    assert stored.payload_bytes == rec.payload_bytes
    payload: dict[str, Any] = stored.payload
    return payload


SECRET_PLACES = [
    pytest.param(TOKEN_A, TOKEN_B, "principal", id="principal-token"),
    pytest.param("hunter22", "letmein9", "principal", id="principal-low-entropy-password"),
    pytest.param(TOKEN_A, TOKEN_B, "repo", id="repo"),
    pytest.param(TOKEN_A, TOKEN_B, "account", id="account-id"),
    pytest.param(TOKEN_A, TOKEN_B, "requirement", id="concrete-model-id"),
]


@pytest.mark.parametrize(("secret_a", "secret_b", "where"), SECRET_PLACES)
def test_stored_id_is_recomputable_and_no_stored_byte_depends_on_the_secret(
    tmp_path: Path, secret_a: str, secret_b: str, where: str
) -> None:
    first = _record(tmp_path, "a", _ctx(secret_a, where))
    second = _record(tmp_path, "b", _ctx(secret_b, where))
    text = canonical_bytes(first).decode()
    assert secret_a not in text and "[REDACTED:" in text
    # Recomputable from what is stored, by the documented formula and by the library helper.
    assert first["decision_id"] == _oracle(first) == record_decision_id(first)
    # Two different secrets: the same stored record, id included, byte for byte.
    assert canonical_bytes(first) == canonical_bytes(second)


def test_the_in_memory_decision_already_carries_the_stored_id(tmp_path: Path) -> None:
    ctx = RouteContext.from_dict(_ctx(TOKEN_A, "principal"))
    decision = explain(ctx, POLICIES)
    assert decision.decision_id == _record(tmp_path, "a", _ctx(TOKEN_A, "principal"))["decision_id"]
    # The unredacted preimage would have given another id: that is the oracle that is gone.
    raw = {name: getattr(decision, name, None) for name in ID_FIELDS if name != "context"}
    raw["context"] = ctx.to_dict()
    assert decision.decision_id != "sha256:" + hashlib.sha256(canonical_bytes(raw)).hexdigest()
    assert [d.decision_id for d in explain_batch([ctx], POLICIES)] == [decision.decision_id]


def test_a_context_with_nothing_to_redact_keeps_the_plain_digest() -> None:
    ctx = RouteContext.from_dict(_ctx("", "none"))
    decision = explain(ctx, POLICIES)
    raw = {name: getattr(decision, name) for name in ID_FIELDS if name != "context"}
    raw["context"] = ctx.to_dict()
    assert decision.decision_id == "sha256:" + hashlib.sha256(canonical_bytes(raw)).hexdigest()


def test_a_gate_hit_with_nothing_to_redact_gives_the_plain_digest() -> None:
    # "monkey" and "tokenizer" trip the cheap gates ("key", "token") but no pattern matches.
    ctx = RouteContext.from_dict({"principal_id": "monkey-tokenizer"})
    fields: dict[str, Any] = {
        "snapshot_hash": "sha256:" + "0" * 64,
        "snapshot_state": "ok",
        "policy_revision": 0,
        "outcome": "held",
        "reason": "no-legacy-route",
        "policy_id": None,
        "account_id": None,
        "effective_model": None,
    }
    assert DEFAULT_REDACTOR.might_match(ctx.canonical().decode())
    raw = {**fields, "context": ctx.to_dict()}
    assert (
        decision_id(ctx, **fields) == "sha256:" + hashlib.sha256(canonical_bytes(raw)).hexdigest()
    )


ACME = RedactionPattern("acme-ticket", re.compile(r"ACME-[0-9]{6}", re.ASCII), ("acme-",))
EXTENDED = Redactor((*DEFAULT_PATTERNS, ACME))


def test_a_host_with_an_extended_redactor_computes_ids_with_it(tmp_path: Path) -> None:
    doc_a, doc_b = _ctx("", "none"), _ctx("", "none")
    doc_a["principal_id"], doc_b["principal_id"] = "ACME-123456", "ACME-654321"
    default_a = explain(RouteContext.from_dict(doc_a), POLICIES)
    default_b = explain(RouteContext.from_dict(doc_b), POLICIES)
    assert default_a.decision_id != default_b.decision_id  # the default redactor keeps them
    stored_a = _record(tmp_path, "a", doc_a, redactor=EXTENDED)
    stored_b = _record(tmp_path, "b", doc_b, redactor=EXTENDED)
    assert canonical_bytes(stored_a) == canonical_bytes(stored_b)
    assert stored_a["decision_id"] == record_decision_id(stored_a, redactor=EXTENDED)
    assert stored_a["decision_id"] == _oracle(stored_a)


def test_record_decision_id_refuses_a_record_without_the_fields() -> None:
    with pytest.raises(MalformedError):
        record_decision_id({"outcome": "held"})
    with pytest.raises(MalformedError):
        record_decision_id(["not", "a", "record"])
    decision = explain(RouteContext.from_dict(_ctx("", "none")), POLICIES).to_dict()
    del decision["reason"]
    with pytest.raises(MalformedError):
        record_decision_id(decision)


# -- The batch's per-string pre-check gives the id one scan of the whole preimage gives -----

SUSPECTS = [
    TOKEN_A,
    "svc password='hunter22'",
    "monkey",  # trips a gate ("key"), redacts nothing
    "sk-ant-" + "q" * 30,
    "AKIAIOSFODNN7EXAMPLE",
    "plain",
]
PLACES = [
    "principal_id",
    "repo",
    "legacy_account",
    "legacy_model",
    "legacy_detail",
    "account",
    "model",
]
SHARED_MEMO = ScanMemo(DEFAULT_REDACTOR)  # shared across examples, so hits are exercised too


@settings(max_examples=300, deadline=None)
@given(context_dicts(), st.sampled_from(SUSPECTS), st.sampled_from(PLACES))
def test_the_memo_path_equals_the_whole_preimage_scan(
    doc: dict[str, Any], suspect: str, place: str
) -> None:
    if place == "principal_id":
        doc["principal_id"] = suspect
    elif place == "repo":
        doc["repo"] = f"acme/{suspect}" if suspect.isascii() else suspect
    elif place.startswith("legacy"):
        legacy = doc["legacy_route"] or {"provider_binding": "zai"}
        legacy[
            {"legacy_account": "account_id", "legacy_model": "model"}.get(place, "mechanism_detail")
        ] = suspect
        doc["legacy_route"] = legacy
    elif place == "account":
        doc["accounts"] = [
            *doc["accounts"],
            {"account_id": suspect, "provider_binding": "anthropic"},
        ]
    else:
        doc["model_requirement"] = {"kind": "concrete_model", "value": suspect}
    ctx = RouteContext.from_dict(doc)
    decision = explain(ctx, POLICIES)
    fields: dict[str, Any] = {
        name: getattr(decision, name) for name in ID_FIELDS if name != "context"
    }
    whole = decision_id(ctx, **fields)  # one scan of the preimage text, no memo
    memo = decision_id(ctx, **fields, memo=SHARED_MEMO)
    oracle = (
        "sha256:"
        + hashlib.sha256(
            canonical_bytes(DEFAULT_REDACTOR.redact({**fields, "context": ctx.to_dict()}))
        ).hexdigest()
    )
    assert decision.decision_id == whole == memo == oracle


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


@settings(max_examples=150)
@given(
    st.lists(policy_dicts(), max_size=7),
    context_dicts(),
    st.sampled_from(["full", "compact"]),
    st.booleans(),
)
def test_record_keys_hold_every_key_a_stamped_record_can_have(
    docs: list[dict[str, Any]], ctx_doc: dict[str, Any], trace: Any, stale: bool
) -> None:
    # The keys a record_may_redact answer skips: a key missing here would be one a plugin's
    # pattern could match without the pre-check noticing.
    from rensei_routing.core.routing.ids import RECORD_KEYS
    from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision

    snapshot = PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=2)
    decision = explain(RouteContext.from_dict(ctx_doc), snapshot, trace=trace)
    stamp = Freshness(ruleset_rev="r2", age_ms=90_000, degraded=True) if stale else Freshness.live()
    keys = _keys(StampedDecision(decision, stamp).to_dict())
    assert keys <= set(RECORD_KEYS), keys - set(RECORD_KEYS)


# -- A record's decision id is checked apart from the memo, by the triggers an id can hold ----


def _every_piece_may_redact(scan: ScanMemo, decision: Any, rev: str | None) -> bool:
    """The record pre-check with the id as one more memoised piece (the plain path)."""
    from rensei_routing.core.routing.ids import RECORD_KEYS

    if scan.may_redact((" ".join(RECORD_KEYS),)):
        return True
    ex = decision.explanation
    fields = (
        decision.decision_id,
        decision.outcome,
        decision.reason,
        decision.policy_source,
        decision.policy_id,
        decision.snapshot_hash,
        decision.snapshot_state,
        decision.account_id,
        decision.provider_binding,
        decision.effective_model,
        rev,
    )
    return scan.preimage_may_redact(ex.context, fields) or scan.may_redact(
        (
            *(c.policy_id for c in ex.considered),
            *(c.reason for c in ex.considered),
            *ex.eligible_account_ids,
            *(r.account_id for r in ex.rejected_accounts),
            *(r.reason for r in ex.rejected_accounts),
            *ex.conflicting_policy_ids,
        )
    )


_HEX = "0123456789abcdef"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(context_dicts(), min_size=1, max_size=6),
    st.lists(st.text(alphabet=_HEX + "sha:x", min_size=1, max_size=3), max_size=3),
    st.booleans(),
    st.sampled_from(["full", "compact"]),
)
def test_the_record_pre_check_answers_as_every_piece_scanned(
    docs: list[dict[str, Any]], triggers: list[str], untriggered: bool, trace: Any
) -> None:
    # Triggers made of the characters of an id ("acca" is a default one) must still be found
    # in it; a pattern without triggers makes every text suspect.
    extra = tuple(
        RedactionPattern(f"hex-{i}", re.compile(re.escape(t)), (t,)) for i, t in enumerate(triggers)
    )
    if untriggered:
        extra += (RedactionPattern("any", re.compile("ACME-[0-9]{6}")),)
    redactor = Redactor(patterns=DEFAULT_PATTERNS + extra)
    fast, plain = ScanMemo(redactor), ScanMemo(redactor)
    for doc in docs:
        decision = explain(RouteContext.from_dict(doc), POLICIES, trace=trace)
        for rev in (None, "bench@1"):
            assert fast.record_may_redact(decision, rev) == _every_piece_may_redact(
                plain, decision, rev
            ), (decision.decision_id, triggers)


def test_an_id_holding_a_hex_trigger_is_suspect() -> None:
    decision = explain(RouteContext.from_dict(_ctx("", "none")), POLICIES)
    hexes = decision.decision_id.removeprefix("sha256:")
    text = str(decision.to_dict())  # the snapshot hash is hex too
    inside = hexes[10:14]
    outside = next(
        t for t in (a + b + c for a in _HEX for b in _HEX for c in _HEX) if t not in text
    )
    for trigger, suspect in ((inside, True), (outside, False)):
        pattern = RedactionPattern("hex", re.compile(re.escape(trigger)), (trigger,))
        redactor = Redactor(patterns=(*DEFAULT_PATTERNS, pattern))
        assert ScanMemo(redactor).record_may_redact(decision, None) is suspect
