"""The enforcement page: every canary ever armed in this home (docs/enforcement.md), as ``rensei
enforce status`` reads them: the repository, armed, tripped or disarmed, the pinned revision and
whether the current revision is ahead of it, the gate verdict the arm rests on (its figures, and
for an override who and why), the trip rule and, for a tripped canary, why it tripped. Read-only:
the state comes through :func:`rensei_routing.enforce.status` (a read-only connection and a read
of the hint file), the verdict and trip records through a read-only audit log.
"""

from __future__ import annotations

from typing import Any

from ..core.audit.chain import AuditRecord
from ..core.timestamps import format_age
from ..enforce import status
from ..errors import InputError
from ..store.audit import AuditLog
from .context import Console, Query
from .html import esc, link, num, page, pct, table

__all__ = ["enforce_page"]


def _record(log: AuditLog, seq: int | None) -> dict[str, Any] | None:
    """The payload of the record at ``seq`` (``None`` when there is none or it does not read)."""
    if seq is None:
        return None
    found: list[AuditRecord] = list(log.records(start=seq, stop=seq + 1))
    if not found:
        return None
    try:
        payload = found[0].payload
    except InputError:
        return None
    return payload if isinstance(payload, dict) else None


def _state(row: dict[str, Any]) -> str:
    return f'<span class="state-{esc(row["state"])}">{esc(row["state"])}</span>'


def _revision(row: dict[str, Any]) -> str:
    text = esc(row["pinned_revision"])
    if row["ahead"]:
        text += (
            f' <span class="ahead">(current {esc(row["current_revision"])} is ahead: '
            "arm again to gate it)</span>"
        )
    return text


def _gate(row: dict[str, Any], verdict: dict[str, Any] | None) -> str:
    seq = row["gate_seq"]
    if verdict is None:
        return "-" if seq is None else link(f"/decision/{seq}", f"record {seq}")
    figures = verdict.get("figures") or {}
    failed = verdict.get("failed") or []
    text = f"{verdict.get('verdict', '?')}"
    if failed:
        text += f" ({', '.join(str(f) for f in failed)})"
    samples = figures.get("samples")
    if isinstance(samples, int):
        text += f": {num(samples)} spawns, revision {verdict.get('revision', '?')}"
    return f"{link(f'/decision/{seq}', text, cls='verdict')}"


def _override(row: dict[str, Any], arm: dict[str, Any] | None) -> str:
    if not row["override"]:
        return "-"
    reason = (arm or {}).get("reason")
    return f"by {esc(row['actor'])}: {esc(reason or '?')}"


def _trip_rule(row: dict[str, Any]) -> str:
    if row["trip_rate"] is None:
        return "-"
    return f"{pct(row['trip_rate'])} in {format_age((row['trip_window_s'] or 0) * 1000)}"


def _trip(row: dict[str, Any], trip: dict[str, Any] | None) -> str:
    if row["state"] != "tripped":
        return "-"
    text = esc(row["trip_reason"] or "?")
    if trip is not None:
        text += esc(
            f" at {trip.get('recorded_at', '?')}: {trip.get('refusals', '?')} refused of "
            f"{trip.get('decisions', '?')} decisions"
        )
        if trip.get("detail"):
            text += f" ({esc(trip['detail'])})"
    seq = row["ended_seq"]
    return text + ("" if seq is None else f" · {link(f'/decision/{seq}', f'record {seq}')}")


def enforce_page(c: Console, q: Query) -> bytes:
    """Every canary, armed first, then the others by repository."""
    data = status(c.home, now=c.clock(), vocabulary=c.vocabulary)
    rows = sorted(data["canaries"], key=lambda r: (r["state"] != "armed", r["repo"]))
    cells = []
    with AuditLog.open(c.home, read_only=True) as log:
        for row in rows:
            verdict = _record(log, row["gate_seq"])
            arm = _record(log, row["arm_seq"])
            trip = _record(log, row["ended_seq"]) if row["state"] == "tripped" else None
            window = row["window"]
            cells.append(
                [
                    esc(row["repo"]),
                    _state(row),
                    _revision(row),
                    _gate(row, verdict),
                    _override(row, arm),
                    _trip_rule(row),
                    _trip(row, trip),
                    f"{num(window['decisions'])} / {num(window['refusals'])}",
                    esc(f"{row['armed_at']} by {row['actor']}"),
                ]
            )
    armed = data["armed"]
    summary = (
        f'<p id="enforce-summary">{num(len(armed))} armed: {esc(", ".join(armed))}.</p>'
        if armed
        else '<p id="enforce-summary">Nothing is armed: every spawn runs as it would '
        "without enforcement.</p>"
    )
    head = [
        "repository",
        "state",
        "pinned revision",
        "gate verdict",
        "override",
        "trip rule",
        "trip",
        "window decisions / refused",
        "armed",
    ]
    body = summary + (
        table(head, cells, tid="canaries", numeric_from=99)
        if cells
        else '<p id="canaries">No canary was ever armed in this home.</p>'
    )
    note = (
        "<p>A canary covers one repository on the gateway transport and enforces the revision "
        "its gate passed (pinned). <code>rensei enforce arm</code> gates and arms, "
        "<code>rensei enforce disarm</code> disarms; this page only reads. "
        "See docs/enforcement.md.</p>"
    )
    return page("Enforcement", "/enforce", note + body)
