"""The enforced decision record written directly (``encode_decision_record``: the decision's
own canonical bytes spliced into the envelope's, the redaction pre-check answered string by
string from a memo kept across calls) is byte for byte the plain path's:
``encode_payload(decision_record(...))``, whatever the decision, the envelope and the
credentials anywhere in them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.enforce.records import decision_record, encode_decision_record
from rensei_routing.core.redact import DEFAULT_REDACTOR
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.decision import STATE_CORRUPT, STATE_OK
from rensei_routing.core.routing.ids import ScanMemo
from rensei_routing.core.routing.policy import PolicySnapshot, RoutingPolicy
from rensei_routing.core.routing.resolver import explain
from rensei_routing.errors import CanonicalEncodingError

from .strategies import MODELS, PRINCIPALS, REPOS, context_dicts, policy_dicts

_SECRETS = ["ghp_" + "a1" * 18, "password=hunter2", "sk-ant-api03-abc123"]
_SEAMS = ["hydraflow", "claude-code", "caf\u00e9"]
#: A credential or a lone surrogate (the revision's odd value: an integer beyond 2**53 - 1).
_ODD = [*_SECRETS, "\ud800"]
_ANSWERS = ["enforced", "legacy-compatible", "held", "rejected"]
_STAMPS = ["2026-02-03T04:05:06.000007Z", "2026-12-31T23:59:59.999999Z"]


@st.composite
def _envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """The envelope's fields: often the decision's own (left out of the record), sometimes
    not; at most one of them a credential (or, rarely, a value with no canonical form)."""
    fields = {
        "recorded_at": draw(st.sampled_from(_STAMPS)),
        "seam": draw(st.sampled_from(_SEAMS)),
        "principal_id": draw(st.sampled_from([None, *PRINCIPALS])),
        "repo": draw(st.sampled_from(REPOS)),
        "answer": draw(st.sampled_from(_ANSWERS)),
        "provider": draw(st.sampled_from(["gateway", "gateway", "anthropic"])),
        "account_id": draw(st.sampled_from([None, "anthropic-a", "zai-a"])),
        "model": draw(st.sampled_from([None, *MODELS])),
        "revision": draw(st.sampled_from([3, 3, 4, 2**53 - 1])),
        "policy_hash": draw(st.sampled_from(["sha256:" + "0" * 64, "sha256:" + "1" * 64])),
    }
    if draw(st.integers(0, 3)) == 0:
        odd = draw(st.sampled_from(sorted(fields)))
        fields[odd] = 2**53 if odd == "revision" else draw(st.sampled_from(_ODD))
    return fields


@settings(max_examples=300, deadline=None)
@given(
    st.lists(policy_dicts(), max_size=4),
    st.lists(st.tuples(context_dicts(), _envelopes(), st.booleans()), min_size=1, max_size=5),
    st.sampled_from(["compact", "full"]),
    st.sampled_from([None, *_SECRETS]),
)
def test_the_direct_record_is_the_plain_records_bytes(
    policies: list[dict[str, Any]],
    cases: list[tuple[dict[str, Any], dict[str, Any], bool]],
    trace: Any,
    secret: str | None,
) -> None:
    snapshot = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(p) for p in policies), revision=3)
    memo = ScanMemo(DEFAULT_REDACTOR)  # one memo across the calls, as an Enforcer keeps it
    for i, (context, fields, own) in enumerate(cases):
        if secret is not None and i == 0:
            context = {**context, "role": None, "principal_id": secret}
        decision = explain(
            RouteContext.from_dict(context),
            snapshot if i % 2 == 0 else PolicySnapshot.empty(),
            snapshot_state=STATE_OK if i % 2 == 0 else STATE_CORRUPT,
            trace=trace,
        )
        if own:  # the envelope as the Enforcer mostly writes it: the decision's own values
            fields = {
                **fields,
                "principal_id": decision.explanation.context.principal_id,
                "revision": decision.policy_revision,
                "policy_hash": decision.snapshot_hash,
                "account_id": decision.account_id,
                "model": decision.effective_model,
            }
        plain = _outcome(encode_payload, decision_record(decision=decision, **fields))
        assert _outcome(encode_decision_record, memo, decision=decision, **fields) == plain
        assert _outcome(encode_decision_record, None, decision=decision, **fields) == plain


def _outcome(encode: Any, *args: Any, **kw: Any) -> Any:
    """What ``encode`` returns with the default redactor, or the type of what it raises (a
    value with no canonical form: an integer beyond 2**53 - 1, a lone surrogate)."""
    args = (*args, DEFAULT_REDACTOR) if encode is encode_payload else (DEFAULT_REDACTOR, *args)
    try:
        return encode(*args, **kw)
    except CanonicalEncodingError as e:
        return type(e)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(policy_dicts(), max_size=3),
    context_dicts(),
    st.sampled_from(_ANSWERS),
    st.sampled_from([None, "anthropic-a", "zai-a", "other"]),
    st.sampled_from([None, *MODELS[:2], "other"]),
)
def test_the_route_the_answer_implies_is_left_out_alike(
    policies: list[dict[str, Any]],
    context: dict[str, Any],
    answer: str,
    account_id: str | None,
    model: str | None,
) -> None:
    """The route members an answer implies (the decision's account and model, or the legacy
    route's) are left out of both records alike, whichever answer and route are written."""
    context = {
        **context,
        "legacy_route": {"provider_binding": "gateway", "account_id": "zai-a", "model": MODELS[0]},
    }
    snapshot = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(p) for p in policies), revision=3)
    decision = explain(RouteContext.from_dict(context), snapshot)
    fields: dict[str, Any] = {
        "recorded_at": _STAMPS[0],
        "seam": "hydraflow",
        "principal_id": decision.explanation.context.principal_id,
        "repo": "acme/widgets",
        "answer": answer,
        "provider": "gateway",
        "account_id": account_id,
        "model": model,
        "revision": 3,
        "policy_hash": decision.snapshot_hash,
    }
    plain = encode_payload(decision_record(decision=decision, **fields), DEFAULT_REDACTOR)
    memo = ScanMemo(DEFAULT_REDACTOR)
    assert encode_decision_record(DEFAULT_REDACTOR, memo, decision=decision, **fields) == plain
