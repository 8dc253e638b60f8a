"""A batch writes a decision's id from pieces it keeps: the hash state after the preimage's head
(account id, account entries, legacy route), copied and carried on over the question's piece
and the tail, with each piece checked once for anything the redactor might change. Each is
checked against the plain path: the general id writer with no memo over a fresh copy of the
context, under the default redactor and under redactors whose triggers hit one piece each
(those decisions take the general writer, which redacts)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain_batch
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.redact import DEFAULT_REDACTOR
from rensei_routing.core.routing import resolver
from rensei_routing.core.routing.ids import IdPieces, ScanMemo, id_head, id_question, id_tail
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY

from .strategies import context_dicts, plain_decision_id, policy_dicts, redactor_also

#: One redactor per piece of the preimage it hits: an account (head), a legacy route's model
#: and a requirement (head, question, tail), a repo (question), a reason (tail).
REDACTORS = [
    DEFAULT_REDACTOR,
    redactor_also("account", "zai-b"),
    redactor_also("sonnet", "sonnet"),
    redactor_also("repo", "gadgets"),
    redactor_also("draining", "draining"),
    redactor_also("reason", "matched-policy"),
]


def _snapshot(docs: list[dict[str, Any]]) -> PolicySnapshot:
    return PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=3)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(policy_dicts(), max_size=6),
    st.lists(context_dicts(), min_size=1, max_size=6),
    st.sampled_from(REDACTORS),
    st.sampled_from(["auto", "compact"]),
)
def test_batch_ids_equal_the_general_writer_under_any_redactor(docs, ctx_docs, redactor, trace):
    snapshot = _snapshot(docs)
    batch_docs = ctx_docs + ctx_docs[::-1]  # repeats: heads, questions and tails kept
    batched = explain_batch(
        [RouteContext.from_dict(d) for d in batch_docs], snapshot, redactor=redactor, trace=trace
    )
    for doc, d in zip(batch_docs, batched, strict=True):
        assert d.decision_id == plain_decision_id(doc, d, redactor)


@settings(deadline=None)
@given(
    context_dicts(),
    st.sampled_from([None, "anthropic-a", "zai-b"]),
    st.sampled_from([None, "claude-opus-4-1"]),
    st.sampled_from(["selected", "held"]),
    st.sampled_from([None, "p-1"]),
    st.integers(min_value=0, max_value=2**53 - 1),
    st.sampled_from(["ok", "absent", "corrupt"]),
)
def test_head_question_and_tail_make_the_preimage(
    doc, account_id, model, outcome, policy_id, revision, state
) -> None:
    ctx = RouteContext.from_dict(doc)
    accounts = ",".join(a.canonical_json() for a in ctx.accounts)
    legacy = "null" if ctx.legacy_route is None else ctx.legacy_route.canonical_json()
    text = (
        id_head(account_id, accounts, legacy)
        + id_question(ctx)
        + id_tail(model, outcome, policy_id, revision, "matched-policy", "sha256:00", state)
    )
    preimage = {
        "account_id": account_id,
        "context": ctx.to_dict(),
        "effective_model": model,
        "outcome": outcome,
        "policy_id": policy_id,
        "policy_revision": revision,
        "reason": "matched-policy",
        "snapshot_hash": "sha256:00",
        "snapshot_state": state,
    }
    assert text.encode("utf-8") == canonical_bytes(preimage)


def test_a_batch_hashes_each_head_once_and_redacts_what_a_piece_holds() -> None:
    """The fast path is taken (heads kept as hash states), and a head holding a trigger is
    kept as not clean, so its decisions' ids are the redacted preimage's."""
    snapshot = _snapshot([{"id": "all", "match": {}, "action": {}}])
    docs = [
        {
            "repo": "acme/widgets",
            "principal_id": "implementer",
            "accounts": [{"account_id": name, "provider_binding": "zai-harness"}],
        }
        for name in ("zai-a", "zai-b", "zai-a", "zai-b")
    ]
    redactor = REDACTORS[1]
    compiled, call = resolver._start(snapshot, "ok", DEFAULT_VOCABULARY, "compact", redactor)
    decisions = [
        resolver._resolve(RouteContext.from_dict(doc), snapshot, compiled, call) for doc in docs
    ]
    heads = {key[0]: head for key, head in call.ids.heads.items()}
    assert set(heads) == {"zai-a", "zai-b"}
    assert heads["zai-a"] is not False and heads["zai-b"] is False
    assert decisions[0].decision_id == decisions[2].decision_id
    assert decisions[1].decision_id == decisions[3].decision_id != decisions[0].decision_id
    for doc, d in zip(docs, decisions, strict=True):
        assert d.decision_id == plain_decision_id(doc, d, redactor)


#: Contexts that between them put each redactor's trigger in each piece it can reach.
_COVERING = [
    {
        "repo": repo,
        "principal_id": "implementer",
        "model_requirement": requirement,
        "legacy_route": legacy,
        "accounts": [
            {"account_id": "zai-b", "provider_binding": "zai-harness"},
            {"account_id": "anthropic-a", "provider_binding": "anthropic", **state},
        ],
    }
    for repo in ("acme/widgets", "acme/gadgets")
    for requirement in (None, "claude-sonnet")
    for legacy in (None, {"provider_binding": "anthropic", "model": "claude-sonnet-4-5"})
    for state in ({}, {"administrative_state": "draining"})
]


def test_each_piece_holding_a_trigger_takes_the_general_writer() -> None:
    snapshot = _snapshot(
        [
            {"id": "all", "match": {}, "action": {"requirement_map": []}},
            {
                "id": "gadgets",
                "match": {"repo_ids": ["acme/gadgets"]},
                "action": {"account_pool": ["anthropic-a", "zai-b"]},
            },
        ]
    )
    for redactor in REDACTORS:
        batched = explain_batch(
            [RouteContext.from_dict(d) for d in _COVERING * 2], snapshot, redactor=redactor
        )
        assert {d.reason for d in batched} >= {"matched-policy"}
        for doc, d in zip(_COVERING * 2, batched, strict=True):
            assert d.decision_id == plain_decision_id(doc, d, redactor), (redactor, doc)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([None, "claude-opus-4-1", 'we"ird\\model']),
            st.sampled_from(["selected", "held", "rejected"]),
            st.sampled_from([None, "p-1", "p-2", "p\u00e9-3"]),
            st.sampled_from(["matched-policy", "no-eligible-account"]),
            st.sampled_from([0, 7, 2**53 - 1]),
            st.sampled_from(["sha256:00", "sha256:" + "ab" * 32]),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(["ok", "absent", "corrupt"]),
)
def test_kept_tails_are_the_tail_text(keys, state) -> None:
    """A batch's tails, written from the kept text around each policy id, are :func:`id_tail`
    (the keys repeat their models, outcomes, reasons and snapshots across policies)."""
    pieces = IdPieces(ScanMemo(DEFAULT_REDACTOR), state)
    for key in keys:
        model, outcome, policy_id, reason, revision, snapshot_hash = key
        plain = id_tail(model, outcome, policy_id, revision, reason, snapshot_hash, state)
        assert pieces.tail(key) == plain.encode("utf-8")
