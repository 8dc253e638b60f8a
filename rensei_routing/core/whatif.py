"""What-if: how the decisions for recorded contexts would change under a candidate policy set.

Pure: an accumulator fed ``(seq, before, after)`` decision pairs (the same context explained
against the current revision and against the candidate), and the frozen summary it yields: a
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

from .decision import HELD, REJECTED, SELECTED, RouteDecision

__all__ = ["COUNTERS", "Example", "WhatIf", "WhatIfCell", "WhatIfSummary", "changed", "label"]

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


def _key(d: RouteDecision) -> tuple[Any, ...]:
    return (d.outcome, d.reason, d.policy_id, d.provider_binding, d.effective_model, d.account_id)


def changed(before: RouteDecision, after: RouteDecision) -> bool:
    """Whether ``after`` routes (or refuses) differently from ``before``."""
    return _key(before) != _key(after)


def label(decision: RouteDecision) -> str:
    """``outcome/reason``: a matrix row or column."""
    return f"{decision.outcome}/{decision.reason}"


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
        self._cells: dict[tuple[str, str], _Cell] = {}
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._examples: dict[str, list[Example]] = {k: [] for k in COUNTERS}

    def _count(self, name: str, example: Example) -> None:
        self._counts[name] += 1
        kept = self._examples[name]
        if len(kept) < self._keep:
            kept.append(example)

    def add(self, seq: int, before: RouteDecision, after: RouteDecision) -> None:
        """Count one recorded context explained both ways."""
        self._contexts += 1
        cell = self._cells.get((label(before), label(after)))
        if cell is None:
            cell = self._cells[(label(before), label(after))] = _Cell()
        cell.count += 1
        if not changed(before, after):
            return
        example = Example(seq=seq, before_id=before.decision_id, after_id=after.decision_id)
        cell.changed += 1
        if len(cell.examples) < self._keep:
            cell.examples.append(example)
        self._count("changed", example)
        if before.outcome == SELECTED and after.outcome == SELECTED:
            if before.provider_binding != after.provider_binding:
                self._count("moved_provider", example)
            if before.effective_model != after.effective_model:
                self._count("moved_model", example)
            if before.account_id != after.account_id:
                self._count("moved_account", example)
        if before.policy_id != after.policy_id:
            self._count("policy_changed", example)
        if after.outcome != before.outcome:
            if after.outcome == HELD:
                self._count("newly_held", example)
            elif after.outcome == REJECTED:
                self._count("newly_rejected", example)
            elif after.outcome == SELECTED:
                self._count("newly_selected", example)

    def summary(self) -> WhatIfSummary:
        """The frozen result; cells ordered by count (largest first), then labels."""
        cells = sorted(
            (
                WhatIfCell(
                    before=b,
                    after=a,
                    count=c.count,
                    changed=c.changed,
                    examples=tuple(c.examples),
                )
                for (b, a), c in self._cells.items()
            ),
            key=lambda c: (-c.count, c.before, c.after),
        )
        return WhatIfSummary(
            contexts=self._contexts,
            counts=tuple((k, self._counts[k]) for k in COUNTERS),
            examples=tuple((k, tuple(self._examples[k])) for k in COUNTERS),
            cells=tuple(cells),
        )
