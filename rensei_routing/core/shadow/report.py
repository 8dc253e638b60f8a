"""The shadow report: agreement rate, divergence kinds, ungoverned direct-HTTP share and
held/rejected counts over shadow records, per group (document 001, Consequences: "burn in
disagreement rates per repo, role, and mechanism").

Pure: an accumulator fed one :class:`~rensei_routing.core.shadow.compare.ShadowDecision` at a time
(so a caller can stream a chain of any length through it in constant memory beyond one row per
group) and the frozen rows it yields. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ..routing.decision import HELD, REJECTED
from .compare import DIRECT_HTTP, DIVERGENCES, NONE, ShadowDecision
from .facts import ShadowFact

__all__ = ["GROUPINGS", "ReportRow", "ShadowReport", "group_key"]

#: ``--by`` dimensions, and the value a record without one is grouped under.
GROUPINGS: Final = ("repo", "role", "mechanism", "seam", "transport")
NO_VALUE: Final = "(none)"
ALL: Final = "(all)"


def group_key(record: ShadowDecision, by: str | None) -> str:
    """The group a record counts in under ``by`` (``None``: one group for everything).

    Raises:
        ValueError: ``by`` is not one of :data:`GROUPINGS` (a caller's bug).
    """
    if by is None:
        return ALL
    ctx = record.proposed.explanation.context
    if by == "repo":
        return NO_VALUE if ctx.repo is None else ctx.repo.value
    if by == "role":
        return ctx.role or NO_VALUE
    if by == "mechanism":
        return record.actual.mechanism
    if by == "seam":
        return record.seam
    if by == "transport":
        return record.actual.transport
    raise ValueError(f"unknown grouping {by!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportRow:
    """One group's figures. Rates are ``None`` for a group with no spawns."""

    group: str
    spawns: int
    agreed: int
    divergence: tuple[tuple[str, int], ...]
    direct_http: int
    held: int
    rejected: int

    @property
    def agreement_rate(self) -> float | None:
        return None if not self.spawns else self.agreed / self.spawns

    @property
    def direct_http_share(self) -> float | None:
        return None if not self.spawns else self.direct_http / self.spawns

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "spawns": self.spawns,
            "agreed": self.agreed,
            "agreement_rate": self.agreement_rate,
            "divergence": dict(self.divergence),
            "direct_http": self.direct_http,
            "direct_http_share": self.direct_http_share,
            "held": self.held,
            "rejected": self.rejected,
        }


@dataclass(slots=True)
class _Tally:
    spawns: int = 0
    agreed: int = 0
    direct_http: int = 0
    held: int = 0
    rejected: int = 0
    divergence: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIVERGENCES, 0))

    def add(self, record: ShadowDecision) -> None:
        self.spawns += 1
        self.agreed += record.agreed
        self.divergence[record.divergence] += 1
        self.direct_http += record.actual.transport == DIRECT_HTTP
        outcome = record.proposed.outcome
        self.held += outcome == HELD
        self.rejected += outcome == REJECTED

    def add_fact(self, fact: ShadowFact, n: int) -> None:
        self.spawns += n
        self.agreed += n if fact.divergence == NONE else 0
        self.divergence[fact.divergence] = self.divergence.get(fact.divergence, 0) + n
        self.direct_http += n if fact.transport == DIRECT_HTTP else 0
        self.held += n if fact.outcome == HELD else 0
        self.rejected += n if fact.outcome == REJECTED else 0

    def row(self, group: str) -> ReportRow:
        return ReportRow(
            group=group,
            spawns=self.spawns,
            agreed=self.agreed,
            divergence=tuple((k, self.divergence[k]) for k in DIVERGENCES),
            direct_http=self.direct_http,
            held=self.held,
            rejected=self.rejected,
        )


class ShadowReport:
    """Accumulates shadow records per group (``by`` one of :data:`GROUPINGS`, or ``None``)."""

    __slots__ = ("_groups", "_key", "_total", "by")

    def __init__(self, by: str | None = None) -> None:
        if by is not None and by not in GROUPINGS:
            raise ValueError(f"unknown grouping {by!r}")
        self.by = by
        self._groups: dict[str, _Tally] = {}
        self._total = _Tally()
        self._key: Callable[[ShadowDecision], str] = lambda r: group_key(r, by)

    def add(self, record: ShadowDecision) -> None:
        """Count one record in its group and in the total."""
        key = self._key(record)
        tally = self._groups.get(key)
        if tally is None:
            tally = self._groups[key] = _Tally()
        tally.add(record)
        self._total.add(record)

    def add_fact(self, fact: ShadowFact, n: int = 1) -> None:
        """Count ``n`` records of one :class:`~.facts.ShadowFact` (what :meth:`add` counts for
        each record it came from: the console reads facts from the store's index)."""
        key = ALL if self.by is None else str(getattr(fact, self.by))
        tally = self._groups.get(key)
        if tally is None:
            tally = self._groups[key] = _Tally()
        tally.add_fact(fact, n)
        self._total.add_fact(fact, n)

    @property
    def total(self) -> ReportRow:
        """Every record counted."""
        return self._total.row(ALL)

    def rows(self) -> tuple[ReportRow, ...]:
        """One row per group, most spawns first (ties by group name)."""
        rows = [t.row(g) for g, t in self._groups.items()]
        return tuple(sorted(rows, key=lambda r: (-r.spawns, r.group)))
