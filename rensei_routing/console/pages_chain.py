"""The audit and decision pages: the chain paged newest first, each record pretty-printed, the
stored checkpoints with their verification state; and one recorded decision explained as
``rensei explain`` explains it (the core's ``decision_lines``), with the policies considered,
the accounts, and for a shadow record the legacy route and mechanism that ran.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ..core.audit.chain import AuditRecord
from ..core.audit.hydraflow import imported_payload
from ..core.routing.decision import RouteDecision
from ..core.routing.explain_text import decision_lines
from ..core.shadow.compare import ShadowDecision, is_shadow_payload
from ..errors import CheckpointFormatError, InputError, NotFoundError, TraceUnavailableError
from ..ops.rederive import full_trace, is_full
from ..ops.replay import Sources
from ..store.audit import AuditLog
from .context import Console, NotFound, Query, int_param
from .html import esc, link, num, page, table, url
from .verdict import chain_banner, chain_state, checkpoint_state

__all__ = ["audit_page", "decision_page"]

#: Records per audit page.
PAGE: Final = 25


def _pretty(record: AuditRecord) -> str:
    try:
        return json.dumps(record.payload, indent=2, sort_keys=True, ensure_ascii=False)
    except InputError as e:
        return f"(payload does not read: {e})\n{record.payload_bytes[:2000]!r}"


def audit_page(c: Console, q: Query) -> bytes:
    """The chain, newest first, :data:`PAGE` records a page (``before`` = a seq)."""
    before = int_param(q, "before")
    with AuditLog.open(c.home, read_only=True) as log:
        head = log.head()
        stop = head[0] if before is None else min(before, head[0])
        records = list(log.records(start=max(0, stop - PAGE), stop=stop, newest_first=True))
        try:
            checkpoints: tuple[Any, ...] = log.checkpoints()
            cp_error = None
        except CheckpointFormatError as e:
            checkpoints, cp_error = (), str(e)
    status, text = chain_state(c, head)
    parts = [
        f'<div class="banner {status}" id="chain-banner">Audit chain: '
        f'<span id="chain-status">{esc(status)}</span> · {esc(text)}</div>',
        "<h2>Checkpoints</h2>",
    ]
    if cp_error:
        parts.append(
            f'<div class="banner fail">A stored checkpoint does not read: {esc(cp_error)}</div>'
        )
    if checkpoints:
        rows = []
        for cp in reversed(checkpoints):
            state = checkpoint_state(c, cp, head)
            rows.append(
                [
                    num(cp.size),
                    esc(cp.head_hash),
                    f'<span class="status {state.status}">{esc(state.text)}</span>',
                ]
            )
        parts.append(
            table(
                ["records", "head hash", "verification"], rows, tid="checkpoints", numeric_from=99
            )
        )
    elif not cp_error:
        parts.append("<p>No checkpoint stored (<code>rensei audit checkpoint</code>).</p>")
    parts.append(f"<h2>Records {num(head[0])} in all</h2>")
    items = []
    for r in records:
        items.append(
            f'<details class="record" id="record-{r.seq}"><summary>'
            f"{link(f'/decision/{r.seq}', f'seq {r.seq}')} · {esc(r.recorded_at)} · "
            f"{esc(r.record_hash[:23])}…</summary><pre>{esc(_pretty(r))}</pre></details>"
        )
    parts.append("".join(items) or "<p>The chain is empty.</p>")
    pager = []
    if before is not None:
        pager.append(link("/audit", "newest"))
    if records and records[-1].seq > 0:
        pager.append(link(url("/audit", before=records[-1].seq), "older →", cls="older"))
    parts.append(f'<div class="pager">{"".join(pager)}</div>')
    return page("Audit", "/audit", "".join(parts))


def _decision_of(record: AuditRecord) -> tuple[RouteDecision, ShadowDecision | None]:
    payload = imported_payload(record.payload)
    where = f"audit[{record.seq}]"
    if is_shadow_payload(payload):
        shadow = ShadowDecision.from_dict(payload, path=where, redacted=True)
        return shadow.proposed, shadow
    return RouteDecision.from_dict(payload, path=where, redacted=True), None


def _with_full_trace(
    c: Console, record: AuditRecord, decision: RouteDecision
) -> tuple[RouteDecision, str]:
    """The decision with its full trace, re-derived as ``rensei audit show SEQ --full`` does
    when the record stores the compact one, and a note saying so (or why it could not be)."""
    if is_full(decision.to_dict()["explanation"]):
        return decision, ""
    try:
        found = full_trace(
            imported_payload(record.payload),
            Sources(c.home, vocabulary=c.vocabulary),
            where=f"record {record.seq}",
            vocabulary=c.vocabulary,
        )
    except TraceUnavailableError as e:
        return decision, f"The record stores the compact explanation; {e}."
    return found.decision, (
        "Full trace re-derived from the stored context against policy revision "
        f"{found.revision} (the record stores the compact explanation)."
    )


def decision_page(c: Console, q: Query, seq: int) -> bytes:
    """One recorded decision, explained."""
    with AuditLog.open(c.home, read_only=True) as log:
        try:
            record = log.get(seq)
        except NotFoundError as e:
            raise NotFound(str(e)) from e
    parts = [chain_banner(c)]
    try:
        decision, shadow = _decision_of(record)
    except InputError as e:
        parts.append(
            f'<p id="not-a-decision">Record {seq} holds no readable decision: {esc(e)}</p>'
            f"<pre>{esc(_pretty(record))}</pre>"
        )
        return page(f"Record {seq}", "/audit", "".join(parts))
    facts = [
        ("seq", str(seq)),
        ("recorded", esc(record.recorded_at)),
        ("decision id", f'<span id="decision-id">{esc(decision.decision_id)}</span>'),
    ]
    parts.append(
        '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"
    )
    decision, trace_note = _with_full_trace(c, record, decision)
    parts.append("<h2>Explanation</h2>")
    if trace_note:
        parts.append(f'<p id="trace-note">{esc(trace_note)}</p>')
    hint = f"rensei audit show {seq} --full"
    lines = decision_lines(decision, full_hint=f"{hint} lists them")
    parts.append(f'<pre id="explanation">{esc(chr(10).join(lines))}</pre>')
    if shadow is not None:
        a = shadow.actual
        route = [
            ("seam", shadow.seam),
            ("provider", a.provider),
            ("binding", a.provider_binding),
            ("account", a.account_id or "-"),
            ("model", a.model or "-"),
            ("mechanism", a.mechanism + (f" ({a.mechanism_detail})" if a.mechanism_detail else "")),
            ("transport", a.transport),
            ("divergence", shadow.divergence),
        ]
        parts.append("<h2>Legacy route (what ran)</h2>")
        parts.append(
            table(
                ["field", "value"],
                ([esc(k), esc(v)] for k, v in route),
                tid="legacy",
                numeric_from=99,
            )
        )
    ex = decision.explanation
    if ex.considered:
        parts.append("<h2>Policies considered</h2>")
        parts.append(
            table(
                ["policy", "rung", "priority", "reason"],
                (
                    [esc(p.policy_id), str(p.precedence_level), str(p.priority), esc(p.reason)]
                    for p in ex.considered
                ),
                tid="considered",
                numeric_from=99,
            )
        )
    if ex.eligible_account_ids or ex.rejected_accounts:
        parts.append("<h2>Accounts</h2>")
        rows = [
            [esc(a), "eligible" + (" (chosen)" if a == decision.account_id else "")]
            for a in ex.eligible_account_ids
        ]
        rows += [[esc(r.account_id), esc(r.reason)] for r in ex.rejected_accounts]
        parts.append(table(["account", "verdict"], rows, tid="accounts", numeric_from=99))
    parts.append(
        f"<details><summary>Stored record</summary><pre>{esc(_pretty(record))}</pre></details>"
    )
    return page(f"Decision at seq {seq}", "/divergences", "".join(parts))
