"""What-if: how the decisions for recorded contexts would change under a candidate policy set.

Pure: reading a recorded context out of a stored payload's canonical text, and an accumulator
fed ``(seq, before, after)`` verdict pairs (the same context explained against the current
revision and against the candidate; as :class:`Verdict` values, or as the plain tuples of
:func:`verdict_row` a replay keeps in its cache), and the frozen summary it yields: a
before/after matrix of ``outcome/reason`` with example decision ids per cell, the routes that
would move provider, model or account, and the spawns newly held, rejected or selected. Memory
is one entry per matrix cell (at most 9 x 9 reason pairs) with a bounded number of examples,
whatever the number of contexts. No I/O, no clock.

A decision *changes* when its outcome, reason, winning policy, provider binding, model or
account differs (the decision id always differs: it names the snapshot). Moves are counted
between two selected decisions only; a spawn that is no longer selected is counted as newly
held or rejected instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from .._parse import STRICT_DECODER
from ..routing.decision import HELD, REJECTED, SELECTED, RouteDecision

__all__ = [
    "COUNTERS",
    "Example",
    "Verdict",
    "VerdictRow",
    "WhatIf",
    "WhatIfCell",
    "WhatIfSummary",
    "changed",
    "label",
    "stored_context",
    "stored_context_text",
    "verdict_row",
]

#: Example decisions kept per cell and per counter.
DEFAULT_EXAMPLES: Final = 3
COUNTERS: Final = (
    "changed",
    "moved_provider",
    "moved_model",
    "moved_account",
    "policy_changed",
    "newly_held",
    "newly_rejected",
    "newly_selected",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What a what-if compares of one decision (kept instead of the decision, so a cache of
    verdicts stays small)."""

    decision_id: str
    outcome: str
    reason: str
    policy_id: str | None
    provider_binding: str | None
    effective_model: str | None
    account_id: str | None

    @classmethod
    def of(cls, d: RouteDecision) -> Verdict:
        return cls(
            decision_id=d.decision_id,
            outcome=d.outcome,
            reason=d.reason,
            policy_id=d.policy_id,
            provider_binding=d.provider_binding,
            effective_model=d.effective_model,
            account_id=d.account_id,
        )

    @property
    def label(self) -> str:
        """``outcome/reason``: a matrix row or column."""
        return f"{self.outcome}/{self.reason}"

    def key(self) -> tuple[Any, ...]:
        return (
            self.outcome,
            self.reason,
            self.policy_id,
            self.provider_binding,
            self.effective_model,
            self.account_id,
        )

    def row(self) -> VerdictRow:
        """The same fields as :func:`verdict_row` gives for the decision."""
        return (*self.key(), self.decision_id)


#: A verdict as a plain tuple: :meth:`Verdict.key`'s six fields, then the decision id. A tuple
#: of strings is cheap to build and to keep (the cyclic collector stops tracking it), which is
#: what a replay caching the verdicts of thousands of contexts wants.
VerdictRow = tuple[str, str, str | None, str | None, str | None, str | None, str]


def verdict_row(d: RouteDecision) -> VerdictRow:
    """What a what-if compares of ``d`` (:class:`Verdict`'s fields) as a :data:`VerdictRow`."""
    return (
        d.outcome,
        d.reason,
        d.policy_id,
        d.provider_binding,
        d.effective_model,
        d.account_id,
        d.decision_id,
    )


def changed(before: Verdict, after: Verdict) -> bool:
    """Whether ``after`` routes (or refuses) differently from ``before``."""
    return before.key() != after.key()


def label(decision: RouteDecision | Verdict) -> str:
    """``outcome/reason``: a matrix row or column."""
    return f"{decision.outcome}/{decision.reason}"


_EXPLANATION: Final = '"explanation":{'
_CONTEXT: Final = '"context":'
_DECISION_ID: Final = '"decision_id":'
#: The key after ``context`` in a canonical explanation (keys sorted): a full one's accounts,
#: a compact one's marker, or the rivals count of a compact one stored by ids.
_AFTER_CONTEXT: Final = ',"eligible_account_ids":'
_AFTER_COMPACT_CONTEXT: Final = ',"trace":"compact",'
_AFTER_BRIEF_CONTEXT: Final = ',"outranked":'


def stored_context_text(text: str) -> str | None:
    """The canonical text of the context a stored audit payload carries, found without parsing
    it, or ``None`` when the text does not look like a stored decision (the caller then parses
    the whole payload).

    A stored payload is RFC 8785 text: keys are sorted and every quote inside a string is
    escaped, so ``"context":`` can only be a key, and the first one after a decision's
    ``"explanation":{`` (whose earlier keys are ``conflicting_policy_ids`` and ``considered``)
    is that decision's context, in a shadow record (``proposed``) and in a plain decision
    alike; the context runs to the explanation's next key, ``eligible_account_ids`` (or a
    compact explanation's ``trace``, or ``outranked`` when it is stored by ids), whose ``,"``
    cannot occur inside a string either. Only a
    context nested in a way no context is (the key again inside it) could end elsewhere; then
    the text returned is a proper prefix of the value, which is never JSON on its own, so
    parsing it (as :func:`stored_context` does, and a reader must before trusting it) tells.
    Skipping the rest is what makes replaying a long chain affordable; a replay that has seen a
    context's text already need not parse it.
    """
    i = text.find(_EXPLANATION)
    if i < 0 or text.rfind(_DECISION_ID, 0, i) < 0:
        return None
    j = text.find(_CONTEXT, i)
    if j < 0:
        return None
    start = j + len(_CONTEXT)
    end = text.find(_AFTER_CONTEXT, start)
    for after in (_AFTER_COMPACT_CONTEXT, _AFTER_BRIEF_CONTEXT):
        compact = text.find(after, start, None if end < 0 else end)
        if compact >= 0:
            end = compact
    return None if end < 0 else text[start:end]


def stored_context(text: str) -> tuple[str, Any] | None:
    """:func:`stored_context_text` and its JSON value (read strictly: no duplicate keys), or
    ``None`` when either is missing."""
    found = stored_context_text(text)
    if found is None:
        return None
    try:
        return found, STRICT_DECODER.decode(found)
    except (ValueError, RecursionError):
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Example:
    """One recorded spawn behind a figure: its audit seq and both decision ids."""

    seq: int
    before_id: str
    after_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "before_decision_id": self.before_id,
            "after_decision_id": self.after_id,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WhatIfCell:
    """How many contexts went from ``before`` to ``after`` (``outcome/reason`` labels)."""

    before: str
    after: str
    count: int
    changed: int
    examples: tuple[Example, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "count": self.count,
            "changed": self.changed,
            "examples": [e.to_dict() for e in self.examples],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WhatIfSummary:
    """The whole comparison: totals, the matrix and the counters with their examples."""

    contexts: int
    counts: tuple[tuple[str, int], ...]
    examples: tuple[tuple[str, tuple[Example, ...]], ...]
    cells: tuple[WhatIfCell, ...]

    def count(self, name: str) -> int:
        """One counter of :data:`COUNTERS`."""
        return dict(self.counts)[name]

    @property
    def any_change(self) -> bool:
        return self.count("changed") > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "contexts": self.contexts,
            **dict(self.counts),
            "examples": {k: [e.to_dict() for e in v] for k, v in self.examples},
            "matrix": [c.to_dict() for c in self.cells],
        }


@dataclass(slots=True)
class _Cell:
    count: int = 0
    changed: int = 0
    examples: list[Example] = field(default_factory=list)


class WhatIf:
    """Accumulates before/after pairs; :meth:`summary` freezes them."""

    __slots__ = ("_cells", "_contexts", "_counts", "_examples", "_keep")

    def __init__(self, *, examples: int = DEFAULT_EXAMPLES) -> None:
        self._keep = max(0, examples)
        self._contexts = 0
        self._cells: dict[tuple[str, str, str, str], _Cell] = {}
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._examples: dict[str, list[Example]] = {k: [] for k in COUNTERS}

    def _count(self, name: str, example: Example) -> None:
        self._counts[name] += 1
        kept = self._examples[name]
        if len(kept) < self._keep:
            kept.append(example)

    def add(self, seq: int, before: Verdict, after: Verdict) -> None:
        """Count one recorded context explained both ways."""
        self.add_row(seq, before.row(), after.row())

    def add_row(self, seq: int, before: VerdictRow, after: VerdictRow) -> None:
        """:meth:`add` of two :data:`VerdictRow` values."""
        self._contexts += 1
        # Cells are keyed by the four label parts; the labels are written once, in summary().
        where = (before[0], before[1], after[0], after[1])
        cell = self._cells.get(where)
        if cell is None:
            cell = self._cells[where] = _Cell()
        cell.count += 1
        if before[:6] == after[:6]:  # not changed (the decision ids always differ)
            return
        example = Example(seq=seq, before_id=before[6], after_id=after[6])
        cell.changed += 1
        if len(cell.examples) < self._keep:
            cell.examples.append(example)
        self._count("changed", example)
        b_outcome, _, b_policy, b_binding, b_model, b_account, _ = before
        a_outcome, _, a_policy, a_binding, a_model, a_account, _ = after
        if b_outcome == SELECTED and a_outcome == SELECTED:
            if b_binding != a_binding:
                self._count("moved_provider", example)
            if b_model != a_model:
                self._count("moved_model", example)
            if b_account != a_account:
                self._count("moved_account", example)
        if b_policy != a_policy:
            self._count("policy_changed", example)
        if a_outcome != b_outcome:
            if a_outcome == HELD:
                self._count("newly_held", example)
            elif a_outcome == REJECTED:
                self._count("newly_rejected", example)
            elif a_outcome == SELECTED:
                self._count("newly_selected", example)

    def summary(self) -> WhatIfSummary:
        """The frozen result; cells ordered by count (largest first), then labels."""
        cells = sorted(
            (
                WhatIfCell(
                    before=f"{b_outcome}/{b_reason}",
                    after=f"{a_outcome}/{a_reason}",
                    count=c.count,
                    changed=c.changed,
                    examples=tuple(c.examples),
                )
                for (b_outcome, b_reason, a_outcome, a_reason), c in self._cells.items()
            ),
            key=lambda c: (-c.count, c.before, c.after),
        )
        return WhatIfSummary(
            contexts=self._contexts,
            counts=tuple((k, self._counts[k]) for k in COUNTERS),
            examples=tuple((k, tuple(self._examples[k])) for k in COUNTERS),
            cells=tuple(cells),
        )
