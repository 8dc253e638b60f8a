"""The what-if replay (``shadow.whatif.compare_chain``) against the plain computation it
shortens: every record's payload parsed whole, its context read by the document readers,
explained once per revision with ``explain`` and counted as :class:`Verdict` pairs. The replay
keys a cache by the stored text, reads stored contexts piece by piece, explains through two
streams and counts plain verdict rows; its summary must be the plain one's, field for field
(counts, matrix, examples and their decision ids), over generated chains."""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rensei_routing.shadow.whatif as replay
from rensei_routing import PolicySnapshot, RouteContext, explain
from rensei_routing.core.redact import MARKER_PREFIX
from rensei_routing.core.routing.context import quick_context
from rensei_routing.core.routing.policy import RoutingPolicy
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.core.shadow.compare import ActualRoute, shadow_decision
from rensei_routing.core.shadow.whatif import Verdict, WhatIf, WhatIfSummary, verdict_row
from rensei_routing.errors import InputError
from rensei_routing.shadow.whatif import compare_chain, context_of, recorded_since
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from .strategies import context_dicts, policy_dicts

EARLY = "2026-01-01T00:00:00.000000Z"
LATE = "2026-01-02T00:00:00.000000Z"
ACTUAL = ActualRoute(
    provider="claude",
    provider_binding="anthropic",
    mechanism="default",
    transport="harness-direct",
)
#: A context whose stored form holds a redaction marker (the AWS access-key pattern matches).
REDACTED = {"repo": "globex/asiapacificbilling01", "principal_id": "planner"}
_POLICY_SETS = st.lists(policy_dicts(ids=[f"p{i}" for i in range(8)]), max_size=8)


def _snapshot(docs: list[dict[str, Any]], revision: int) -> PolicySnapshot:
    return PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=revision)


def _plain(
    log: AuditLog,
    current: tuple[PolicySnapshot, str],
    candidate: PolicySnapshot,
    *,
    since: dt.datetime | None = None,
    limit: int | None = None,
    examples: int = 3,
) -> tuple[WhatIfSummary, list[int]]:
    """The summary and the skipped seqs, computed the plain way."""
    acc = WhatIf(examples=examples)
    skipped: list[int] = []
    taken = 0
    for record in log.records(newest_first=limit is not None):
        if limit is not None and taken >= limit:
            break
        if not recorded_since(record, since):
            continue
        try:
            doc = context_of(record.payload)
            if doc is None:
                raise InputError("no context")
            ctx = quick_context(doc, DEFAULT_VOCABULARY) or RouteContext.from_dict(
                doc, redacted=True
            )
        except InputError:
            skipped.append(record.seq)
            continue
        taken += 1
        before = explain(ctx, current[0], snapshot_state=current[1])
        after = explain(ctx, candidate)
        acc.add(record.seq, Verdict.of(before), Verdict.of(after))
    return acc.summary(), skipped


def _payloads(
    contexts: list[RouteContext], picks: list[tuple[int, int]], current: PolicySnapshot
) -> list[Any]:
    """Each pick's context recorded as a shadow record (compact), a plain decision (full
    trace), or a payload carrying no context."""
    out: list[Any] = []
    for index, form in picks:
        ctx = contexts[index % len(contexts)]
        if form == 0:
            proposed = explain(ctx, current, trace="compact")
            out.append(
                shadow_decision(
                    recorded_at=EARLY,
                    seam="agentic-runner",
                    principal_id=ctx.principal_id,
                    actual=ACTUAL,
                    proposed=proposed,
                )
            )
        elif form == 1:
            out.append(explain(ctx, current, trace="full"))
        else:
            out.append({"note": f"no context {index}"})
    return out


@settings(max_examples=60, deadline=None)
@given(
    _POLICY_SETS,
    _POLICY_SETS,
    st.sampled_from(["ok", "absent", "corrupt"]),
    st.lists(context_dicts(), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 12), st.sampled_from([0, 0, 1, 1, 2])), max_size=30),
    st.booleans(),
)
def test_the_replay_summarises_as_the_plain_computation(
    current_docs: list[dict[str, Any]],
    candidate_docs: list[dict[str, Any]],
    state: str,
    context_docs: list[dict[str, Any]],
    picks: list[tuple[int, int]],
    small_cache: bool,
) -> None:
    current = _snapshot(current_docs, 1)
    candidate = _snapshot(candidate_docs, 2)
    # Each drawn context beside one that differs in its last members only (face and role),
    # whose stored texts share all but their ends: the cache must tell them apart.
    near = [{**d, "request_face": "one-shot", "role": "reviewer"} for d in context_docs]
    contexts = [RouteContext.from_dict(d) for d in [*context_docs, *near, REDACTED]]
    payloads = _payloads(contexts, [*picks, (len(contexts) - 1, 0)], current)
    half = len(payloads) // 2
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        if small_cache:  # every few contexts the cache drops its oldest entries
            patch.setattr(replay, "CACHE_SIZE", 2)
        home = Home(Path(tmp) / "home")
        home.init()
        with AuditLog.open(home) as log:
            log.append_many(payloads[:half], recorded_at=EARLY)
            log.append_many(payloads[half:], recorded_at=LATE)
            stored = [r.payload_bytes for r in log.records()]
            assert any(MARKER_PREFIX.encode() in b for b in stored)  # the marker is stored
            late = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
            for since, limit in ((None, None), (late, None), (None, 3), (None, 0)):
                seen: list[int] = []
                got = compare_chain(
                    log, (current, state), candidate, since=since, limit=limit, skipped=seen.append
                )
                want, skipped = _plain(log, (current, state), candidate, since=since, limit=limit)
                assert got == want, (since, limit)
                assert seen == skipped, (since, limit)


def test_a_verdict_row_holds_the_verdicts_fields() -> None:
    ctx = RouteContext.from_dict({"repo": "acme/widgets", "principal_id": "planner"})
    decision = explain(ctx, PolicySnapshot.empty())
    assert verdict_row(decision) == Verdict.of(decision).row()
    acc, rows = WhatIf(), WhatIf()
    acc.add(0, Verdict.of(decision), Verdict.of(decision))
    rows.add_row(0, verdict_row(decision), verdict_row(decision))
    assert acc.summary() == rows.summary()
